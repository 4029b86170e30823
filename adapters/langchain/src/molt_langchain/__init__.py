"""Molt for LangChain and LangGraph: a callback handler that records every model call, tool call,
retrieval, chain and graph step — and LangGraph interrupts as human approvals — as ATDP events.

Attach it to a run::

    from molt_langchain import MoltCallbackHandler

    graph.invoke(inputs, {"callbacks": [MoltCallbackHandler(recorder)]})

or capture every run in the process: ``molt_langchain.enable(recorder)`` (or set ``MOLT_LANGCHAIN=1``
and import ``molt_langchain``).

To apply the live policy version of an agent where it runs (no gateway), give the handler the version
registry and wrap the agent's chat model::

    handler = MoltCallbackHandler(recorder, tenant_id="acme", agent_id="support", versions=registry)
    agent = create_react_agent(handler.wrap(model), tools)
"""

from __future__ import annotations

from molt.capture.adapt import require_framework

require_framework("molt-langchain", "langchain-core", "1.0", 'pip install "langchain-core>=1.0"')

from .handler import ENV_VAR, MoltCallbackHandler, disable, enable  # noqa: E402
from .model import MoltChatModel  # noqa: E402

__all__ = ["ENV_VAR", "MoltCallbackHandler", "MoltChatModel", "__version__", "disable", "enable"]

__version__ = "0.1.0"
