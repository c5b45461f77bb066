"""The agent gateway: an OpenAI/Anthropic-compatible HTTP server that records token-true episodes (docs/AGENT.md).

It knows nothing of verl's trainer or agent loop (the rest of `verl_ext.agent` is that side): it is handed a
tokenizer, verl's Continuous Token builder and a `generate` call, and records each episode's rounds
(`verl_ext.agent.trajectory.Round`, its one import from outside this package).

- `core`: the token-true episode core every protocol shares (sessions, rounds, history matching up to client
  re-serialization, drift accounting); `toolcall`: tool calls (verl's ToolParser registry) and reasoning;
- `protocols/`: each wire protocol as a pure translation to and from the core's chat form (no HTTP);
- `wire/`: one thin HTTP adapter per protocol (parse the request, call the core, serialize with `protocols/`);
- `server`: `Gateway`, the HTTP server and its routing (episodes, scores, pool mode's task queue).

Nothing is imported here, so that `protocols/` loads without aiohttp: import the module you need.
"""
