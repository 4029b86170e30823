"""What the control plane needs of the parts it is given, as protocols: a redactor for learned text and a
reflector that writes candidates. A test or a deployment passes its own (a scripted reflector, a stricter
redactor) without subclassing Molt's; the embedder's protocol is :class:`molt.control.embed.Embedder`, and
the memory store is :class:`molt.control.memory.MemoryStore` itself (the plane's one store of learned text).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from molt.control.clusters import Cluster
    from molt.control.reflector import ReflectionResult
    from molt.control.signals import Episode
    from molt.control.versions import AgentVersion

__all__ = ["CandidateReflector", "TextRedactor"]


@runtime_checkable
class TextRedactor(Protocol):
    """Redacts one text: ``(redacted text, spans found)`` — a
    :class:`~molt.governance.redaction.Redactor` is one. The plane reads only whether spans were found and
    the redacted text; ``state`` keeps one value's placeholder the same across several texts."""

    def redact(self, text: str, state: Any = None) -> tuple[str, Sequence[Any]]: ...


@runtime_checkable
class CandidateReflector(Protocol):
    """Reads a failing cluster and proposes typed candidates (:class:`~molt.control.reflector.Reflector`
    asks an OpenAI-compatible model). It never raises for what its model answers: a bad answer is a
    rejected entry in the result."""

    async def areflect(self, cluster: Cluster, window: Sequence[Episode], live: AgentVersion, *,
                       redactor: TextRedactor | None) -> ReflectionResult: ...
