"""The backend protocol: what the gateway asks of a model server, and what it gets back.

A backend turns an OpenAI-shaped chat or completion request into a :class:`Result` (or, streamed, a
sequence of :class:`Delta` pieces closed by one :class:`StreamEnd`): text, tool calls, and — when the
backend knows them — the exact prompt and completion token ids with the sampling policy's logprobs.
Those are what the gateway records, so a model call can be trained on.

Requests and results are plain slotted dataclasses, not pydantic models: they live on the request
path, where every microsecond is the gateway's overhead.

Example::

    from molt.backends import ChatRequest, create_backend

    backend = create_backend("stub")
    result = await backend.chat(ChatRequest(model="stub", messages=[{"role": "user", "content": "hi"}]))
    print(result.choices[0].text, result.choices[0].token_ids)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

from molt.errors import BackendError

__all__ = [
    "Backend",
    "BackendCapabilities",
    "BaseBackend",
    "ChatRequest",
    "Choice",
    "CompletionRequest",
    "Delta",
    "Result",
    "StreamEnd",
    "StreamItem",
    "TokenCounts",
    "TokenLogprob",
    "ToolCallDelta",
    "ToolCallOut",
]


@dataclass(slots=True)
class ChatRequest:
    """An OpenAI chat-completions request as a backend sees it (after routing and the harness).

    ``model`` is the name the backend serves (a base model or a LoRA adapter name), not necessarily
    the public model name the client asked for. ``extra`` carries OpenAI fields Molt does not
    interpret (``presence_penalty``, ``response_format``, …); upstream backends pass them through.
    """

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    n: int = 1
    stop: list[str] | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    seed: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class CompletionRequest:
    """An OpenAI (legacy) completions request: a text prompt or a list of token ids."""

    model: str
    prompt: str | list[int]
    n: int = 1
    stop: list[str] | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    logprobs: int | None = None
    seed: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class TokenLogprob:
    """One sampled token: its text, log-probability, id (when known) and the top alternatives."""

    token: str
    logprob: float
    token_id: int | None = None
    top: list[tuple[str, float]] | None = None


@dataclass(slots=True)
class ToolCallOut:
    """A tool call in a model's answer; ``arguments`` is the JSON text, as OpenAI returns it."""

    id: str
    name: str
    arguments: str


@dataclass(slots=True)
class Choice:
    """One sampled answer. ``token_ids``/``logprobs`` are ``None`` when the backend cannot tell."""

    index: int
    text: str | None
    tool_calls: list[ToolCallOut] | None = None
    finish_reason: str | None = "stop"
    token_ids: list[int] | None = None
    logprobs: list[TokenLogprob] | None = None


@dataclass(slots=True)
class TokenCounts:
    """Token counts of a call."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens


@dataclass(slots=True)
class Result:
    """A finished call. ``prompt_ids`` are the exact prompt tokens when the backend built them."""

    choices: list[Choice]
    model: str
    usage: TokenCounts | None = None
    prompt_ids: list[int] | None = None
    tokenizer: str | None = None


@dataclass(slots=True)
class ToolCallDelta:
    """A piece of a streamed tool call (OpenAI streams the id and name first, then arguments)."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(slots=True)
class Delta:
    """A piece of a streamed answer for choice ``index``."""

    index: int = 0
    text: str | None = None
    tool_calls: list[ToolCallDelta] | None = None
    token_ids: list[int] | None = None
    logprobs: list[TokenLogprob] | None = None
    finish_reason: str | None = None


@dataclass(slots=True)
class StreamEnd:
    """The last item of a stream: usage and the prompt tokens, when known."""

    model: str
    usage: TokenCounts | None = None
    prompt_ids: list[int] | None = None
    tokenizer: str | None = None


StreamItem = Delta | StreamEnd


@dataclass(frozen=True, slots=True)
class BackendCapabilities:
    """What a backend can do; the gateway and the router read these."""

    token_ids: bool = False
    logprobs: bool = False
    streaming: bool = True
    tools: bool = True
    lora: bool = False


@runtime_checkable
class Backend(Protocol):
    """A model server behind the gateway.

    ``name`` names this instance (``vllm-0``), ``kind`` its registry name (``vllm``). Methods raise
    :class:`~molt.errors.BackendError` subclasses: ``BackendUnavailable`` (down), ``BackendTimeout``
    (too slow), ``BackendStreamError`` (died mid-stream), or a ``GatewayError`` for a request the
    backend rejects (bad parameters, unknown model).
    """

    name: str
    kind: str
    capabilities: BackendCapabilities

    async def start(self) -> None:
        """Prepare the backend (load a model, start a server); called once before serving."""

    async def chat(self, request: ChatRequest) -> Result:
        """Answer a chat request."""

    def stream_chat(self, request: ChatRequest) -> AsyncIterator[StreamItem]:
        """Answer a chat request piece by piece; the last item is a :class:`StreamEnd`."""

    async def complete(self, request: CompletionRequest) -> Result:
        """Answer a completions request."""

    def stream_complete(self, request: CompletionRequest) -> AsyncIterator[StreamItem]:
        """Answer a completions request piece by piece; the last item is a :class:`StreamEnd`."""

    async def models(self) -> list[str]:
        """Model names this backend serves (base model and loaded adapters)."""

    async def health(self) -> bool:
        """Whether the backend can take requests now."""

    async def load_adapter(self, name: str, path: str) -> None:
        """Load a LoRA adapter from ``path`` to be served as model ``name`` (no restart)."""

    async def aclose(self) -> None:
        """Release connections, models and processes."""


class BaseBackend:
    """Defaults for a backend: streaming built from ``chat``, no adapters, always healthy."""

    kind: ClassVar[str] = "base"
    capabilities: BackendCapabilities = BackendCapabilities()
    #: Client APIs whose requests this backend's upstream takes as they are (``"messages"``,
    #: ``"responses"``; :mod:`molt.backends.upstream`): the gateway relays those instead of translating
    #: them to chat. None by default.
    passthrough: frozenset[str] = frozenset()

    def __init__(self, name: str | None = None, *, model: str | None = None):
        self.name = name or self.kind
        self.model = model or self.kind

    async def start(self) -> None:
        """Nothing to prepare by default."""

    async def chat(self, request: ChatRequest) -> Result:
        """Subclasses implement this."""
        raise NotImplementedError

    async def complete(self, request: CompletionRequest) -> Result:
        """Subclasses implement this."""
        raise NotImplementedError

    async def stream_chat(self, request: ChatRequest) -> AsyncIterator[StreamItem]:
        """The whole answer as one delta per choice (backends that can stream override this)."""
        result = await self.chat(request)
        for item in result_as_stream(result):
            yield item

    async def stream_complete(self, request: CompletionRequest) -> AsyncIterator[StreamItem]:
        """The whole answer as one delta per choice (backends that can stream override this)."""
        result = await self.complete(request)
        for item in result_as_stream(result):
            yield item

    async def models(self) -> list[str]:
        """The one model this backend was configured with."""
        return [self.model]

    async def health(self) -> bool:
        """Healthy unless a subclass says otherwise."""
        return True

    async def relay(self, api: str, body: dict[str, Any]) -> Any:
        """Relay a request of client API ``api`` as it is (backends with a :attr:`passthrough`)."""
        raise BackendError(f"The {self.kind} backend {self.name!r} passes no {api!r} requests through.",
                           backend=self.name)

    def relay_stream(self, api: str, body: dict[str, Any]) -> AsyncIterator[Any]:
        """Relay a streamed request of client API ``api`` (backends with a :attr:`passthrough`)."""
        raise BackendError(f"The {self.kind} backend {self.name!r} passes no {api!r} requests through.",
                           backend=self.name)

    async def load_adapter(self, name: str, path: str) -> None:
        """Backends without LoRA support refuse."""
        raise BackendError(f"The {self.kind} backend {self.name!r} cannot load LoRA adapters; serve the "
                           f"model with the vllm (or local) backend to hot-load adapters.", backend=self.name)

    async def aclose(self) -> None:
        """Nothing to release by default."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, model={self.model!r})"


def result_as_stream(result: Result) -> list[StreamItem]:
    """A finished result as stream items: one delta per choice, then the end."""
    items: list[StreamItem] = []
    for c in result.choices:
        calls = None
        if c.tool_calls:
            calls = [ToolCallDelta(index=i, id=t.id, name=t.name, arguments=t.arguments)
                     for i, t in enumerate(c.tool_calls)]
        items.append(Delta(index=c.index, text=c.text, tool_calls=calls, token_ids=c.token_ids,
                           logprobs=c.logprobs, finish_reason=c.finish_reason))
    items.append(StreamEnd(model=result.model, usage=result.usage, prompt_ids=result.prompt_ids,
                           tokenizer=result.tokenizer))
    return items
