"""The wire protocols as pure translations to and from the episode core's chat form (no HTTP, no tokenizer).

The episode core (`verl_ext.agent.gateway.core`) speaks one language: OpenAI chat messages (`role`, `content`,
`tool_calls`, `tool_call_id`) and chat function tools, which is also what the tokenizer's chat template renders.
Each module here only translates; the thin HTTP adapters that serve them are in `verl_ext.agent.gateway.wire`:

- `chat`: OpenAI chat completions (`POST /v1/chat/completions`: messages, tools, the chunk stream);
- `completions`: OpenAI (legacy) completions (`POST /v1/completions`: a plain-text prompt);
- `responses`: OpenAI's Responses API (`POST /v1/responses`: input items, function calls, the Responses event
  stream);
- `messages`: Anthropic's Messages API (`POST /v1/messages`: content blocks, `tool_use` / `tool_result`, Anthropic's
  event stream and error shape);
- `fields`: what they share (the field check, typed fields, tools, content parts, log-prob entries).

A chat request becomes a `core.ChatTurn` (a completions request a `completions.TextTurn`); the core's `TurnResult`
becomes the protocol's reply object and, for `stream: true`, its event sequence. Nothing here tokenizes: the token
ids stay the core's, so every round of an episode extends the same token prefix whichever protocol carried it.
Bad input raises `core.RequestError` (400) with a message that names the field.
"""
