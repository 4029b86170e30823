"""The callback handler users attach, and the opt-in global registration.

Every callback below runs on the agent's thread (or event loop) and does the same three things: read
the clock, queue a tuple for Molt's dispatcher thread, return. It never raises into LangChain: any
error is counted in ``handler.stats`` (and logged, rate-limited).
"""

from __future__ import annotations

import os
import threading
import time
from contextvars import ContextVar
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.tracers.context import register_configure_hook

from molt.capture.adapt import Capture, distribution_version
from molt.capture.instrumentor import Instrumentor

from .mapping import LangChainMapper

__all__ = ["ENV_VAR", "MoltCallbackHandler", "disable", "enable"]

#: Set to ``1`` (and import ``molt_langchain``) to capture every LangChain run in the process.
ENV_VAR = "MOLT_LANGCHAIN"

_FRAMEWORK_VERSION = distribution_version("langchain-core")
#: The oldest langchain-core this adapter supports (checked at import and when a handler is attached).
FRAMEWORK_MIN = "1.0"
_now = time.time_ns


class MoltCallbackHandler(BaseCallbackHandler, Instrumentor):
    """Capture LangChain and LangGraph runs as ATDP events, and apply the live policy version.

    Attach it where callbacks go — ``model.invoke(x, config={"callbacks": [handler]})``,
    ``graph.invoke(x, {"callbacks": [handler]})`` — or capture every run with :func:`enable`.
    One handler may serve any number of concurrent runs.

    With ``versions=``, :meth:`wrap` a chat model: the wrapper applies the live version of
    ``tenant_id``/``agent_id`` (system prompt, memories, skills, tool rewrites) to every call, and
    the events carry its id in ``provenance.policy_version``.

    Args:
        recorder: the :class:`molt.capture.Recorder` to record to. Without it (and without other
            options), the handler shares the process-wide capture that :func:`enable` configures, or
            the default Recorder spooling under ``$MOLT_HOME``.
        capture_chain_io: record chain and graph-node inputs and outputs (default True).
        **options: the :class:`~molt.capture.instrumentor.Instrumentor` options (``tenant_id``,
            ``agent_id``, ``task``, ``tags``, ``max_field_bytes``, ``blob_store``, ``strict``, ``versions``,
            ``harness``, ``version_poll_s``, ``capture``).

    Example::

        from molt.capture import Recorder
        from molt_langchain import MoltCallbackHandler

        handler = MoltCallbackHandler(Recorder(store))
        agent.invoke({"messages": [("user", "hi")]}, {"callbacks": [handler]})
    """

    raise_error = False  # LangChain must never re-raise a Molt error into the agent
    run_inline = True  # async runs call us on the loop: we only queue, so no executor hop is needed

    integration = "molt-langchain"
    framework = "langchain"
    framework_dist = "langchain-core"
    framework_min = FRAMEWORK_MIN
    framework_below = "2"
    install = 'pip install "langchain-core>=1.0,<2"'
    version_hook = "a chat-model wrapper around every model call (MoltCallbackHandler.wrap)"

    def __init__(self, recorder: Any = None, *, capture_chain_io: bool = True, **options: Any):
        # A handler given nothing that changes what it records shares the process-wide capture.
        shared = (recorder is None and capture_chain_io and not options.get("strict")
                  and not any(options.get(k) for k in ("tenant_id", "agent_id", "task", "tags", "blob_store"))
                  and all(options.get(k) is None for k in ("max_field_bytes", "versions", "capture")))
        if shared:
            options["capture"] = _shared_mapper().capture
        Instrumentor.__init__(self, recorder, **options)
        self._mapper = _shared_mapper() if shared else LangChainMapper(self.capture, capture_chain_io=capture_chain_io)

    def wrap(self, model: Any) -> Any:
        """``model`` (a ``BaseChatModel``) wrapped so that every call gets the live version applied
        (see :class:`molt_langchain.model.MoltChatModel`); pass the wrapper where the model went."""
        from .model import MoltChatModel

        return MoltChatModel(model=model, molt=self)

    # ------------------------------------------------------------------ callbacks (agent thread)

    _queue = Instrumentor.queue

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[Any]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """A chat model call begins."""
        self._queue(
            self._mapper.start,
            "chat",
            run_id,
            parent_run_id,
            _now(),
            _run_name(serialized, kwargs),
            messages,
            metadata,
            tags,
            kwargs,
        )

    def on_llm_start(
        self,
        serialized: dict[str, Any],
        prompts: list[str],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """A text-completion LLM call begins."""
        self._queue(
            self._mapper.start,
            "llm",
            run_id,
            parent_run_id,
            _now(),
            _run_name(serialized, kwargs),
            prompts,
            metadata,
            tags,
            kwargs,
        )

    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """A model call ended."""
        self._queue(self._mapper.end, run_id, _now(), response)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """A model call failed, or its stream was closed early (``GeneratorExit``)."""
        self._queue(self._mapper.error, run_id, _now(), error, kwargs.get("response"))

    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """A tool call begins."""
        self._queue(
            self._mapper.start,
            "tool",
            run_id,
            parent_run_id,
            _now(),
            _run_name(serialized, kwargs),
            input_str,
            metadata,
            tags,
            {"inputs": inputs, "tool_call_id": kwargs.get("tool_call_id")},
        )

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """A tool call returned."""
        self._queue(self._mapper.end, run_id, _now(), output)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """A tool call raised."""
        self._queue(self._mapper.error, run_id, _now(), error)

    def on_retriever_start(
        self,
        serialized: dict[str, Any],
        query: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """A retrieval begins."""
        self._queue(
            self._mapper.start,
            "retriever",
            run_id,
            parent_run_id,
            _now(),
            _run_name(serialized, kwargs),
            query,
            metadata,
            tags,
            {},
        )

    def on_retriever_end(self, documents: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """A retrieval returned documents."""
        self._queue(self._mapper.end, run_id, _now(), documents)

    def on_retriever_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """A retrieval raised."""
        self._queue(self._mapper.error, run_id, _now(), error)

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """A chain, graph or graph node begins."""
        self._queue(
            self._mapper.start,
            "chain",
            run_id,
            parent_run_id,
            _now(),
            _run_name(serialized, kwargs),
            inputs,
            metadata,
            tags,
            {},
        )

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """A chain, graph or graph node returned."""
        self._queue(self._mapper.end, run_id, _now(), outputs)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """A chain raised — or a LangGraph node paused on ``interrupt()``."""
        self._queue(self._mapper.error, run_id, _now(), error)


def _run_name(serialized: dict[str, Any] | None, kwargs: dict[str, Any]) -> str | None:
    name = kwargs.get("name")
    if name:
        return str(name)
    if serialized:
        if serialized.get("name"):
            return str(serialized["name"])
        ids = serialized.get("id")
        if isinstance(ids, list) and ids:
            return str(ids[-1])
    return None


# ---------------------------------------------------------------------- global registration

_shared: LangChainMapper | None = None
_shared_lock = threading.Lock()
_handler_var: ContextVar[MoltCallbackHandler | None] = ContextVar("molt_langchain_handler", default=None)


def _shared_mapper(recorder: Any = None, **options: Any) -> LangChainMapper:
    """The process-wide mapper behind no-argument handlers (and so behind the global hook)."""
    global _shared
    with _shared_lock:
        if _shared is None or recorder is not None or options:
            capture_chain_io = options.pop("capture_chain_io", True)
            cap = Capture(
                recorder,
                integration="molt-langchain",
                framework="langchain",
                framework_version=_FRAMEWORK_VERSION,
                **options,
            )
            _shared = LangChainMapper(cap, capture_chain_io=capture_chain_io)
        return _shared


def enable(recorder: Any = None, **options: Any) -> MoltCallbackHandler:
    """Capture every LangChain run in this process, with no change at call sites.

    Sets ``MOLT_LANGCHAIN=1``: LangChain then adds a :class:`MoltCallbackHandler` to every run it
    configures (through ``register_configure_hook``). ``recorder`` and ``options`` (those of
    :class:`MoltCallbackHandler`) configure the shared capture; returns a handler bound to it.
    """
    _shared_mapper(recorder, **options)
    os.environ[ENV_VAR] = "1"
    return MoltCallbackHandler()


def disable() -> None:
    """Stop the global capture :func:`enable` started (explicitly attached handlers keep working)."""
    os.environ.pop(ENV_VAR, None)


register_configure_hook(_handler_var, inheritable=True, handle_class=MoltCallbackHandler, env_var=ENV_VAR)
