"""The harness application point: a policy version's non-weight parts (system prompt, memories,
skills, tool schemas) applied to a request before it reaches the model."""

from molt.harness.apply import Applied, HarnessApplier, HarnessTarget, StaticHarness, apply_spec
from molt.harness.spec import HarnessSpec, Skill, ToolRewrite

__all__ = [
    "Applied",
    "HarnessApplier",
    "HarnessSpec",
    "HarnessTarget",
    "Skill",
    "StaticHarness",
    "ToolRewrite",
    "apply_spec",
]
