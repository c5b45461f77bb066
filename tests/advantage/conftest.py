"""Fixtures of the advantage tests: the project's tiny byte-level BPE tokenizer (built once, then cached)."""

import pytest


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from transformers import AutoTokenizer

    from verl_ext.toy import ensure_tiny_assets

    return AutoTokenizer.from_pretrained(ensure_tiny_assets().model_dir)
