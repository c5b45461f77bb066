"""A campaign: every (condition, seed) of one recipe entry point, as a list of runs with their own directories.

Spec (YAML, see configs/campaign/):

    name: advantage_ablation          # runs go to <out_root>/<name>/<condition>_s<seed>/
    entry: recipe.fast_dapo.main      # python -m <entry> <overrides>
    base: [+preset=cpu_demo, ...]     # overrides every run shares
    conditions:                       # condition name -> its own overrides (applied after base)
      grpo+none: [algorithm.adv_estimator=grpo]
    seeds: [0, 1, 2]
    seed_overrides: ["data.seed={seed}"]   # how a seed reaches the run ({seed} is replaced)
    plot_keys: [critic/score/mean]    # drawn per condition (one line per seed) into <name>/curves.png

Each run also gets trainer.default_local_dir (its directory), trainer.jsonl_metrics_path, trainer.experiment_name
and trainer.resume_mode=auto, so a campaign stopped half-way resumes: finished runs (a DONE file) are skipped and an
interrupted run continues from its last checkpoint without duplicate metric lines.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from verl_ext.config.errors import ConfigError
from verl_ext.config.settings import read_settings, set_fields
from verl_ext.launch.artifacts import METRICS_FILE

SEED_OVERRIDES = ("data.seed={seed}",)  # how a seed reaches a run when the spec names no seed_overrides
DONE_FILE = "DONE"


@dataclass(frozen=True)
class RunPlan:
    condition: str
    seed: int
    run_dir: Path
    overrides: list[str]

    @property
    def label(self) -> str:
        return f"{self.condition}_s{self.seed}"

    @property
    def metrics_path(self) -> Path:
        return self.run_dir / METRICS_FILE


@dataclass(frozen=True)
class CampaignSpec:
    """A spec's keys, read by `from_dict` (the project's settings mechanism: an unknown key or a missing required one
    is a ConfigError naming it) and checked on construction."""

    name: str
    entry: str
    conditions: dict[str, list[str]]
    seeds: list[int]
    base: list[str] = field(default_factory=list)
    seed_overrides: list[str] = field(default_factory=lambda: list(SEED_OVERRIDES))
    plot_keys: list[str] = field(default_factory=list)

    def __post_init__(self):
        conditions = self.conditions
        if not isinstance(conditions, dict) or not conditions:
            raise ConfigError("campaign conditions must be a non-empty mapping of name -> overrides")
        for cond, overrides in conditions.items():
            if not isinstance(overrides, list) or not all(isinstance(o, str) and "=" in o for o in overrides):
                raise ConfigError(
                    f"condition {cond!r}: overrides must be a list of key=value strings, got {overrides!r}"
                )
            if "/" in str(cond) or not str(cond):
                raise ConfigError(f"condition name {cond!r} must be a non-empty name without '/'")
        seeds = self.seeds
        if (
            not isinstance(seeds, list)
            or not seeds
            or not all(isinstance(s, int) for s in seeds)
            or len(set(seeds)) != len(seeds)
        ):
            raise ConfigError(f"campaign seeds must be a non-empty list of distinct ints, got {seeds!r}")
        seed_overrides = list(self.seed_overrides)
        if not all("{seed}" in o for o in seed_overrides):
            raise ConfigError(f"every seed override must contain {{seed}}, got {seed_overrides!r}")
        set_fields(
            self,
            name=str(self.name),
            entry=str(self.entry),
            conditions={str(k): list(v) for k, v in conditions.items()},
            seeds=list(seeds),
            base=list(self.base or []),
            seed_overrides=seed_overrides,
            plot_keys=list(self.plot_keys or []),
        )

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> CampaignSpec:
        return read_settings(cls, raw, "campaign")

    @classmethod
    def from_yaml(cls, path: str | Path) -> CampaignSpec:
        with open(path) as f:
            return cls.from_dict(yaml.safe_load(f))

    def runs(self, out_root: str | Path) -> list[RunPlan]:
        """Every (condition, seed), seeds outer and conditions inner in spec order: a campaign stopped part-way (they
        run for hours and resume across sessions) holds whole seeds, every condition paired, not whole conditions."""
        plans = []
        for seed in self.seeds:
            for cond, cond_overrides in self.conditions.items():
                run_dir = Path(out_root) / self.name / f"{cond}_s{seed}"
                own = [
                    f"trainer.default_local_dir={run_dir}",
                    f"trainer.jsonl_metrics_path={run_dir / METRICS_FILE}",
                    f"trainer.experiment_name={self.name}_{cond}_s{seed}",
                    "trainer.resume_mode=auto",
                ]
                seeded = [o.replace("{seed}", str(seed)) for o in self.seed_overrides]
                plans.append(RunPlan(cond, seed, run_dir, [*self.base, *cond_overrides, *seeded, *own]))
        return plans

    def select(
        self,
        out_root: str | Path,
        only: Sequence[str] | None = None,
        seeds: Sequence[int] | None = None,
        labels: Sequence[str] | None = None,
    ) -> list[RunPlan]:
        """The runs of the conditions `only`, the `seeds` and the run `labels` (each None or empty: all), in `runs`
        order. A name the spec lacks is a ValueError naming the campaign command's option (--only, --seeds, --runs)."""
        plans = self.runs(out_root)
        if only and (unknown := set(only) - set(self.conditions)):
            raise ValueError(f"--only: unknown conditions {sorted(unknown)}; the spec has {list(self.conditions)}")
        if seeds and (unknown := set(seeds) - set(self.seeds)):
            raise ValueError(f"--seeds: {sorted(unknown)} not among the spec's {self.seeds}")
        if labels and (unknown := set(labels) - {r.label for r in plans}):
            raise ValueError(f"--runs: unknown runs {sorted(unknown)}; labels are <condition>_s<seed>")
        return [
            r
            for r in plans
            if (not only or r.condition in only)
            and (not seeds or r.seed in seeds)
            and (not labels or r.label in labels)
        ]


def is_done(run_dir: str | Path) -> bool:
    return (Path(run_dir) / DONE_FILE).exists()


def mark_done(run_dir: str | Path, seconds: float | None = None) -> None:
    """The run's DONE file, with how long it took when it ran in one go (`seconds`; None for a resumed run)."""
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    (Path(run_dir) / DONE_FILE).write_text("finished\n" if seconds is None else f"finished in {seconds:.0f} s\n")


def done_seconds(run_dir: str | Path) -> float | None:
    """How long a finished run took, from its DONE file (None: not finished, resumed, or marked without a time)."""
    path = Path(run_dir) / DONE_FILE
    m = re.fullmatch(r"finished in (\d+) s\n?", path.read_text()) if path.is_file() else None
    return float(m[1]) if m else None
