"""Every workaround DeepMind's ``mathematics_dataset`` needs here, in one place.

Written against mathematics-dataset 1.0.1 (its last release, 2019), sympy 1.14.0 and numpy 2.3.5. Nothing in the
installed package is edited: ``import_modules()`` applies the shims below (idempotent) and then imports
``mathematics_dataset.modules.modules``. Each shim has a probe, ``<name>_still_needed()``, that checks the upstream
behaviour it works around; tests/mathgen/test_compat.py asserts every probe is True in a fresh process, so an
upgrade that fixes (or changes) the behaviour turns a test red instead of leaving a stale shim.

1. ``base_solution_linear``: ``mathematics_dataset/sample/polynomials.py`` (imported by every module through
   ``util/composition.py``) does ``from sympy.solvers.diophantine import base_solution_linear``. sympy 1.6 turned
   ``sympy/solvers/diophantine.py`` into the package ``sympy/solvers/diophantine/`` whose ``__init__`` re-exports
   only ``diophantine``, ``classify_diop`` (and later ``diop_solve``); the function lives on in
   ``sympy.solvers.diophantine.diophantine``. So with any sympy >= 1.6 the package fails to import. The shim sets
   the attribute on the package module (the ``sys.modules`` entry: the attribute ``sympy.solvers.diophantine`` is
   the function ``diophantine``, which shadows the subpackage).
2. ``symbol_order``: ``util/composition.Context.pop`` picks a variable letter with
   ``random.choice(list(allowed))`` where ``allowed`` is a ``set`` of strings, whose order depends on the process's
   hash seed (``PYTHONHASHSEED``). The same ``random`` seed then gives ``Solve 2*x = 6 for x.`` in one process and
   ``... for q.`` in another, so generated files would not be reproducible. The shim draws from the sorted letters
   instead: the same one ``random.choice`` call over a list of the same length, only in a fixed order.

Not shimmed, and therefore not used by ``verl_ext.mathgen.task``: the modules that call ``ndarray.itemset``
(removed in NumPy 2): polynomials, calculus and the ``*_composed`` generators that build polynomials.
"""

from __future__ import annotations

import importlib
import random
import sys

VERSIONS = {"mathematics-dataset": "1.0.1", "sympy": "1.14.0", "numpy": "2.3.5"}

_DIOPHANTINE_PACKAGE = "sympy.solvers.diophantine"
_DIOPHANTINE_MODULE = "sympy.solvers.diophantine.diophantine"
_MISSING_NAME = "base_solution_linear"


# --- 1. base_solution_linear --------------------------------------------------------------------------------------


def _diophantine_package():
    """The package module itself (``import sympy.solvers.diophantine as d`` would give the function instead)."""
    importlib.import_module(_DIOPHANTINE_PACKAGE)
    return sys.modules[_DIOPHANTINE_PACKAGE]


def base_solution_linear_still_needed() -> bool:
    """True while sympy's diophantine package does not export ``base_solution_linear`` by itself. Meaningful only
    in a process where the shim has not run yet (the test asks in a fresh subprocess)."""
    return not hasattr(_diophantine_package(), _MISSING_NAME)


def apply_base_solution_linear() -> None:
    package = _diophantine_package()
    if not hasattr(package, _MISSING_NAME):
        setattr(package, _MISSING_NAME, getattr(importlib.import_module(_DIOPHANTINE_MODULE), _MISSING_NAME))


# --- 2. symbol_order ------------------------------------------------------------------------------------------------


def _sorted_pop(self):
    """``Context.pop`` of mathematics-dataset 1.0.1 with the free letters in sorted order (see the docstring)."""
    from mathematics_dataset.util import composition

    allowed = (
        composition._ALLOWED_SYMBOLS.difference(self._relation_symbols)
        .difference(self._self_symbols)
        .difference(self._child_symbols)
    )
    if not allowed:
        raise ValueError("Ran out of symbols")
    symbol = random.choice(sorted(allowed))
    self._self_symbols.add(symbol)
    return symbol


def symbol_order_still_needed() -> bool:
    """True while upstream draws letters from a hash-ordered ``set``: ``_ALLOWED_SYMBOLS`` is a set and the
    unpatched ``Context.pop`` is not ours. Whether its order really changes with the hash seed is checked by the
    test across processes."""
    from mathematics_dataset.util import composition

    return isinstance(composition._ALLOWED_SYMBOLS, (set, frozenset)) and composition.Context.pop is not _sorted_pop


def apply_symbol_order() -> None:
    from mathematics_dataset.util import composition

    composition.Context.pop = _sorted_pop


# --- entry point ----------------------------------------------------------------------------------------------------


def import_modules():
    """``mathematics_dataset.modules.modules`` with both shims applied. Safe to call any number of times."""
    apply_base_solution_linear()
    apply_symbol_order()  # imports util.composition, which needs shim 1 first
    return importlib.import_module("mathematics_dataset.modules.modules")
