"""The mathematics_dataset shims (verl_ext/mathgen/compat.py): each upstream behaviour they work around still holds
(checked in fresh processes, where no shim has run), and with them every generator the task uses imports and runs.
A red test here after an upgrade means a shim (or the list of usable modules) can change."""

import os
import random
import subprocess
import sys

import pytest

from verl_ext.mathgen import compat, task


def _run(code: str, hash_seed: str = "0") -> str:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_sympy_still_lacks_base_solution_linear_and_the_package_still_needs_it():
    """When sympy's diophantine package exports base_solution_linear again, or mathematics_dataset stops importing
    it from there, this fails: shim 1 can go."""
    out = _run(
        "from verl_ext.mathgen import compat\n"
        "print(compat.base_solution_linear_still_needed())\n"
        "try:\n"
        "    import mathematics_dataset.modules.modules\n"
        "    print('imported')\n"
        "except ImportError as e:\n"
        "    print('ImportError', 'base_solution_linear' in str(e))\n"
    )
    assert out.splitlines() == ["True", "ImportError True"]


# Without shim 2: the letters drawn for one `random` seed; with it: the same, under two hash seeds.
_LETTERS = """
import random
from verl_ext.mathgen import compat
compat.apply_base_solution_linear()
from mathematics_dataset.util import composition
print(compat.symbol_order_still_needed())
def letters():
    random.seed(0)
    return ''.join(composition.Context().pop() for _ in range(12))
print(letters())
compat.import_modules()
print(compat.symbol_order_still_needed(), letters())
"""


def test_upstream_letter_choice_still_depends_on_the_hash_seed_and_the_shim_fixes_it():
    """When mathematics_dataset draws variable letters in a fixed order by itself, the unshimmed letters agree
    across hash seeds and this fails: shim 2 can go."""
    one, two = (_run(_LETTERS, hash_seed=h).splitlines() for h in ("1", "2"))
    assert one[0] == two[0] == "True"
    assert one[1] != two[1]  # unshimmed: the same random seed, different letters
    assert one[2] == two[2] and one[2].startswith("False ")  # shimmed: identical, and the probe sees the shim


def test_import_modules_is_idempotent_and_every_task_generator_produces_problems():
    first = compat.import_modules()
    assert compat.import_modules() is first
    assert not compat.symbol_order_still_needed()
    state = random.getstate()
    try:
        random.seed(0)
        for band in (lambda r: r, lambda r: (1, 1)):  # the generator's train range, the task's entropy floor
            tree = first.train(band)
            for module, submodule in task.MODULES:
                for _ in range(5):
                    problem = tree[module][submodule]()
                    assert str(problem.question).strip() and str(problem.answer).strip()
    finally:
        random.setstate(state)


@pytest.mark.parametrize("name", ["add", "expand", "collect", "compose", "coefficient_named"])
def test_polynomial_generators_still_break_on_numpy_2(name):
    """Why polynomials (and calculus, the *_composed modules) are not in MODULES: they call ndarray.itemset, gone
    in NumPy 2. When this fails, upstream fixed it and those modules could be considered."""
    tree = compat.import_modules().train(lambda r: r)
    state = random.getstate()
    try:
        random.seed(0)
        with pytest.raises(AttributeError, match="itemset"):
            tree["polynomials"][name]()
    finally:
        random.setstate(state)
