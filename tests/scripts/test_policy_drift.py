"""scripts/policy_drift.py: the distance of an actor checkpoint from its base model, against the formula written out
element by element, on files in the formats it reads (verl's world-size-1 actor file, a safetensors directory)."""

from __future__ import annotations

import math

import pytest
import torch
from safetensors.torch import save_file


def test_drift_is_the_relative_distance_over_the_shared_parameters(tmp_path, capsys, load_script):
    drift = load_script("policy_drift")
    base = {"a": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.ones(4)}
    save_file(base, str(tmp_path / "model.safetensors"))
    trained = {
        "a": base["a"] + torch.tensor([[0.5, 0.0, 0.0], [0.0, 0.0, -0.5]]),
        "b": base["b"] + 0.25,
        "extra": torch.zeros(3),  # not in the base: left out
    }
    actor = tmp_path / "actor"
    actor.mkdir()
    torch.save(trained, actor / drift.MODEL_FILE)

    got = drift.drift(drift.load_actor(actor), drift.load_base(tmp_path))
    diff_sq = 0.5**2 + 0.5**2 + 4 * 0.25**2
    base_sq = sum(x * x for x in range(6)) + 4
    assert got["relative_l2"] == pytest.approx(math.sqrt(diff_sq / base_sq))
    assert got["rms_change"] == pytest.approx(math.sqrt(diff_sq / 10))
    assert got["tensors"] == 2 and got["params"] == 10

    assert drift.main([f"trained={actor}", "--base", str(tmp_path)]) == 0
    line = capsys.readouterr().out.splitlines()[1].split()
    assert line[0] == "trained" and float(line[1]) == pytest.approx(got["relative_l2"], rel=1e-3)


def test_bad_inputs_are_named(tmp_path, load_script):
    drift = load_script("policy_drift")
    with pytest.raises(FileNotFoundError, match="actor checkpoint"):
        drift.load_actor(tmp_path)
    with pytest.raises(FileNotFoundError, match="safetensors"):
        drift.load_base(tmp_path)
    with pytest.raises(ValueError, match="share no parameter"):
        drift.drift({"a": torch.zeros(2)}, {"a": torch.zeros(3)})
    with pytest.raises(SystemExit, match="LABEL=ACTOR_DIR"):
        drift.main(["no-label", "--base", str(tmp_path)])
