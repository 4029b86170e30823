"""The non-weight parts of a policy version: what the harness does to a request before the model.

A :class:`HarnessSpec` is data (frozen, hashable into a fingerprint): a system-prompt edit, memories
to inject, skill patches, and tool-schema rewrites. The control plane produces new specs as
interventions; the gateway applies the one of the policy version a session is routed to, and
records the version and the spec's fingerprint in each event's provenance.

Example::

    spec = HarnessSpec(system_prompt="Answer in one sentence.", memories=["The user is in Paris."],
                       tool_rewrites={"get_weather": ToolRewrite(description="Weather by city name.")})
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator

__all__ = ["HarnessSpec", "Skill", "ToolRewrite"]

_DATA = ConfigDict(extra="forbid", frozen=True)


class Skill(BaseModel):
    """A skill patch: named procedural instructions added to the system prompt."""

    model_config = _DATA

    name: str = Field(min_length=1, max_length=200)
    instructions: str = Field(min_length=1)


class ToolRewrite(BaseModel):
    """A rewrite of one tool's schema as the model sees it.

    ``rename`` shows the tool to the model under another name; the gateway maps the model's calls
    back to the original name, so the agent never notices. ``dispatch`` is the name the agent receives
    the model's calls under instead (default: its own name): the upstream renamed the tool while the
    agent still offers the old name, so its calls must reach the agent's dispatcher under the new one.
    """

    model_config = _DATA

    description: str | None = None
    parameters: dict[str, JsonValue] | None = None
    rename: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.\-]{1,64}$")
    dispatch: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.\-]{1,64}$")


class HarnessSpec(BaseModel):
    """The harness part of a policy version.

    Fields (all optional; the empty spec changes nothing):

    - ``system_prompt`` with ``system_prompt_mode`` (``append`` — default —, ``prepend`` or ``replace``
      the request's own system message).
    - ``memories``: facts injected into the system message under ``memory_header``.
    - ``skills``: :class:`Skill` patches, injected after the memories.
    - ``tool_rewrites``: tool name → :class:`ToolRewrite`.
    """

    model_config = _DATA

    system_prompt: str | None = None
    system_prompt_mode: Literal["append", "prepend", "replace"] = "append"
    memories: tuple[str, ...] = ()
    memory_header: str = "Relevant memories:"
    skills: tuple[Skill, ...] = ()
    tool_rewrites: dict[str, ToolRewrite] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _distinct_renames(self) -> HarnessSpec:
        renames = [r.rename for r in self.tool_rewrites.values() if r.rename]
        if len(set(renames)) != len(renames):
            raise ValueError("tool_rewrites rename two tools to the same name; give each a distinct rename.")
        return self

    @property
    def is_empty(self) -> bool:
        """Whether applying this spec changes nothing."""
        return (self.system_prompt is None and not self.memories and not self.skills
                and not self.tool_rewrites)

    def fingerprint(self) -> str:
        """A stable short hash of the spec (what provenance records as ``harness_fingerprint``)."""
        canon: Any = self.model_dump(mode="json")
        for rw in canon.get("tool_rewrites", {}).values():  # fingerprints from before ``dispatch`` stay valid
            if rw.get("dispatch") is None:
                rw.pop("dispatch", None)
        return "h-" + hashlib.sha256(orjson.dumps(canon, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]
