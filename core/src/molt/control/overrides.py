"""The replay overrides that serve an agent version's parts: its snapshot memories and skills injected
into the harness, the model's adapter."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from molt.control.versions import AgentConfig
from molt.harness import Skill
from molt.replay import Overrides

__all__ = ["overrides_for"]


def overrides_for(parts: AgentConfig, memories: Any = None, *, tenant_id: str | None = None,
                  extra_memories: Sequence[str] = (), extra_skills: Sequence[Skill] = ()) -> Overrides:
    """The replay :class:`Overrides` that serve ``parts`` (all snapshot memories and skills injected)."""
    mems = list(parts.harness.memories)
    skills = list(parts.harness.skills)
    if memories is not None and tenant_id is not None:
        if parts.memory_ids:
            mems += [m.text for m in memories.memories(tenant_id, list(parts.memory_ids))]
        if parts.skill_ids:
            skills += [Skill(name=s.name, instructions=s.instructions)
                       for s in memories.skills(tenant_id, list(parts.skill_ids))]
    mems += list(extra_memories)
    skills += list(extra_skills)
    h = parts.effective_harness()
    return Overrides(system_prompt=h.system_prompt, system_prompt_mode=h.system_prompt_mode,
                     memories=tuple(dict.fromkeys(mems)), skills=tuple(skills), tool_rewrites=dict(h.tool_rewrites),
                     model=parts.model.adapter)
