"""Agent/env RL through an OpenAI-compatible gateway (docs/AGENT.md).

- `trajectory`: rounds of an episode -> verl's multi-turn sample (mask 1 = policy tokens), split on history rewrite;
- `episode`: trained or dropped (with a counted reason);
- `gateway`: the OpenAI-compatible HTTP server in front of verl's rollout, recording token-true rounds;
- `external_loop`: the `external_agent` verl agent loop (one agent process per task, one gateway per worker);
- `trainer`: dropped episodes out of their groups, counts, the episode ledger;
- `examples/`: agents written against the `openai` client only.

Importing this package is cheap (no verl import); `register()` (called by the verl plugin) registers the loop.
"""


def register() -> None:
    from verl_ext.agent import external_loop  # noqa: F401  @register("external_agent")
