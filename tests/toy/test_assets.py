"""The asset cache key: every build input that changes what is built changes the directory."""

from __future__ import annotations

from verl_ext.toy import tokenizer
from verl_ext.toy.assets import TinySpec


def test_key_changes_with_the_chat_template_and_the_difficulty(monkeypatch):
    flat, heavy = TinySpec(), TinySpec(difficulty="heavy_tail")
    assert flat.key() != heavy.key() and flat.key() == TinySpec().key()
    before = flat.key()
    monkeypatch.setattr(tokenizer, "CHAT_TEMPLATE", tokenizer.CHAT_TEMPLATE + "{# changed #}")
    assert flat.key() != before  # the template is saved into the model directory: a new one is a new build
