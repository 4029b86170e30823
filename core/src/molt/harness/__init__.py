"""The harness application point: a policy version's non-weight parts (system prompt, memories,
skills, tool schemas) applied to a request before it reaches the model — at the gateway, or where
the agent runs (:class:`LiveVersion`, used by the framework adapters)."""

from molt.harness.apply import Applied, HarnessApplier, HarnessTarget, StaticHarness, apply_spec, belongs_to
from molt.harness.live import DEFAULT_POLL_S, LiveVersion, VersionSource
from molt.harness.spec import HarnessSpec, Skill, ToolRewrite

__all__ = [
    "Applied",
    "DEFAULT_POLL_S",
    "HarnessApplier",
    "HarnessSpec",
    "HarnessTarget",
    "LiveVersion",
    "Skill",
    "StaticHarness",
    "ToolRewrite",
    "VersionSource",
    "apply_spec",
    "belongs_to",
]
