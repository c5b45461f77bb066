"""Wire protocols served by the gateway, each a thin adapter over `verl_ext.agent.core` (see `base.WireAdapter`).

Importing this package registers the built-in adapters; a new protocol is one module here, imported below.
"""

from verl_ext.agent.wire import chat, completions, messages, responses  # noqa: F401  (@register_adapter)
from verl_ext.agent.wire.base import ADAPTERS, WireAdapter, register_adapter

__all__ = ["ADAPTERS", "WireAdapter", "register_adapter"]
