"""Model backends behind the gateway: ``vllm`` (token-in vLLM server, LoRA hot-load), ``openai`` (any
OpenAI-compatible upstream), ``anthropic`` (an Anthropic Messages API upstream), ``local`` (in-process
transformers) and ``stub`` (deterministic, no model).

Example::

    from molt.backends import ChatRequest, create_backend

    backend = create_backend("stub")
    result = await backend.chat(ChatRequest(model="stub", messages=[{"role": "user", "content": "hi"}]))
"""

from typing import Any

from molt.backends.anthropic import AnthropicBackend
from molt.backends.base import (
    Backend,
    BackendCapabilities,
    BaseBackend,
    ChatRequest,
    Choice,
    CompletionRequest,
    Delta,
    Result,
    StreamEnd,
    StreamItem,
    TokenCounts,
    TokenLogprob,
    ToolCallDelta,
    ToolCallOut,
)
from molt.backends.local import LocalBackend
from molt.backends.model import POLICY_MODEL_NAME, ensure_policy_model, find_policy_gguf
from molt.backends.openai_compat import OpenAIBackend
from molt.backends.stub import StubBackend, stub_asgi_app
from molt.backends.vllm import VLLMBackend, VLLMServer, find_vllm_python
from molt.registry import Registry

#: Backend classes by kind; ``molt serve --backend KIND`` and routing tables name them.
BACKENDS: Registry[type[BaseBackend]] = Registry("backend")
for _cls in (StubBackend, OpenAIBackend, AnthropicBackend, LocalBackend, VLLMBackend):
    BACKENDS.register(_cls.kind, _cls)


def create_backend(kind: str, name: str | None = None, **config: Any) -> BaseBackend:
    """A backend of the registered ``kind`` (``stub``, ``openai``, ``anthropic``, ``local``, ``vllm``) built from
    ``config`` (the class's keyword arguments); an unknown kind lists the known ones."""
    return BACKENDS.get(kind)(name, **config)


__all__ = [
    "AnthropicBackend",
    "BACKENDS",
    "Backend",
    "BackendCapabilities",
    "BaseBackend",
    "ChatRequest",
    "Choice",
    "CompletionRequest",
    "Delta",
    "LocalBackend",
    "OpenAIBackend",
    "POLICY_MODEL_NAME",
    "Result",
    "StreamEnd",
    "StreamItem",
    "StubBackend",
    "TokenCounts",
    "TokenLogprob",
    "ToolCallDelta",
    "ToolCallOut",
    "VLLMBackend",
    "VLLMServer",
    "create_backend",
    "ensure_policy_model",
    "find_policy_gguf",
    "find_vllm_python",
    "stub_asgi_app",
]
