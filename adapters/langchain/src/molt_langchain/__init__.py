"""Molt for LangChain and LangGraph: a callback handler that records every model call, tool call,
retrieval, chain and graph step — and LangGraph interrupts as human approvals — as ATDP events.

Attach it to a run::

    from molt_langchain import MoltCallbackHandler

    graph.invoke(inputs, {"callbacks": [MoltCallbackHandler(recorder)]})

or capture every run in the process: ``molt_langchain.enable(recorder)`` (or set ``MOLT_LANGCHAIN=1``
and import ``molt_langchain``).
"""

from __future__ import annotations

from molt.capture.adapt import require_framework

require_framework("molt-langchain", "langchain-core", "1.0", 'pip install "langchain-core>=1.0"')

from .handler import ENV_VAR, MoltCallbackHandler, disable, enable  # noqa: E402

__all__ = ["ENV_VAR", "MoltCallbackHandler", "__version__", "disable", "enable"]

__version__ = "0.1.0"
