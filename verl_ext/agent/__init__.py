"""Agent/env RL through an OpenAI-compatible gateway (docs/AGENT.md).

The gateway (`gateway/`) records token-true episodes over HTTP and knows nothing of verl's trainer; the rest of this
package is its verl side, which starts it, runs the agents against it and trains on what it recorded.

- `gateway/`: `core` (the token-true episode core every protocol shares: sessions, rounds, history matching up to
  client re-serialization, drift accounting), `toolcall` (tool calls through verl's ToolParser registry, reasoning),
  `protocols/` (each wire protocol as a pure translation), `wire/` (one thin HTTP adapter per protocol), `server`
  (`Gateway`: the HTTP server and its routing in front of verl's rollout);
- `trajectory`: rounds of an episode -> verl's multi-turn sample (mask 1 = policy tokens), split on history rewrite
  (pure; the one module the gateway imports from here: its `Round` record);
- `episode`: trained or dropped (with a counted reason); staleness of an episode and its bound;
- `agent_process`: one episode = one run of the agent command (or one pool worker's turn) on its own session;
- `fork_launch` / `forkserver`: `launch=fork`, episodes forked from a per-worker server that preloaded the agent's
  imports (the server is `forkserver`, standard library only);
- `gateway_owner`: one gateway per agent-loop worker's event loop, started on first use and stopped by its owner;
- `external_loop`: the `external_agent` verl agent loop (one gateway per agent-loop worker);
- `trainer`: dropped episodes out of their groups, counts, staleness, the async run-ahead mode;
- `ledger`: every episode of every trained step once, across crash and resume;
- `settings`: the `external_agent` config block, checked before Ray starts; `main`: the CLI entry point;
- `continuous_token`: verl shim, ChatML prompt-token handling for ChatML checkpoints verl has no entry for;
- `examples/`: agents written against the `openai` / `anthropic` clients and agent frameworks only (programs users
  run as `external_agent.command`; no library module imports them).

Importing this package is cheap (no verl import); `register()` (called by the verl plugin) registers the loop.
"""


def register() -> None:
    from verl_ext.agent import continuous_token, external_loop  # noqa: F401  @register("external_agent")

    continuous_token.apply()
