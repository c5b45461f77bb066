"""The large held-out evaluation's pieces that run without Ray: its settings, the key renaming, the console column
and its swap of the trainer's validation loader and dump directory (restored whatever happens). The evaluation
through verl's `_validate` runs end to end in tests/recipe/fast_dapo/test_e2e_fast_dapo.py; the pre-flight's check of
its files in tests/config/test_preflight.py."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from verl_ext.config.errors import ConfigError
from verl_ext.config.trainer_settings import HeldoutSettings, read_trainer_extras
from verl_ext.metrics_log.console import compact_line, val_accuracy
from verl_ext.trainer.heldout import HeldoutEval, _validating_on, rename


def test_settings_default_off_and_name_a_bad_key():
    assert not read_trainer_extras(OmegaConf.create({})).heldout.enabled
    on = read_trainer_extras(
        OmegaConf.create({"heldout": {"files": ["a.parquet", "b.parquet"], "at": ["last"]}})
    ).heldout
    assert on.enabled and on.files == ["a.parquet", "b.parquet"] and on.at == ("last",)
    with pytest.raises(ConfigError, match=r"trainer.heldout.at must be one of \['first', 'last'\], got \['middle'\]"):
        read_trainer_extras(OmegaConf.create({"heldout": {"at": ["middle"]}}))
    with pytest.raises(ConfigError, match=r"unknown trainer.heldout keys \['file'\] \(did you mean 'files'\?\)"):
        read_trainer_extras(OmegaConf.create({"heldout": {"file": "x"}}))
    with pytest.raises(ConfigError, match="trainer.heldout.batch_size must be >= 1, got 0"):
        read_trainer_extras(OmegaConf.create({"heldout": {"batch_size": 0}}))
    with pytest.raises(ConfigError, match="trainer.heldout.every must be >= 0, got -1"):
        read_trainer_extras(OmegaConf.create({"heldout": {"every": -1}}))
    with pytest.raises(ConfigError, match="trainer.heldout.pass_at_k_questions must be >= 1, got 0"):
        read_trainer_extras(OmegaConf.create({"heldout": {"pass_at_k_questions": 0}}))


def test_due_first_last_every_and_under_val_only():
    e = HeldoutEval(HeldoutSettings(files="x.parquet", at=("last",)))
    assert (e.due_first(), e.due_after(16, is_last=True), e.due_first(val_only=True)) == (False, True, True)
    assert not e.due_after(8, is_last=False), "every = 0: only at the last step"
    assert not HeldoutEval(HeldoutSettings()).due_first(val_only=True), "off without files"
    assert not HeldoutEval(HeldoutSettings(every=2)).due_after(2, is_last=True), "off without files"
    curve = HeldoutEval(HeldoutSettings(files="x.parquet", at=("first",), every=10))
    assert [s for s in range(1, 26) if curve.due_after(s, is_last=s == 25)] == [10, 20]
    both = HeldoutEval(HeldoutSettings(files="x.parquet", every=10))
    assert [s for s in range(1, 26) if both.due_after(s, is_last=s == 25)] == [10, 20, 25]


def test_validation_keys_become_heldout_keys():
    metrics = {
        "val-core/mathgen/acc/mean@1": 0.25,
        "val-aux/mathgen/reward/mean@1": 0.25,
        "val-core/all/acc/mean@1": 0.3,
        "val-pass/mathgen/pass@4": 0.5,
        "timing_s/testing": 3.0,
    }
    renamed = rename(metrics)
    assert renamed == {
        "heldout-core/mathgen/acc/mean@1": 0.25,
        "heldout-aux/mathgen/reward/mean@1": 0.25,
        "heldout-core/all/acc/mean@1": 0.3,
        "heldout-pass/mathgen/pass@4": 0.5,
        "timing_s/testing": 3.0,
    }
    assert val_accuracy(renamed, prefix="heldout") == 0.3 and val_accuracy(renamed) is None
    line = compact_line(16, 16, {**renamed, "val-core/mathgen/acc/mean@1": 0.2}, 5.0)
    assert line == "step 16/16 | val acc 0.200 | held-out acc 0.300 | 5.0 s"


class _Trainer:
    def __init__(self, validation_dir):
        self.val_dataloader = "the validation loader"
        self.config = OmegaConf.create({"trainer": {"validation_data_dir": validation_dir}})
        OmegaConf.set_struct(self.config, True)


@pytest.mark.parametrize("validation_dir", ["/runs/a/validation", None])
def test_the_swap_is_undone_after_a_failure(validation_dir):
    t = _Trainer(validation_dir)
    with pytest.raises(RuntimeError, match="engine died"), _validating_on(t, "the held-out loader"):
        assert t.val_dataloader == "the held-out loader"
        want = f"{validation_dir}/heldout" if validation_dir else None
        assert t.config.trainer.validation_data_dir == want, "answers dumped apart from the validation's"
        raise RuntimeError("engine died")
    assert t.val_dataloader == "the validation loader"
    assert t.config.trainer.validation_data_dir == validation_dir
