"""The one-line tool-call format moved to `verl_ext.formats.line_calls` (issue 62): the task's prompts, the model's
chat templates and this gateway share it, so it lives in a package below all three. This alias is kept only for
`verl_ext/composer/turn_replay.py`, written while the format moved; import the new path, and drop this module once
nothing imports it."""

from __future__ import annotations

from verl_ext.formats.line_calls import (
    EXAMPLE_ARGUMENT,
    RESULT_PREFIX,
    SEPARATOR,
    argument_name,
    call_line,
    count_attempts,
    read_calls,
)

__all__ = [
    "EXAMPLE_ARGUMENT",
    "RESULT_PREFIX",
    "SEPARATOR",
    "argument_name",
    "call_line",
    "count_attempts",
    "read_calls",
]
