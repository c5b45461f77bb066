"""The scripts are files run by path, not modules of a package: `load_script` imports one from scripts/ the way
Python runs it (its folder first on the import path, so a benchmark finds its sibling benchlib.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@pytest.fixture
def load_script(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))

    def load(name: str):
        spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, name, mod)  # where a dataclass looks its module up
        spec.loader.exec_module(mod)
        return mod

    return load
