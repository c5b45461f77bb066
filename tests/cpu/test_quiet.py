"""The CPU backend's dropped log lines: exactly those messages from exactly those loggers go, everything else stays;
and each message still exists upstream under that logger (a probe: an upgrade that renames it turns this red)."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

import pytest

from verl_ext.cpu import quiet


class _Capture(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.mark.parametrize("name,prefix", quiet.DROPPED)
def test_the_message_is_dropped_and_others_from_the_same_logger_are_kept(name, prefix):
    quiet.install()
    quiet.install()  # idempotent: one filter per message
    log = quiet.logger_for(name)
    assert sum(isinstance(f, quiet._DropMessage) for f in log.filters) == 1
    cap = _Capture()
    log.addHandler(cap)
    level, propagate = log.level, log.propagate
    log.setLevel(logging.INFO)
    log.propagate = False
    try:
        log.warning(
            prefix + (" suffix" if "%s" not in prefix else ""), *(("RotaryEmbedding",) if "%s" in prefix else ())
        )
        log.warning("something that matters")
    finally:
        log.removeHandler(cap)
        log.setLevel(level)
        log.propagate = propagate
    assert cap.messages == ["something that matters"]


@pytest.mark.parametrize("name,prefix", quiet.DROPPED)
def test_upstream_still_logs_that_message_from_that_module(name, prefix):
    module = name.removesuffix(".py").replace("/", ".")
    source = Path(importlib.util.find_spec(module).origin).read_text()
    assert f'"{prefix}' in source or f'f"{prefix}' in source, f"{module} no longer logs {prefix!r}"
    # verl's module loggers are named by __file__, vLLM's by module name: the filter must sit on the right one
    assert ("getLogger(__file__)" in source) == name.endswith(".py")
