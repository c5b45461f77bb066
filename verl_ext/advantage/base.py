"""What an advantage algorithm is to the pipeline: its input object and the four kinds of registry entry.

Each algorithm lives in its own module (its docstring gives the paper, the formula and the assumptions) and declares
one entry, listed once in `registry.ALGORITHMS`:

- `EpisodeMode`: one scalar per response from the batch's rewards and prompt groups, selectable as
  `algorithm.advantage_mode=<name>`; with `estimator=True` it is also `algorithm.adv_estimator=<name>`, the mode
  alone broadcast over the response tokens (e.g. `maxrl`).
- `TokenTransform`: token-level credit from the episode advantages (`algorithm.transform_mode=<name>`); with
  `estimator=True` it is also `adv_estimator=<name>`: `advantage_mode`'s episode advantage, then this transform
  (e.g. `gtpo_sepa`). It works on the pipeline's scratch tensors (`TokenWork`).
- `Composable`: an estimator whose episode mode and transform both come from the config (`composable`).
- `VerlEstimator`: a whole estimator in verl's calling convention, registered as it is, for one whose inputs the
  pipeline does not compose (`grpo_composer`: the Composer's teacher log-probs and error-site mask).

`AdvantageInputs` is the one object every stage reads: built once per estimator call from verl's arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from verl_ext.advantage.uncertainty import uncertainty_sums


@dataclass(frozen=True)
class AdvantageInputs:
    """One batch as the advantage pipeline reads it; row i is response i, tensors (bs, T) unless noted."""

    token_level_rewards: torch.Tensor  # a response's reward is its sum over T
    response_mask: torch.Tensor
    index: Any  # verl's uid per response (bs,): the responses of one prompt share it
    old_log_probs: torch.Tensor | None = None  # log-probs of the sampled tokens under the rollout-time policy
    entropys: torch.Tensor | None = None  # per-token vocabulary entropy (uncertainty_kind=shannon_entropy)
    planning_mask: torch.Tensor | None = None  # bool: planning tokens (HICRA, SEPA)
    step: int = 0  # the training step, handed to plugins
    sepa_lambda: float | None = None  # SEPA strength for this step (SepaController.resolve)

    @classmethod
    def from_verl(cls, token_level_rewards, response_mask, index, kwargs: Mapping[str, Any]) -> AdvantageInputs:
        """From an estimator call as verl makes it: the three tensors and the keyword arguments the project's
        trainer adds (old_log_probs, entropys, planning_mask, step, sepa_lambda); other keywords are not read."""
        return cls(
            token_level_rewards,
            response_mask,
            index,
            old_log_probs=kwargs.get("old_log_probs"),
            entropys=kwargs.get("entropys"),
            planning_mask=kwargs.get("planning_mask"),
            step=int(kwargs.get("step") or 0),
            sepa_lambda=kwargs.get("sepa_lambda"),
        )


@dataclass
class TokenWork:
    """The token-level stage's scratch state, handed to a `TokenTransform`. u, m and p are fresh float32 (bs, T)
    tensors the transform may overwrite (fresh tensors cost more than in-place passes on CPU); it returns the
    token advantages, which the pipeline then masks."""

    u: torch.Tensor  # uncertainty of the configured kind, capped, 0 on padding
    m: torch.Tensor  # response mask, 0/1
    p: torch.Tensor | None  # planning mask within m, 0/1 (None when the config needs none and none was passed)
    episode: torch.Tensor  # (bs,) episode advantages, after the uninformative-group rule
    gtpo_beta: float
    hicra_alpha: float
    sepa_lambda: float | None
    nonnegative: bool  # u >= 0 by construction (a built-in uncertainty kind)
    before: tuple | None = None  # uncertainty_sums of u as computed (None: no metrics wanted)
    after: tuple | None = None  # of u as the weighting sees it; = before unless the transform calls pooled()

    def pooled(self) -> None:
        """A transform that changes u before weighting it (SEPA pooling) calls this: the `after` statistics are of
        u at this point, planning tokens keeping theirs."""
        if self.before is not None:
            self.after = uncertainty_sums(self.u, None)[:2] + self.before[2:]


@dataclass(frozen=True)
class EpisodeMode:
    name: str
    fn: Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]  # (rewards (bs,) f64, group ids (bs,), G) -> (bs,)
    summary: str  # one line: the verl estimator function's docstring
    estimator: bool = True  # also adv_estimator=<name> (False: verl has an estimator of that name)

    @property
    def fixed(self) -> tuple[str | None, str | None]:
        """(episode mode, transform) as adv_estimator=<name> fixes them; None: from the config."""
        return self.name, "none"


@dataclass(frozen=True)
class TokenTransform:
    name: str
    apply: Callable[[TokenWork], torch.Tensor]
    summary: str
    needs_planning: bool = False  # the trainer must pass planning masks (or a tokenizer and the responses)
    uses_sepa_lambda: bool = False  # the trainer must pass its SepaController's lambda
    estimator: bool = True

    @property
    def fixed(self) -> tuple[str | None, str | None]:
        return None, self.name


@dataclass(frozen=True)
class Composable:
    name: str
    summary: str
    estimator: bool = True

    @property
    def fixed(self) -> tuple[str | None, str | None]:
        return None, None


@dataclass(frozen=True)
class VerlEstimator:
    name: str
    fn: Callable[..., tuple[torch.Tensor, torch.Tensor]]  # verl's signature: (token_level_rewards, response_mask,
    # index, config=None, **kwargs) -> (advantages, returns)
    summary: str
