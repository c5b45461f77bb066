"""`make test`'s end-to-end phase collects only the test_e2e_*.py files (scripts/run_tests.sh: importing the whole
suite to deselect it took ~7 s): every test marked e2e must live in such a file, or the phase would never run it.
Read statically (ast: a `pytest.mark.e2e` decorator or a module `pytestmark` naming it)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _marks_e2e(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "e2e":
            inner = node.value
            if isinstance(inner, ast.Attribute) and inner.attr == "mark":
                return True
    return False


def misplaced_e2e_tests(tests_dir: Path) -> list[str]:
    """The test modules under `tests_dir` that mark a test e2e but are not named test_e2e_*.py."""
    return sorted(
        str(path.relative_to(tests_dir))
        for path in tests_dir.rglob("test_*.py")
        if not path.name.startswith("test_e2e_") and _marks_e2e(ast.parse(path.read_text()))
    )


def test_every_e2e_test_is_in_a_file_the_e2e_phase_collects():
    assert misplaced_e2e_tests(ROOT / "tests") == []
    script = (ROOT / "scripts" / "run_tests.sh").read_text()
    assert "find tests -name 'test_e2e_*.py'" in script and '-m "e2e and not multinode" "${e2e_files[@]}"' in script


def test_the_check_sees_an_e2e_test_elsewhere(tmp_path):
    (tmp_path / "test_plain.py").write_text("import pytest\n\n@pytest.mark.e2e\ndef test_x():\n    pass\n")
    (tmp_path / "test_module.py").write_text("import pytest\n\npytestmark = [pytest.mark.e2e]\n")
    (tmp_path / "test_e2e_ok.py").write_text("import pytest\n\npytestmark = pytest.mark.e2e\n")
    (tmp_path / "test_unit.py").write_text("import pytest\n\n@pytest.mark.gpu\ndef test_y():\n    pass\n")
    assert misplaced_e2e_tests(tmp_path) == ["test_module.py", "test_plain.py"]
