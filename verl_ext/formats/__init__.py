"""Text formats a model is taught to write, shared by the task's prompts (`mathgen/prompts.py`), the model's chat
templates (`pretrained/smollm2.py`) and the agent gateway that reads them (`agent/gateway/tool_parsers.py`): pure
modules that import no other package of the library.

- `line_calls`: the one-line tool-call format (``calc: 12 * 3``, results as ``Result: ...``).
"""
