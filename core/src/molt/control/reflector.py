"""The reflector: a model that reads a failing cluster and writes typed candidates.

The templates of :mod:`molt.control.diagnose` turn a cluster's data into candidates by rule (the
correction most users agree on → a memory, an error naming a parameter → a schema note, ...). A
reflector reads the same cluster as a person would — its failing requests with their answers, tool
calls and errors, the users' corrections, the tool schemas the agent offered, and successes of the same
intent for contrast — and answers with candidates as JSON:

========================  ======================================================================
``memory``                a fact the agent lacked, abstracted from the corrections (the fact, not
                          the customer)
``harness_rule``          a system-prompt rule
``tool_description``      a tool's new description
``tool_parameter``        a parameter's new description
``tool_rename``           an upstream rename: the agent's calls of ``tool`` dispatched as ``new_name``
``skill``                 a procedure (name, trigger, instructions)
========================  ======================================================================

The answer is validated by pydantic (:class:`Reflection`); every candidate then goes through the same
gates as a template's — replay on the cluster, the held-back successes, and the best by J wins — so a
reflector can only ever add options, never lower the bar. This is reflective mutation and selection
in the manner of GEPA (Agrawal et al., 2025, "GEPA: Reflective Prompt Evolution Can Outperform
Reinforcement Learning": a model reflects on execution traces in natural language to propose edits,
which are kept only when they score better) and ACE (Zhang et al., 2025, "Agentic Context Engineering":
a reflector distils lessons from trajectories into itemised context updates rather than rewriting the
whole prompt).

What the reflector sees and writes is governed:

- the cluster goes out **redacted** (the plane's redactor: personal data and secrets replaced by
  placeholders) — a reflector may be a third-party model;
- every generated text passes the redactor again: a candidate holding personal data is logged as
  rejected with the entity types and retried in its abstracted form
  (:func:`molt.control.diagnose.abstract_correction`), not simply lost;
- the **tenant check**: a generated text may only name identifiers (tokens mixing letters and digits:
  order numbers, account ids) that the tenant's own window holds; anything else could only come from
  another tenant's data (or be invented) and is rejected;
- invalid JSON, an answer that is not the schema, an empty list and a timeout are rejected with the
  reason; the cycle goes on with the templates' candidates (fail open for the agent: the live version
  is never touched by a reflector failure).

The endpoint is any OpenAI-compatible ``/v1/chat/completions`` (``url``; in production a strong model),
or a :class:`~molt.backends.base.BaseBackend` (by default the served model itself).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import httpx
import orjson
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from molt.control.collaborators import TextRedactor
from molt.control.diagnose import COSTS, Candidate, Cluster, abstract_correction
from molt.control.signals import Episode
from molt.control.versions import AgentVersion
from molt.harness import ToolRewrite

__all__ = ["Reflection", "ReflectionResult", "Reflector"]

_STRICT = ConfigDict(extra="forbid", str_strip_whitespace=True)
_NAME = r"^[A-Za-z0-9_.\-]{1,64}$"


class MemoryOut(BaseModel):
    model_config = _STRICT
    kind: Literal["memory"]
    text: str = Field(min_length=3, max_length=600)


class HarnessRuleOut(BaseModel):
    model_config = _STRICT
    kind: Literal["harness_rule"]
    rule: str = Field(min_length=3, max_length=600)


class ToolDescriptionOut(BaseModel):
    model_config = _STRICT
    kind: Literal["tool_description"]
    tool: str = Field(pattern=_NAME)
    description: str = Field(min_length=3, max_length=1000)


class ToolParameterOut(BaseModel):
    model_config = _STRICT
    kind: Literal["tool_parameter"]
    tool: str = Field(pattern=_NAME)
    parameter: str = Field(pattern=_NAME)
    description: str = Field(min_length=3, max_length=600)


class ToolRenameOut(BaseModel):
    model_config = _STRICT
    kind: Literal["tool_rename"]
    tool: str = Field(pattern=_NAME)
    new_name: str = Field(pattern=_NAME)


class SkillOut(BaseModel):
    model_config = _STRICT
    kind: Literal["skill"]
    name: str = Field(min_length=2, max_length=80)
    trigger: str = Field(min_length=2, max_length=300)
    instructions: str = Field(min_length=3, max_length=1500)


Proposal = Annotated[MemoryOut | HarnessRuleOut | ToolDescriptionOut | ToolParameterOut | ToolRenameOut | SkillOut,
                     Field(discriminator="kind")]


class Reflection(BaseModel):
    """What a reflector must answer: ``{"candidates": [...]}``, each a typed proposal."""

    model_config = ConfigDict(extra="ignore")
    candidates: list[Proposal] = Field(max_length=12)


_PROPOSALS: TypeAdapter[list[Proposal]] = TypeAdapter(list[Proposal])


@dataclass
class ReflectionResult:
    """One cluster's reflection: the candidates that passed validation, redaction and the tenant check;
    what was rejected (decision-log entries with ``rejected``); the cost (tokens, seconds)."""

    candidates: list[Candidate] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)
    cost: dict[str, Any] = field(default_factory=dict)


_SYSTEM = """You improve an AI agent without retraining it. You are shown a cluster of the agent's failed \
requests (personal data replaced by placeholders such as <PERSON_1>), what users said to correct it, the \
tools it offers, and requests of the same kind that succeeded. Propose up to {n} different fixes, each \
one of these JSON objects:
{{"kind": "memory", "text": "<a fact the agent lacked, stated generally, never about one customer>"}}
{{"kind": "harness_rule", "rule": "<an instruction for the system prompt>"}}
{{"kind": "tool_description", "tool": "<tool>", "description": "<a better description>"}}
{{"kind": "tool_parameter", "tool": "<tool>", "parameter": "<parameter>", "description": "<a better description>"}}
{{"kind": "tool_rename", "tool": "<tool the agent calls>", "new_name": "<the name the tool has now>"}}
{{"kind": "skill", "name": "<short name>", "trigger": "<when it applies>", "instructions": "<the steps>"}}
Never include names, emails, phone numbers or ids of customers or orders. Answer with JSON only: \
{{"candidates": [ ... ]}}"""


class Reflector:
    """A model that writes candidates for a failing cluster (see the module docstring).

    Args:
        url: an OpenAI-compatible base URL (``.../v1``); or
        backend: a :class:`~molt.backends.base.BaseBackend` (e.g. the served model).
        model: the model name to ask (default: the backend's model; required with ``url``).
        api_key: bearer token for ``url``.
        timeout_s: a reflection that takes longer is rejected (the cycle goes on without it).
        max_candidates: how many candidates to ask for and keep per cluster.
        max_tokens: the reflection's completion budget.
        examples: failing (and succeeding) requests shown per cluster.
    """

    def __init__(self, url: str | None = None, *, backend: Any = None, model: str | None = None,
                 api_key: str | None = None, timeout_s: float = 120.0, max_candidates: int = 4,
                 max_tokens: int = 512, temperature: float = 0.7, examples: int = 4):
        if (url is None) == (backend is None):
            raise ValueError("Reflector needs exactly one of url (an OpenAI-compatible endpoint) or backend.")
        if url is not None and not model:
            raise ValueError("Reflector(url=...) needs the model name to ask.")
        self.url = url.rstrip("/") if url else None
        self.backend = backend
        self.model = model or (backend.model if backend is not None else "")
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.max_candidates = max_candidates
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.examples = examples
        #: Totals over this reflector's life: calls, prompt / completion tokens, seconds.
        self.usage: dict[str, float] = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "seconds": 0.0}

    # ------------------------------------------------------------------ the call

    async def _ask(self, messages: list[dict[str, Any]]) -> tuple[str, int, int]:
        if self.backend is not None:
            from molt.backends.base import ChatRequest

            await self.backend.start()  # idempotent; the reflector may ask before any replay has
            res = await self.backend.chat(ChatRequest(model=self.model, messages=messages, max_tokens=self.max_tokens,
                                                      temperature=self.temperature))
            u = res.usage
            return res.choices[0].text or "", (u.prompt_tokens if u else 0), (u.completion_tokens if u else 0)
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        async with httpx.AsyncClient(timeout=self.timeout_s) as http:
            r = await http.post(f"{self.url}/chat/completions", headers=headers, json={
                "model": self.model, "messages": messages, "max_tokens": self.max_tokens,
                "temperature": self.temperature})
            r.raise_for_status()
            body = r.json()
        u = body.get("usage") or {}
        return (body["choices"][0]["message"].get("content") or "", int(u.get("prompt_tokens") or 0),
                int(u.get("completion_tokens") or 0))

    async def areflect(self, cluster: Cluster, window: Sequence[Episode], live: AgentVersion, *,
                       redactor: TextRedactor | None) -> ReflectionResult:
        """The reflector's candidates for ``cluster`` (see the module docstring). Never raises for what
        the model answers: a bad answer is a rejected entry with the reason."""
        out = ReflectionResult()
        prompt = self.prompt(cluster, window, redactor)
        t0 = time.perf_counter()
        try:
            text, pt, ct = await asyncio.wait_for(self._ask(prompt), self.timeout_s)
        except TimeoutError:
            out.rejected.append(_rejected(cluster, f"reflector: no answer within {self.timeout_s:.0f} s"))
            out.cost = {"seconds": time.perf_counter() - t0}
            self._count(out.cost)
            return out
        except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
            out.rejected.append(_rejected(cluster, f"reflector: the endpoint failed: {type(exc).__name__}: {exc}"))
            out.cost = {"seconds": time.perf_counter() - t0}
            self._count(out.cost)
            return out
        out.cost = {"prompt_tokens": pt, "completion_tokens": ct, "seconds": time.perf_counter() - t0}
        self._count(out.cost)
        proposals, why = parse_reflection(text)
        if why is not None:
            out.rejected.append(_rejected(cluster, f"reflector: {why}", raw=text[:500]))
            return out
        known = _tenant_text(cluster, window, live.tenant_id)
        for prop in proposals[: self.max_candidates]:
            for cand, reason in self._candidates(prop, cluster, live, redactor, known):
                if reason is not None:
                    out.rejected.append(_rejected(cluster, reason, proposal=prop.model_dump()))
                if cand is not None:
                    out.candidates.append(cand)
        return out

    def _count(self, cost: dict[str, Any]) -> None:
        self.usage["calls"] += 1
        for k in ("prompt_tokens", "completion_tokens", "seconds"):
            self.usage[k] += cost.get(k, 0)

    # ------------------------------------------------------------------ what it reads

    def prompt(self, cluster: Cluster, window: Sequence[Episode],
               redactor: TextRedactor | None) -> list[dict[str, Any]]:
        """The chat messages of a reflection: the redacted cluster (see the module docstring)."""
        def red(t: Any) -> str:
            s = t if isinstance(t, str) else orjson.dumps(t, default=str).decode()
            return redactor.redact(s)[0] if redactor is not None else s

        lines = [f"Failure cluster: {cluster.size} failed request(s) of the same kind "
                 f"(signature {cluster.signature}; failure signals: "
                 f"{', '.join(sorted({s for e in cluster.failures for s in e.failure_signals})) or 'reward'})."]
        tools = cluster.failures[0].offered_tools if cluster.failures else []
        if tools:
            lines.append("Tools the agent offers:")
            lines += [f"- {red(t.get('function') or {})[:600]}" for t in tools if isinstance(t, dict)]
        lines.append("Failed requests:")
        for e in cluster.failures[: self.examples]:
            lines.append(f"- request: {red(e.question)[:400]}")
            for t in e.tools:
                lines.append(f"  tool call {t.name}({red(t.arguments)[:200]})"
                             + ("" if t.ok else f" -> error {t.error_type or ''}: {red(t.error_message or '')[:300]}"))
            lines.append(f"  answer: {red(e.answer or '')[:300]}")
            for c in e.corrections[-1:]:
                lines.append(f"  the user's correction: {red(c)[:300]}")
            if e.verdict:
                lines.append(f"  verdict: {red(e.verdict)[:200]}")
        wins = [e for e in cluster.requests if e.success][: self.examples]
        if wins:
            lines.append("Requests of the same kind that succeeded:")
            for e in wins:
                lines.append(f"- request: {red(e.question)[:300]}")
                lines += [f"  tool call {t.name}" + ("" if t.ok else " (failed)") for t in e.tools]
                lines.append(f"  answer: {red(e.answer or '')[:200]}")
        return [{"role": "system", "content": _SYSTEM.format(n=self.max_candidates)},
                {"role": "user", "content": "\n".join(lines)}]

    # ------------------------------------------------------------------ what it writes

    def _candidates(self, prop: Any, cluster: Cluster, live: AgentVersion, redactor: TextRedactor | None,
                    known: str) -> list[tuple[Candidate | None, str | None]]:
        """One proposal → a candidate (or a rejection), retried abstracted when it holds personal data."""
        texts = _texts(prop)
        foreign = sorted({tok for t in texts for tok in _IDENTS.findall(t) if tok.lower() not in known})
        if foreign:
            return [(None, f"tenant: the reflector's {prop.kind} names {', '.join(foreign[:5])}, which "
                           f"{live.tenant_id}'s traffic does not hold (another tenant's data, or invented)")]
        if redactor is None:
            return [(self._candidate(prop, cluster, live), None)]
        found = sorted({sp.entity_type for t in texts for sp in redactor.redact(t)[1]})
        if not found:
            return [(self._candidate(prop, cluster, live), None)]
        why = f"safety: the reflector's {prop.kind} contains {', '.join(found)}; retried abstracted"
        data = prop.model_dump()
        for k, v in data.items():
            if k not in ("kind", "tool", "parameter", "new_name") and isinstance(v, str):
                data[k] = abstract_correction(v, redactor)
        try:
            clean = _PROPOSALS.validate_python([data])[0]
        except ValidationError:
            return [(None, why.replace("retried abstracted", "nothing is left once it is removed"))]
        if any(redactor.redact(t)[1] for t in _texts(clean)):
            return [(None, why.replace("retried abstracted", "still after abstraction"))]
        return [(self._candidate(clean, cluster, live, redacted=True), why)]

    def _candidate(self, prop: Any, cluster: Cluster, live: AgentVersion, *, redacted: bool = False) -> Candidate:
        parts = live.parts
        ids = [e.trajectory_id for e in cluster.failures]
        note = " (abstracted)" if redacted else ""
        common: dict[str, Any] = {"cluster": cluster.key, "source_trajectories": ids}
        k = prop.kind
        if k == "memory":
            return Candidate(kind="memory_insert", cost=COSTS["memory_insert"], description=f"reflector memory{note}: "
                             f"{prop.text[:120]}", payload={"text": prop.text, "source": "reflector"}, **common)
        if k == "harness_rule":
            return Candidate(kind="harness_edit", cost=COSTS["harness_edit"], description=f"reflector rule{note}: "
                             f"{prop.rule[:120]}", parts=parts.with_system_prompt(prop.rule),
                             payload={"system_prompt": prop.rule, "source": "reflector"}, **common)
        if k == "skill":
            return Candidate(kind="skill_patch", cost=COSTS["skill_patch"], description=f"reflector skill{note} "
                             f"'{prop.name}': {prop.instructions[:120]}",
                             payload={"name": prop.name, "trigger": prop.trigger, "instructions": prop.instructions,
                                      "source": "reflector"}, **common)
        schema = _schema(cluster, prop.tool)
        if k == "tool_description":
            rw = ToolRewrite(description=prop.description)
            desc = f"reflector: {prop.tool}'s description{note}: {prop.description[:120]}"
        elif k == "tool_parameter":
            params = dict((schema or {}).get("parameters") or {"type": "object", "properties": {}})
            props = dict(params.get("properties") or {})
            props[prop.parameter] = {**dict(props.get(prop.parameter) or {"type": "string"}),
                                     "description": prop.description}
            rw = ToolRewrite(parameters={**params, "properties": props})
            desc = f"reflector: {prop.tool}.{prop.parameter}{note}: {prop.description[:120]}"
        else:
            rw = ToolRewrite(dispatch=prop.new_name)
            desc = f"reflector: dispatch the agent's {prop.tool} calls as {prop.new_name}"
        return Candidate(kind="tool_schema_edit", cost=COSTS["tool_schema_edit"], description=desc,
                         parts=parts.with_tools({prop.tool: rw}),
                         payload={**prop.model_dump(), "source": "reflector"}, **common)


def parse_reflection(text: str) -> tuple[list[Any], str | None]:
    """The proposals in a reflector's answer, or ``([], why)``. Accepts ``{"candidates": [...]}`` or a
    bare list, inside a fenced block or surrounded by prose (small models add both)."""
    body = text.strip()
    fenced = re.search(r"```(?:json)?\s*(.*?)```", body, re.S)
    if fenced:
        body = fenced.group(1).strip()
    data: Any = None
    order = (("[", "]"), ("{", "}")) if -1 < body.find("[") < body.find("{") or "{" not in body else (
        ("{", "}"), ("[", "]"))
    for start, end in order:
        i, j = body.find(start), body.rfind(end)
        if i != -1 and j > i:
            try:
                data = orjson.loads(body[i:j + 1])
                break
            except orjson.JSONDecodeError:
                continue
    if data is None:
        return [], f"invalid JSON: {text.strip()[:120]!r}"
    items = data.get("candidates") if isinstance(data, dict) else data
    if not isinstance(items, list):
        return [], "the answer has no list of candidates"
    if not items:
        return [], "an empty list of candidates"
    good: list[Any] = []
    errors: list[str] = []
    for it in items:
        try:
            good.append(_PROPOSALS.validate_python([it])[0])
        except ValidationError as exc:
            errors.append(f"{str(it)[:80]}: {exc.errors()[0]['msg']}")
    if not good:
        return [], f"no candidate matches the schema ({'; '.join(errors[:3])})"
    return good, None


_IDENTS = re.compile(r"\b(?=[\w-]*[A-Za-z])(?=[\w-]*\d)[A-Za-z0-9]+(?:[-_][A-Za-z0-9]+)*\b")


def _texts(prop: Any) -> list[str]:
    return [v for k, v in prop.model_dump().items() if k != "kind" and isinstance(v, str)]


def _tenant_text(cluster: Cluster, window: Sequence[Episode], tenant: str) -> str:
    """Everything the tenant's window says (lower-cased): what a generated id may be taken from."""
    parts: list[str] = []
    for e in list(window) + list(cluster.failures):
        if e.tenant_id not in (tenant, None):
            continue
        parts += [e.question, e.answer or "", *e.corrections, e.verdict or ""]
        parts += [orjson.dumps(t.arguments, default=str).decode() + " " + (t.error_message or "") for t in e.tools]
        parts += [orjson.dumps(t, default=str).decode() for t in e.offered_tools]
    return "\n".join(parts).lower()


def _schema(cluster: Cluster, tool: str) -> dict[str, Any] | None:
    for e in cluster.failures:
        for t in e.offered_tools:
            fn = t.get("function") if isinstance(t, dict) else None
            if isinstance(fn, dict) and fn.get("name") == tool:
                return fn
    return None


def _rejected(cluster: Cluster, reason: str, **extra: Any) -> dict[str, Any]:
    return {"kind": "reflection", "cluster": cluster.key, "rejected": reason, **extra}
