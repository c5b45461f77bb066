"""The import rules of docs/ARCHITECTURE.md, read statically from the source (ast; nothing is imported):

- the library never imports the recipes: no `verl_ext` module imports `recipe` or a module under it, at any level
  (module body or function body), nor names one in a string that is a whole dotted path (`"recipe.x.Cls"`, what
  `importlib` / verl's `load_class_from_fqn` would load), nor builds one at run time: a string expression that starts
  with `recipe.` (an f-string `f"recipe.{name}.main"`, `"recipe." + name`, `"recipe.%s" % name`,
  `"recipe.{}".format(name)`), or an `importlib.import_module(...)` / `__import__(...)` call whose module argument is
  `recipe` or starts with `recipe.` (string or built). A recipe is chosen by the user (its entry module, its config
  module) and reaches the library as a value, never spelled by the library. (Static: a prefix kept in a variable
  first is not seen.)
- no import cycle inside `verl_ext` among module-level imports. An import inside a function runs when the function
  is called, after every module involved has finished loading, so it is the accepted way to break a cycle (and to
  keep a heavy import off a light path); imports under `if TYPE_CHECKING:` never run and do not count.
- only shim modules patch verl or vLLM at run time (a module whose docstring starts `Shim for ` or, for a backend's
  collected workarounds, `Every workaround `; each names the test that fails when upstream changes): no other module
  assigns to an attribute or item of a name imported from verl or vLLM, or `setattr`s one;
- the boundaries inside packages (`BOUNDARIES`, at any level): no library module imports the example agents; the
  agent gateway's protocol translations import no HTTP (aiohttp, `wire/`, the server); the gateway imports nothing
  of its verl side (only itself, `agent/trajectory.py` and the text formats of `formats/`);
- the layers (`LAYERS`, the "layer" column of docs/ARCHITECTURE.md's package table, which must agree): a module
  imports, at any level, only its own package and the packages of lower layers, never one of its own layer or above
  (the upward imports still waiting for their move are listed in `PENDING_UPWARD`, each with what it waits for).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "verl_ext"
RECIPE_PATH = re.compile(r"recipe(\.\w+)+")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted((ROOT / PACKAGE).rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.Module, module: str, is_package: bool, module_level_only: bool) -> list[tuple[str, int]]:
    """(imported module, line) for every import statement; `from a import b` yields `a.b` and `a` (b may be a
    submodule or a name in a's __init__: the caller keeps whichever is a module)."""
    out: list[tuple[str, int]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if module_level_only and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if module_level_only and isinstance(child, ast.If) and _is_type_checking(child):
                for other in child.orelse:
                    visit(ast.Module(body=[other], type_ignores=[]))
                continue
            if isinstance(child, ast.Import):
                out.extend((a.name, child.lineno) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:  # relative: resolve against this module's package
                    pkg = module.split(".") if is_package else module.split(".")[:-1]
                    pkg = pkg[: len(pkg) - (child.level - 1)]
                    base = ".".join(pkg + ([base] if base else []))
                out.append((base, child.lineno))
                out.extend((f"{base}.{a.name}", child.lineno) for a in child.names if a.name != "*")
            visit(child)

    visit(tree)
    return out


def _recipe_paths(tree: ast.Module) -> list[tuple[str, int]]:
    """String constants that are a whole dotted path into the recipes (a class or module the code would load)."""
    return [
        (n.value, n.lineno)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and RECIPE_PATH.fullmatch(n.value)
    ]


IMPORT_CALLS = {"import_module", "__import__"}  # importlib.import_module / importlib.__import__ / builtins.__import__


def _leading_text(node: ast.AST) -> str | None:
    """The literal text a string expression starts with: a constant, an f-string's first part, the left operand of
    `+` / `%`, the template of `.format(...)`; None when it starts with a value (a name, a call)."""
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.JoinedStr):
        return _leading_text(node.values[0]) if node.values else ""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mod):
        return _leading_text(node.left)
    if _is_format_call(node):
        return _leading_text(node.func.value)
    return None


def _is_format_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format"


def _is_import_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    return (isinstance(f, ast.Name) and f.id in IMPORT_CALLS) or (
        isinstance(f, ast.Attribute) and f.attr in IMPORT_CALLS
    )


def _built_recipe_paths(tree: ast.Module) -> list[tuple[str, int]]:
    """Paths into the recipes built at run time (each expression once, outermost): a string expression that starts
    with `recipe.`, anywhere; an import call whose module argument (first positional, or `name=`) is `recipe` or
    starts with `recipe.`."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if _is_import_call(child):
                arg = child.args[0] if child.args else next((k.value for k in child.keywords if k.arg == "name"), None)
                text = _leading_text(arg) if arg is not None else None
                if text is not None and (text == "recipe" or text.startswith("recipe.")):
                    found.append((ast.unparse(child), child.lineno))
                    continue
            elif isinstance(child, ast.JoinedStr | ast.BinOp) or _is_format_call(child):
                if (_leading_text(child) or "").startswith("recipe."):
                    found.append((ast.unparse(child), child.lineno))
                    continue
            visit(child)

    visit(tree)
    return found


class Boundary(NamedTuple):
    """Modules under `within` (and not under `exempt`) import nothing under `forbidden` but what is under `allowed`.
    A name covers the module and everything under it; a module's own parent packages never count (they load first
    whatever it imports)."""

    within: str
    forbidden: tuple[str, ...]
    why: str
    allowed: tuple[str, ...] = ()
    exempt: tuple[str, ...] = ()


BOUNDARIES = (
    Boundary(
        "verl_ext",
        ("verl_ext.agent.examples",),
        "the example agents are programs users run, never library code",
        exempt=("verl_ext.agent.examples",),
    ),
    Boundary(
        "verl_ext.agent.gateway.protocols",
        ("aiohttp", "verl_ext.agent.gateway.wire", "verl_ext.agent.gateway.server"),
        "protocols/ is pure translation; its HTTP side is wire/",
    ),
    Boundary(
        "verl_ext.agent.gateway",
        ("verl_ext",),
        "the gateway knows nothing of its verl side (agent loop, trainer, settings)",
        allowed=("verl_ext.agent.gateway", "verl_ext.agent.trajectory", "verl_ext.formats"),
    ),
)


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def boundary_crossings(
    parsed: dict[str, tuple[ast.Module, bool]], boundaries: tuple[Boundary, ...]
) -> list[tuple[str, int, str, str]]:
    """(module, line, what it imports, why not) for every import, at any level, that crosses a boundary."""
    found = []
    for b in boundaries:
        for m, (tree, is_pkg) in parsed.items():
            if not _under(m, (b.within,)) or _under(m, b.exempt):
                continue
            for t, line in _imports(tree, m, is_pkg, module_level_only=False):
                if _under(t, b.forbidden) and not _under(t, b.allowed) and not m.startswith(t + "."):
                    found.append((m, line, t, b.why))
    return found


def _parsed() -> dict[str, tuple[ast.Module, bool]]:
    return {m: (ast.parse(p.read_text(), str(p)), p.name == "__init__.py") for m, p in _modules().items()}


def import_graph() -> dict[str, set[str]]:
    """verl_ext module -> the verl_ext modules its module-level imports load."""
    parsed = _parsed()
    graph: dict[str, set[str]] = {}
    for m, (tree, is_pkg) in parsed.items():
        graph[m] = {t for t, _ in _imports(tree, m, is_pkg, module_level_only=True) if t in parsed and t != m}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as [a, b, ..., a], or None (iterative depth-first search, white/grey/black)."""
    state: dict[str, int] = {}
    for start in sorted(graph):
        if state.get(start):
            continue
        stack = [(start, iter(sorted(graph[start])))]
        path = [start]
        state[start] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
                path.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append((nxt, iter(sorted(graph.get(nxt, ())))))
    return None


def test_the_library_never_imports_the_recipes():
    found = [
        f"{m}:{line} imports {t}"
        for m, (tree, is_pkg) in _parsed().items()
        for t, line in _imports(tree, m, is_pkg, module_level_only=False)
        if t == "recipe" or t.startswith("recipe.")
    ]
    found += [f"{m}:{line} names {s!r}" for m, (tree, _) in _parsed().items() for s, line in _recipe_paths(tree)]
    found += [f"{m}:{line} builds {s}" for m, (tree, _) in _parsed().items() for s, line in _built_recipe_paths(tree)]
    assert not found, "verl_ext must not import the recipes (docs/ARCHITECTURE.md):\n" + "\n".join(found)


def test_no_import_cycle_inside_the_library():
    cycle = find_cycle(import_graph())
    assert cycle is None, (
        "module-level import cycle inside verl_ext: " + " -> ".join(cycle) + " (break it by moving the shared "
        "piece down, or import inside the function that needs it; docs/ARCHITECTURE.md)"
    )


def test_no_import_crosses_a_boundary_inside_a_package():
    found = [f"{m}:{line} imports {t} ({why})" for m, line, t, why in boundary_crossings(_parsed(), BOUNDARIES)]
    assert not found, "import across a package boundary (docs/ARCHITECTURE.md):\n" + "\n".join(found)


def test_the_boundary_check_sees_each_crossing():
    """The boundaries on known modules: HTTP in a translation, the verl side in the gateway, an example agent in a
    library module (inside a function too) are found; the gateway's own modules and `trajectory`, its parent
    packages, and the examples importing each other are not."""
    src = {
        "verl_ext.agent.gateway.protocols.p": "from aiohttp import web\nfrom verl_ext.agent.gateway.core import X\n",
        "verl_ext.agent.gateway.protocols.q": "from verl_ext.agent.gateway.wire.base import read_json\n",
        "verl_ext.agent.gateway.core": (
            "from verl_ext.agent.trajectory import Round\nfrom verl_ext.agent import trajectory\n"
            "from verl_ext.agent.settings import AgentSettings\nimport verl\n"
        ),
        "verl_ext.trainer.t": "def f():\n    from verl_ext.agent.examples import calc_agent\n",
        "verl_ext.agent.examples.a": "from verl_ext.agent.examples.score import task\n",
    }
    parsed = {m: (ast.parse(code), False) for m, code in src.items()}
    found = {(m, line) for m, line, _, _ in boundary_crossings(parsed, BOUNDARIES)}
    assert found == {
        ("verl_ext.agent.gateway.protocols.p", 1),
        ("verl_ext.agent.gateway.protocols.q", 1),
        ("verl_ext.agent.gateway.core", 3),
        ("verl_ext.trainer.t", 2),
    }


def test_the_checks_see_what_they_look_for():
    """The checkers themselves on known input: a cycle is found, function-level and TYPE_CHECKING imports are not
    edges, relative imports resolve, and a recipe import is listed."""
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None
    src = (
        "from typing import TYPE_CHECKING\n"
        "from . import sib\n"
        "from ..other import thing\n"
        "if TYPE_CHECKING:\n    import verl_ext.hidden\n"
        "def f():\n    import recipe.fast_dapo.main\n"
    )
    tree = ast.parse(src)
    top = {t for t, _ in _imports(tree, "verl_ext.pkg.mod", False, module_level_only=True)}
    assert {"verl_ext.pkg.sib", "verl_ext.other.thing"} <= top
    assert "verl_ext.hidden" not in top and "recipe.fast_dapo.main" not in top
    every = {t for t, _ in _imports(tree, "verl_ext.pkg.mod", False, module_level_only=False)}
    assert "recipe.fast_dapo.main" in every
    named = ast.parse('X = "recipe.composer.composer_ray_trainer.RayComposerTrainer"\nY = "e.g. recipe.x.main"\n')
    assert [s for s, _ in _recipe_paths(named)] == ["recipe.composer.composer_ray_trainer.RayComposerTrainer"]
    assert len(import_graph()) > 50  # the real package was read


def test_a_recipe_path_built_at_run_time_is_seen():
    """The dynamic forms: what `importlib.import_module(f"recipe.{recipe}.main")` in a library module looks like, and
    its relatives, are listed; a module path that arrives as a value, and text that only mentions a recipe, are not."""
    src = (
        "import importlib\n"
        "from importlib import import_module\n"
        "def f(name, entry):\n"
        "    check = importlib.import_module(f'recipe.{name}.main').check\n"
        "    __import__('recipe.' + name)\n"
        "    import_module(name='recipe')\n"
        "    config_module = f'recipe.{name}.config'\n"
        "    c = 'recipe.%s.config' % name\n"
        "    d = 'recipe.{}.main'.format(name)\n"
        "    importlib.import_module(entry)\n"
        "    importlib.import_module(f'{entry}.check')\n"
        "    return f'unknown recipe {name!r}', f'see recipe/{name}/main.py', 'recipe.<name>.main is the entry'\n"
    )
    found = _built_recipe_paths(ast.parse(src))
    assert [line for _, line in found] == [4, 5, 6, 7, 8, 9], found
    assert found[0][0] == "importlib.import_module(f'recipe.{name}.main')"
    assert found[3][0] == "f'recipe.{name}.config'"
    assert not _recipe_paths(ast.parse(src))  # none of them is a whole dotted path: the older rule missed them all


# Layers: every import points down (docs/ARCHITECTURE.md "Layers, and which way imports go") ------------------------
# Each package (or top-level module) of verl_ext in one layer, bottom first; docs/ARCHITECTURE.md's package table
# gives each its layer number (1 = the bottom) and must agree with this, the one place the order is defined.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("formats", "metrics_log", "dataset", "reward", "shared_prefix"),  # 1: import no other package
    ("config", "cpu", "toy"),  # 2: composition, settings and the pre-flight; the CPU backend; the tiny assets
    ("advantage", "curriculum", "pretrained", "mathgen"),  # 3: estimators, curriculum bookkeeping, real model and task
    ("agent",),  # 4: the gateway and the agent loop
    ("composer",),  # 5: the Composer's parts (its agent channel reads agent episodes) and its teacher launcher
    ("trainer",),  # 6: the trainer base, the checks every recipe runs, the task runner, the drivers' `drive`
    ("launch",),  # 7: a driver as a child process, cluster jobs
    ("campaign",),  # 8: conditions x seeds over launch
    ("plugin", "doctor"),  # 9: entry modules: verl's plugin hook, the environment check
)
# Upward imports that stay until a move that needs files being edited elsewhere (issue 62): (module, the package it
# imports) -> what it waits for. An entry whose import is gone fails the test too, so the list only shrinks.
PENDING_UPWARD: dict[tuple[str, str], str] = {}


def package_of(module: str) -> str | None:
    """`verl_ext.agent.gateway.core` -> `agent`; `verl_ext.plugin` -> `plugin`; the root package -> None."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == PACKAGE else None


def upward_imports(
    parsed: dict[str, tuple[ast.Module, bool]], layers: tuple[tuple[str, ...], ...]
) -> list[tuple[str, int, str, str]]:
    """(module, line, what it imports, why) for every import, at any level (function bodies and TYPE_CHECKING blocks
    too: a lazy import up is still a dependency up), of another package of the same or a higher layer; once per
    statement and package. A package missing from `layers` is reported as such."""
    rank = {pkg: i for i, layer in enumerate(layers) for pkg in layer}
    found, seen = [], set()
    for m, (tree, is_pkg) in parsed.items():
        own = package_of(m)
        if own is None:
            continue
        if own not in rank:
            found.append((m, 0, own, "its package is in no layer"))
            continue
        for t, line in _imports(tree, m, is_pkg, module_level_only=False):
            other = package_of(t)
            if other is None or other == own or (m, line, other) in seen:
                continue
            seen.add((m, line, other))
            if other not in rank:
                found.append((m, line, t, f"{other} is in no layer"))
            elif rank[other] >= rank[own]:
                found.append((m, line, t, f"layer {rank[own] + 1} ({own}) imports layer {rank[other] + 1} ({other})"))
    return found


def test_every_import_points_down_the_layers():
    found = upward_imports(_parsed(), LAYERS)
    new = [f"{m}:{line} imports {t}: {why}" for m, line, t, why in found if (m, package_of(t)) not in PENDING_UPWARD]
    assert not new, (
        "an import up the layers (docs/ARCHITECTURE.md: move the shared piece down, or hand it in):\n" + "\n".join(new)
    )
    stale = set(PENDING_UPWARD) - {(m, package_of(t)) for m, _, t, _ in found}
    assert not stale, f"these pending upward imports are gone: take them out of PENDING_UPWARD: {sorted(stale)}"


def test_every_package_has_one_layer_and_the_docs_agree():
    names = [pkg for layer in LAYERS for pkg in layer]
    assert len(names) == len(set(names)), "a package in two layers"
    packages = {package_of(m) for m in _modules()} - {None}
    assert packages == set(names), (
        f"not layered: {sorted(packages - set(names))}; gone: {sorted(set(names) - packages)}"
    )
    table = re.findall(r"^\| `(\w+)(?:/|\.py)` \| (\d+) \|", (ROOT / "docs/ARCHITECTURE.md").read_text(), re.MULTILINE)
    documented = {name: int(layer) for name, layer in table}
    assert documented == {pkg: i + 1 for i, layer in enumerate(LAYERS) for pkg in layer}, (
        "docs/ARCHITECTURE.md's package table gives each package its layer (the column after its name), as LAYERS"
    )


def test_the_layer_check_sees_an_import_up():
    """A lazy import up (in a function), an import of the same layer and one of a package in no layer are found; an
    import down, one inside the package and the root package are not."""
    layers = (("formats", "reward"), ("config", "toy"), ("trainer",))
    src = {
        "verl_ext.config.preflight.checks": (
            "from verl_ext.config.errors import ConfigError\nfrom verl_ext.reward import x\n"
            "def f():\n    from verl_ext.trainer.fidelity import check\n"
        ),
        "verl_ext.toy.assets": "from verl_ext import config\nimport verl_ext\nfrom verl_ext.formats import calls\n",
        "verl_ext.trainer.t": "from verl_ext.config import settings\nfrom verl_ext.newpkg import y\n",
        "verl_ext.formats.line_calls": "import re\n",
    }
    parsed = {m: (ast.parse(code), False) for m, code in src.items()}
    found = {(m, line, t) for m, line, t, _ in upward_imports(parsed, layers)}
    assert found == {
        ("verl_ext.config.preflight.checks", 4, "verl_ext.trainer.fidelity"),
        ("verl_ext.toy.assets", 1, "verl_ext.config"),
        ("verl_ext.trainer.t", 2, "verl_ext.newpkg"),
    }


# Shims: a patch of verl or vLLM at run time lives in a shim module (docs/ARCHITECTURE.md "Shims") ------------------
SHIM_DOC = re.compile(r"^(Shim for |Every workaround )")  # one shim a module, or a backend's collected ones
UPSTREAM = ("verl", "vllm")


def is_shim(tree: ast.Module) -> bool:
    return bool(SHIM_DOC.match(ast.get_docstring(tree) or ""))


def _root(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute | ast.Subscript | ast.Call):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def upstream_patches(tree: ast.Module) -> list[tuple[str, int]]:
    """Assignments to an attribute or item of a name imported from verl or vLLM (at any level), and `setattr` on
    one: the direct form of a run-time patch. (Static: a patch through a name bound otherwise is not seen.)"""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.split(".")[0] in UPSTREAM}
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] in UPSTREAM:
            names |= {a.asname or a.name for a in node.names}
    found = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" and node.args:
            targets = [ast.Attribute(value=node.args[0], attr="_")]
        found += [
            (ast.unparse(t), node.lineno)
            for t in targets
            if isinstance(t, ast.Attribute | ast.Subscript) and _root(t) in names
        ]
    return sorted(found, key=lambda f: f[1])


def test_only_shim_modules_patch_verl_or_vllm():
    found = [
        f"{m}:{line} assigns {target}"
        for m, (tree, _) in _parsed().items()
        if not is_shim(tree)
        for target, line in upstream_patches(tree)
    ]
    assert not found, "a patch of verl/vLLM outside a shim module (docs/ARCHITECTURE.md, Shims):\n" + "\n".join(found)


def test_every_shim_names_a_test_that_exists():
    shims = {m: ast.get_docstring(tree) for m, (tree, _) in _parsed().items() if is_shim(tree)}
    assert {"verl_ext.cpu.shims", "verl_ext.trainer.update_flags", "verl_ext.agent.continuous_token"} <= set(shims)
    for module, doc in shims.items():
        tests = re.findall(r"tests/[\w/]+\.py", re.sub(r"/\s+", "/", doc))
        assert tests, f"{module}: a shim's docstring names the test that fails when upstream changes"
        missing = [t for t in tests if not (ROOT / t).exists()]
        assert not missing, f"{module} names tests that do not exist: {missing}"


def test_the_patch_check_sees_a_patch():
    src = (
        '"""A helper."""\n'
        "import verl.utils as vu\n"
        "from verl.trainer.ppo import core_algos\n"
        "from vllm import LLM\n"
        "def f(self, x):\n"
        "    core_algos.compute_grpo = x\n"
        "    vu.tokenizer.hf_tokenizer = x\n"
        "    setattr(LLM, 'generate', x)\n"
        "    core_algos.REGISTRY['a'] = x\n"
        "    self.wg = x\n"
        "    y = core_algos.thing\n"
    )
    tree = ast.parse(src)
    assert [line for _, line in upstream_patches(tree)] == [6, 7, 8, 9]
    assert not is_shim(tree) and is_shim(ast.parse('"""Shim for verl 0.9.1: why."""'))


# What a recipe holds (docs/ARCHITECTURE.md "Where a new piece goes"): its config, its config check, its trainer and
# its drivers; pure logic it needs lives in a verl_ext package ------------------------------------------------------
RECIPE_FILES = ("__init__.py", "main.py", "config_check.py")


def stray_recipe_modules(recipe_dir: Path) -> list[str]:
    """The recipe's modules that are none of: its package file, driver (`main.py` or another module run with
    `python -m`), config check, trainer (`*_ray_trainer.py`)."""
    stray = []
    for path in sorted(recipe_dir.glob("*.py")):
        if path.name in RECIPE_FILES or path.name.endswith("_ray_trainer.py"):
            continue
        tree = ast.parse(path.read_text())
        runs = any(isinstance(n, ast.If) and "__main__" in ast.unparse(n.test) for n in tree.body)
        if not runs:
            stray.append(path.name)
    return stray


def test_recipes_hold_config_check_trainer_and_drivers_only():
    recipes = [p for p in sorted((ROOT / "recipe").iterdir()) if (p / "main.py").exists()]
    assert {p.name for p in recipes} >= {"fast_dapo", "composer"}
    found = {p.name: stray_recipe_modules(p) for p in recipes}
    assert not any(found.values()), f"pure modules belong in a verl_ext package (docs/ARCHITECTURE.md): {found}"


def test_the_recipe_check_sees_a_pure_module(tmp_path):
    (tmp_path / "main.py").write_text("x = 1\n")
    (tmp_path / "demo_ray_trainer.py").write_text("x = 1\n")
    (tmp_path / "probe.py").write_text("def main():\n    pass\n\nif __name__ == '__main__':\n    main()\n")
    (tmp_path / "helpers.py").write_text("def f():\n    return 1\n")
    assert stray_recipe_modules(tmp_path) == ["helpers.py"]


# The tests' layout (docs/ARCHITECTURE.md "Tests"): tests/ mirrors the code, one package per folder ----------------
TOP_LEVEL_CODE = ("data_preprocess", "scripts")  # the project's code folders besides verl_ext/ and recipe/


def misplaced_test_folders(tests_root: Path, code_root: Path) -> list[str]:
    """Folders of test modules that are no package (`__init__.py`) or mirror no code: `tests/<package>/` for
    `verl_ext/<package>/`, `tests/recipe/<name>/` for `recipe/<name>/`, `tests/<folder>/` for a top-level code
    folder."""
    found = []
    for folder in sorted({p.parent for p in tests_root.rglob("test_*.py")}):
        rel = folder.relative_to(tests_root)
        if rel == Path("."):
            continue
        mirrors = (
            (code_root / "verl_ext" / rel).is_dir()
            or (rel.parts[0] == "recipe" and (code_root / rel).is_dir())
            or (len(rel.parts) == 1 and rel.parts[0] in TOP_LEVEL_CODE)
        )
        if not mirrors or not (folder / "__init__.py").exists():
            found.append(str(rel))
    return found


def test_tests_mirror_the_code_one_package_per_folder():
    found = misplaced_test_folders(ROOT / "tests", ROOT)
    assert not found, f"test folders that mirror no code or are no package (docs/ARCHITECTURE.md, Tests): {found}"


def test_the_layout_check_sees_a_stray_folder(tmp_path):
    for folder in ("verl_ext/advantage", "recipe/composer"):
        (tmp_path / folder).mkdir(parents=True)
    for folder, init in (("advantage", True), ("recipe/composer", True), ("helpers", True), ("composer", False)):
        (tmp_path / "tests" / folder).mkdir(parents=True)
        (tmp_path / "tests" / folder / "test_x.py").write_text("")
        if init:
            (tmp_path / "tests" / folder / "__init__.py").write_text("")
    assert misplaced_test_folders(tmp_path / "tests", tmp_path) == ["composer", "helpers"]


# ------------------------------------------------------------------------------------------------- sizes
# The trainer in rooms (loop, step, checkpoints, ...): no file of verl_ext/trainer/ over this many lines.
MAX_TRAINER_FILE_LINES = 400
# Functions whose body (docstring left out) runs over LONG_FUNCTION lines, in the library and the recipes: at most
# MAX_LONG_FUNCTIONS (a long one reads as several steps that want names of their own).
LONG_FUNCTION, MAX_LONG_FUNCTIONS = 50, 3


def _body_lines(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    return body[-1].end_lineno - body[0].lineno + 1 if body else 0


def long_functions(roots: list[Path], limit: int = LONG_FUNCTION) -> list[tuple[str, str, int]]:
    """(file, function, body lines) of every function or method longer than `limit` under `roots`."""
    out = []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _body_lines(node) > limit:
                    out.append((str(path.relative_to(root)), node.name, _body_lines(node)))
    return out


def test_no_trainer_file_is_over_the_limit():
    sizes = {p.name: len(p.read_text().splitlines()) for p in (ROOT / PACKAGE / "trainer").glob("*.py")}
    assert {k: v for k, v in sizes.items() if v > MAX_TRAINER_FILE_LINES} == {}


def test_few_functions_run_long():
    long = long_functions([ROOT / PACKAGE, ROOT / "recipe"])
    assert len(long) <= MAX_LONG_FUNCTIONS, sorted(long, key=lambda x: -x[2])


def test_the_length_count_sees_a_long_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(LONG_FUNCTION + 1))
    source = f'def f():\n    """doc\n    doc"""\n{body}\n\n\ndef g():\n    """only a docstring"""\n'
    (tmp_path / "m.py").write_text(source)
    assert [(name, n) for _, name, n in long_functions([tmp_path])] == [("f", LONG_FUNCTION + 1)]
