"""The harness application point: a policy version's non-weight parts applied to a chat request.

The gateway calls :meth:`HarnessApplier.apply` with the client's messages and tools and the policy
version the router picked, sends what comes back to the model, and records the version and
fingerprint in provenance. :class:`StaticHarness` applies the :class:`HarnessSpec` a version carries
(or a fixed default spec); the control plane can supply a smarter applier (retrieved memories per
request, for instance) through the same protocol.

Example::

    applied = StaticHarness().apply(messages, tools, version)
    backend_request.messages, backend_request.tools = applied.messages, applied.tools
    client_name = applied.client_tool_name(model_tool_call.name)
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from molt.harness.spec import HarnessSpec

__all__ = ["Applied", "HarnessApplier", "HarnessTarget", "StaticHarness", "belongs_to"]


@runtime_checkable
class HarnessTarget(Protocol):
    """What the applier needs of a policy version: its id and harness spec (``None``: no harness)."""

    @property
    def version(self) -> str: ...

    @property
    def harness(self) -> HarnessSpec | None: ...


@dataclass(slots=True)
class Applied:
    """A request after the harness: the messages and tools the model sees.

    ``tool_names`` maps a renamed tool (as the model sees it) back to the client's name (or to the
    name a rewrite's ``dispatch`` gives the client).
    """

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    fingerprint: str | None = None
    tool_names: dict[str, str] = field(default_factory=dict)

    def client_tool_name(self, name: str) -> str:
        """The client's name for a tool the model called by ``name``."""
        return self.tool_names.get(name, name)


@runtime_checkable
class HarnessApplier(Protocol):
    """Applies a policy version's harness to a request (pure: never mutates its inputs)."""

    def apply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
              version: HarnessTarget | None) -> Applied:
        """The messages and tools to send to the model for ``version``."""
        ...


class StaticHarness:
    """Applies the spec the version carries, or ``default`` when it carries none."""

    def __init__(self, default: HarnessSpec | None = None):
        self.default = default if default is not None and not default.is_empty else None

    def apply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
              version: HarnessTarget | None) -> Applied:
        """See :class:`HarnessApplier`; with nothing to apply, the inputs come back untouched."""
        spec = version.harness if version is not None and version.harness is not None else self.default
        if spec is None or spec.is_empty:
            return Applied(messages, tools)
        return apply_spec(spec, messages, tools)


def belongs_to(version: object, tenant_id: str) -> bool:
    """Whether ``version``'s parts may be applied to a request of ``tenant_id``: a shared version
    (no ``tenant_id``) or one of that tenant. The router already resolves a request's model only
    inside its tenant; the application point checks again, so a routing fault can never put one
    tenant's prompt, memories or skills into another's request."""
    owner = getattr(version, "tenant_id", None)
    return owner is None or owner == tenant_id


def apply_spec(spec: HarnessSpec, messages: list[dict[str, Any]],
               tools: list[dict[str, Any]] | None) -> Applied:
    """``spec`` applied to a copy of ``messages`` and ``tools``."""
    msgs = [dict(m) for m in messages]
    extra: list[str] = []
    if spec.memories:
        extra.append(spec.memory_header + "\n" + "\n".join(f"- {m}" for m in spec.memories))
    if spec.skills:
        extra.append("Skills:\n" + "\n".join(f"## {s.name}\n{s.instructions}" for s in spec.skills))
    has_system = bool(msgs) and msgs[0].get("role") in ("system", "developer")
    current = _text(msgs[0].get("content")) if has_system else ""
    if spec.system_prompt is not None:
        if spec.system_prompt_mode == "replace" or not current:
            current = spec.system_prompt
        elif spec.system_prompt_mode == "prepend":
            current = f"{spec.system_prompt}\n\n{current}"
        else:
            current = f"{current}\n\n{spec.system_prompt}"
    system = "\n\n".join(p for p in [current, *extra] if p)
    if system:
        if has_system:
            msgs[0]["content"] = system
        else:
            msgs.insert(0, {"role": "system", "content": system})

    new_tools = tools
    back: dict[str, str] = {}
    if tools and spec.tool_rewrites:
        forward: dict[str, str] = {}
        new_tools = []
        for t in tools:
            t = copy.deepcopy(t)
            fn = t.get("function", {})
            rw = spec.tool_rewrites.get(fn.get("name", ""))
            if rw is not None:
                if rw.description is not None:
                    fn["description"] = rw.description
                if rw.parameters is not None:
                    fn["parameters"] = dict(rw.parameters)
                if rw.rename:
                    forward[fn["name"]] = rw.rename
                    back[rw.rename] = rw.dispatch or fn["name"]
                    fn["name"] = rw.rename
                elif rw.dispatch:
                    back[fn["name"]] = rw.dispatch
            new_tools.append(t)
        if forward:  # earlier calls in the history must use the names the model now sees
            for m in msgs:
                if m.get("tool_calls"):
                    m["tool_calls"] = [_renamed(c, forward) for c in m["tool_calls"]]
    return Applied(msgs, new_tools, fingerprint=spec.fingerprint(), tool_names=back)


def _renamed(call: dict[str, Any], forward: dict[str, str]) -> dict[str, Any]:
    fn = call.get("function") or {}
    if fn.get("name") in forward:
        call = {**call, "function": {**fn, "name": forward[fn["name"]]}}
    return call


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""
