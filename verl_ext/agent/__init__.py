"""Agent/env RL through an OpenAI-compatible gateway (docs/AGENT.md).

- `trajectory`: rounds of an episode -> verl's multi-turn sample (mask 1 = policy tokens), split on history rewrite;
- `episode`: trained or dropped (with a counted reason); staleness of an episode and its bound;
- `core`: the token-true episode core every protocol shares (sessions, rounds, history matching up to client
  re-serialization, drift accounting); `toolcall`: tool calls (verl's ToolParser registry) and reasoning;
- `wire/`: one thin adapter per wire protocol (chat completions, completions, ...) over the core;
- `gateway`: the HTTP server and its routing in front of verl's rollout;
- `agent_process`: one episode = one run of the agent command (or one pool worker's turn) on its own session;
- `external_loop`: the `external_agent` verl agent loop (one gateway per agent-loop worker);
- `trainer`: dropped episodes out of their groups, counts, staleness, the async run-ahead mode;
- `ledger`: every episode of every trained step once, across crash and resume;
- `settings`: the `external_agent` config block, checked before Ray starts; `main`: the CLI entry point;
- `continuous_token`: verl shim, ChatML prompt-token handling for ChatML checkpoints verl has no entry for;
- `examples/`: agents written against the `openai` client only.

Importing this package is cheap (no verl import); `register()` (called by the verl plugin) registers the loop.
"""


def register() -> None:
    from verl_ext.agent import continuous_token, external_loop  # noqa: F401  @register("external_agent")

    continuous_token.apply()
