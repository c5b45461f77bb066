"""The HTTP side of the wire protocols: one thin adapter per protocol over the episode core (`base.WireAdapter`),
serializing with its translation in `verl_ext.agent.gateway.protocols`.

Importing this package registers the built-in adapters; a new protocol is its translation in `protocols/` and one
module here, imported below.
"""

from verl_ext.agent.gateway.wire import chat, completions, messages, responses  # noqa: F401  (@register_adapter)
from verl_ext.agent.gateway.wire.base import ADAPTERS, WireAdapter, register_adapter

__all__ = ["ADAPTERS", "WireAdapter", "register_adapter"]
