"""The candidate policy a replay runs: overrides, and the backend + harness that apply them.

:class:`Overrides` is what a counterfactual changes — the harness parts (system prompt, inserted
memories, skill patches, tool-schema rewrites), the weights (model name / LoRA adapter served by the
backend) and sampling. :class:`ReplayAgent` applies them exactly as the gateway would — through
:mod:`molt.harness` and a :mod:`molt.backends` backend — but in process: a replay never goes through
the gateway (see the dependency direction in docs/architecture.md).

Example::

    policy = ReplayAgent(create_backend("stub"), Overrides(memories=("Refunds take 45 days.",)))
    decision = await policy.decide([{"role": "user", "content": "How long do refunds take?"}])
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, JsonValue

from molt.backends.base import BaseBackend, ChatRequest
from molt.errors import ReplayError
from molt.harness import HarnessSpec, Skill, StaticHarness, ToolRewrite

__all__ = ["Overrides", "ReplayAgent", "ReplayedCall", "parse_overrides"]


class Overrides(BaseModel):
    """A candidate policy version, as the changes it makes to what was recorded.

    Every field defaults to "as recorded". Fields:

    - ``system_prompt`` / ``system_prompt_mode`` (``append`` default, ``prepend``, ``replace``).
    - ``memories``: facts inserted into the system message; ``skills``: skill patches;
      ``tool_rewrites``: tool name → schema rewrite (see :class:`molt.harness.HarnessSpec`).
    - ``model``: the model or LoRA adapter name the backend serves (default: the backend's own model).
    - ``temperature`` (0 – 2), ``top_p`` (0 – 1], ``max_tokens`` (≥ 1), ``seed``: sampling; ``None``
      keeps the recorded value.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    system_prompt: str | None = None
    system_prompt_mode: Literal["append", "prepend", "replace"] = "append"
    memories: tuple[str, ...] = ()
    skills: tuple[Skill, ...] = ()
    tool_rewrites: dict[str, ToolRewrite] = Field(default_factory=dict)
    model: str | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    max_tokens: int | None = Field(default=None, ge=1)
    seed: int | None = None

    @property
    def harness(self) -> HarnessSpec:
        """The harness part as a :class:`HarnessSpec`."""
        return HarnessSpec(system_prompt=self.system_prompt, system_prompt_mode=self.system_prompt_mode,
                           memories=self.memories, skills=self.skills, tool_rewrites=self.tool_rewrites)

    @property
    def is_empty(self) -> bool:
        """Whether this replays the recording unchanged."""
        return self == Overrides()

    def fingerprint(self) -> str:
        """A stable short id of the candidate (used when no candidate id is given)."""
        canon: Any = self.model_dump(mode="json", exclude_defaults=True)
        return "cand-" + hashlib.sha256(orjson.dumps(canon, option=orjson.OPT_SORT_KEYS)).hexdigest()[:12]


def parse_overrides(items: list[str]) -> Overrides:
    """Overrides from ``key=value`` strings (the CLI's ``--override``).

    ``memory=…`` and ``skill=name:instructions`` may repeat; ``tool.<name>.description=…`` rewrites a
    tool; numbers are parsed for the sampling keys. An unknown key lists the known ones.
    """
    data: dict[str, Any] = {"memories": [], "skills": [], "tool_rewrites": {}}
    simple = {"system_prompt", "system_prompt_mode", "model", "temperature", "top_p", "max_tokens", "seed"}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep:
            raise ValueError(f"--override {item!r} is not key=value; e.g. --override memory='Refunds take 45 days.'")
        if key in ("memory", "memories"):
            data["memories"].append(value)
        elif key in ("skill", "skills"):
            name, _, instr = value.partition(":")
            data["skills"].append({"name": name.strip(), "instructions": instr.strip() or name.strip()})
        elif key.startswith("tool."):
            _, tool, attr = [*key.split(".", 2), "", ""][:3]
            if attr not in ("description", "rename", "parameters"):
                raise ValueError(f"--override {key}: use tool.<name>.description, .rename or .parameters.")
            v: JsonValue = orjson.loads(value) if attr == "parameters" else value
            data["tool_rewrites"].setdefault(tool, {})[attr] = v
        elif key in simple:
            data[key] = (float(value) if key in ("temperature", "top_p") else
                         int(value) if key in ("max_tokens", "seed") else value)
        else:
            known = sorted(simple | {"memory", "skill", "tool.<name>.description", "tool.<name>.rename",
                                     "tool.<name>.parameters"})
            raise ValueError(f"Unknown override {key!r}; known keys: {', '.join(known)}.")
    return Overrides.model_validate(data)


@dataclass(slots=True)
class ReplayedCall:
    """A re-decided model call: text and tool calls (client tool names), with cost."""

    text: str | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # [{"id", "name", "arguments"}]
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    harness_fingerprint: str | None = None


@dataclass(frozen=True, slots=True)
class _Target:
    version: str
    harness: HarnessSpec | None


class ReplayAgent:
    """A backend and the overrides to apply, as one callable "policy".

    Args:
        backend: a started (or startable) :mod:`molt.backends` backend.
        overrides: the candidate (default: none — replay as recorded).
        harness: the applier (default :class:`molt.harness.StaticHarness`).
        version: the candidate's id, recorded in results.
    """

    def __init__(self, backend: BaseBackend, overrides: Overrides | None = None, *,
                 harness: StaticHarness | None = None, version: str | None = None):
        self.backend = backend
        self.overrides = overrides or Overrides()
        self.harness = harness or StaticHarness()
        self.version = version or self.overrides.fingerprint()
        self._target = _Target(self.version, self.overrides.harness)
        self._started = False
        self.calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0

    async def start(self) -> None:
        """Start the backend once."""
        if not self._started:
            await self.backend.start()
            self._started = True

    def with_overrides(self, overrides: Overrides, version: str | None = None) -> ReplayAgent:
        """The same backend under other overrides (no second model load)."""
        p = ReplayAgent(self.backend, overrides, harness=self.harness, version=version)
        p._started = self._started
        return p

    async def decide(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                     sampling: dict[str, Any] | None = None) -> ReplayedCall:
        """Ask the backend, after the harness, what to do next (``sampling``: recorded values)."""
        await self.start()
        o = self.overrides
        s = dict(sampling or {})
        applied = self.harness.apply(messages, tools, self._target)
        req = ChatRequest(
            model=o.model or str(s.get("model") or self.backend.model), messages=applied.messages,
            tools=applied.tools or None,
            temperature=o.temperature if o.temperature is not None else _num(s.get("temperature")),
            top_p=o.top_p if o.top_p is not None else _num(s.get("top_p")),
            max_tokens=o.max_tokens if o.max_tokens is not None else _int(s.get("max_tokens")),
            seed=o.seed if o.seed is not None else _int(s.get("seed")),
        )
        served = await self.backend.models()
        if req.model not in served:
            if o.model is not None:
                raise ReplayError(f"The candidate asks for model {o.model!r}, which the {self.backend.kind} "
                                  f"backend does not serve ({', '.join(served)}); load the adapter first.")
            req.model = self.backend.model  # the recorded public name: the backend serves its own model
        t0 = time.perf_counter()
        res = await self.backend.chat(req)
        dt = time.perf_counter() - t0
        c = res.choices[0]
        calls = []
        for tc in c.tool_calls or []:
            try:
                args: Any = orjson.loads(tc.arguments) if tc.arguments.strip() else {}
            except orjson.JSONDecodeError:
                args = tc.arguments
            calls.append({"id": tc.id, "name": applied.client_tool_name(tc.name), "arguments": args})
        pt = res.usage.prompt_tokens if res.usage else 0
        ct = res.usage.completion_tokens if res.usage else 0
        self.calls += 1
        self.prompt_tokens += pt
        self.completion_tokens += ct
        return ReplayedCall(text=c.text, tool_calls=calls, finish_reason=c.finish_reason, prompt_tokens=pt,
                        completion_tokens=ct, latency_s=dt, harness_fingerprint=applied.fingerprint)


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else None
