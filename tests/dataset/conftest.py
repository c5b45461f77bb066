import pytest


@pytest.fixture(scope="session")
def tiny_assets():
    from verl_ext.toy import ensure_tiny_assets

    return ensure_tiny_assets()


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_assets):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_assets.model_dir)
