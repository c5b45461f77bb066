"""The teacher launcher's tests share the released model's directory (fetched once, on first use)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def released_dir():
    from verl_ext.pretrained.smollm2 import ensure_smollm2

    return ensure_smollm2()
