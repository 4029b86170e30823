"""Verifiers: outcome checks that turn a (replayed or recorded) final answer into a reward.

Every verifier returns a :class:`Verdict` — ``reward`` in [0, 1] and ``success`` — on the same scale
as the rewards recorded for the task, so a replayed outcome is directly comparable with the recorded
one. Built-in kinds, registered in :data:`VERIFIERS` by name:

========== =========================================================================
exact      the answer equals ``expected`` (trimmed; ``casefold`` by default)
contains   the answer contains ``expected``
regex      the answer matches ``pattern`` (``re.search``)
json_schema the answer (a dict, or text holding JSON) validates against ``schema``
callable   a unit-test-style function ``fn(answer, context)``: passes unless it raises
           ``AssertionError`` or returns ``False``; a number is taken as the reward
judge      a judge model through a backend answers PASS or FAIL for a rubric
========== =========================================================================

Example::

    v = build_verifier({"kind": "regex", "pattern": r"45 days"})
    verdict = await v.ascore("Refunds take 45 days.", VerifyContext(input="How long do refunds take?"))
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import orjson

from molt.errors import ReplayError
from molt.registry import Registry

__all__ = [
    "AGENT_VERIFIERS",
    "TASK_VERIFIERS",
    "VERIFIERS",
    "CallableVerifier",
    "ContainsMatch",
    "ExactMatch",
    "JsonSchemaAnswer",
    "JudgeVerifier",
    "RegexMatch",
    "Verdict",
    "Verifier",
    "VerifyContext",
    "build_verifier",
    "register_named_verifiers",
    "verifier_from_spec",
]


@dataclass(frozen=True, slots=True)
class Verdict:
    """A verifier's judgement: ``reward`` in [0, 1], ``success`` (reward > 0.5 by default), why."""

    reward: float
    success: bool
    detail: str = ""


@dataclass(frozen=True, slots=True)
class VerifyContext:
    """What a verifier may look at besides the answer: the episode's input and trajectory id."""

    input: str = ""
    trajectory_id: str | None = None
    task: str | None = None


def _text(answer: Any) -> str:
    if answer is None:
        return ""
    if isinstance(answer, str):
        return answer
    return orjson.dumps(answer, option=orjson.OPT_SORT_KEYS).decode()


def _pass(ok: bool, detail: str) -> Verdict:
    return Verdict(1.0 if ok else 0.0, ok, detail)


class Verifier:
    """Base class: implement :meth:`score` (or :meth:`ascore` for verifiers that call a model)."""

    kind: ClassVar[str] = "base"

    def score(self, answer: Any, context: VerifyContext) -> Verdict:
        """Judge ``answer``."""
        raise NotImplementedError

    async def ascore(self, answer: Any, context: VerifyContext) -> Verdict:
        """Judge ``answer`` (async; defaults to :meth:`score`)."""
        return self.score(answer, context)


class ExactMatch(Verifier):
    """The answer equals ``expected`` after trimming (and case-folding unless ``casefold=False``)."""

    kind = "exact"

    def __init__(self, expected: str, *, casefold: bool = True):
        self.expected, self.casefold = expected, casefold

    def score(self, answer: Any, context: VerifyContext) -> Verdict:
        a, e = _text(answer).strip(), self.expected.strip()
        if self.casefold:
            a, e = a.casefold(), e.casefold()
        return _pass(a == e, f"exact match with {self.expected!r}")


class ContainsMatch(Verifier):
    """The answer contains ``expected`` (case-insensitive unless ``casefold=False``)."""

    kind = "contains"

    def __init__(self, expected: str, *, casefold: bool = True):
        self.expected, self.casefold = expected, casefold

    def score(self, answer: Any, context: VerifyContext) -> Verdict:
        a, e = _text(answer), self.expected
        if self.casefold:
            a, e = a.casefold(), e.casefold()
        return _pass(e in a, f"contains {self.expected!r}")


class RegexMatch(Verifier):
    """The answer matches ``pattern`` (``re.search``; ``flags`` e.g. ``re.I``)."""

    kind = "regex"

    def __init__(self, pattern: str, *, flags: int = 0):
        self.pattern = re.compile(pattern, flags)

    def score(self, answer: Any, context: VerifyContext) -> Verdict:
        return _pass(self.pattern.search(_text(answer)) is not None, f"matches /{self.pattern.pattern}/")


class JsonSchemaAnswer(Verifier):
    """The answer — a dict/list, or text holding one JSON value — validates against ``schema``."""

    kind = "json_schema"

    def __init__(self, schema: dict[str, Any]):
        try:
            import jsonschema  # type: ignore[import-untyped,unused-ignore]
        except ImportError as exc:
            err = ReplayError("The json_schema verifier needs the jsonschema package.")
            err.add_note("Install it with: pip install 'jsonschema>=4.23'")
            raise err from exc
        self.schema = schema
        self._validator = jsonschema.Draft202012Validator(schema)

    def score(self, answer: Any, context: VerifyContext) -> Verdict:
        value = answer
        if isinstance(answer, str):
            m = re.search(r"[\[{].*[\]}]", answer, re.DOTALL)
            try:
                value = orjson.loads(m.group(0) if m else answer)
            except orjson.JSONDecodeError:
                return _pass(False, "the answer holds no JSON value")
        errors = sorted(self._validator.iter_errors(value), key=lambda e: list(e.path))
        return _pass(not errors, errors[0].message if errors else "valid against the schema")


class CallableVerifier(Verifier):
    """A unit-test-style check ``fn(answer, context)`` (or ``fn(answer)``).

    It passes unless it raises ``AssertionError`` or returns ``False``; a returned number is the reward
    (success when > 0.5). Any other exception is a failing verdict naming it.
    """

    kind = "callable"

    def __init__(self, fn: Callable[..., Any]):
        self.fn = fn
        import inspect

        try:
            self._two = len(inspect.signature(fn).parameters) >= 2
        except (TypeError, ValueError):
            self._two = True

    def score(self, answer: Any, context: VerifyContext) -> Verdict:
        try:
            out = self.fn(answer, context) if self._two else self.fn(answer)
        except AssertionError as exc:
            return _pass(False, f"assertion failed: {exc}" if str(exc) else "assertion failed")
        except Exception as exc:
            return _pass(False, f"the check raised {type(exc).__name__}: {exc}")
        if isinstance(out, bool):
            return _pass(out, "check returned " + str(out))
        if isinstance(out, int | float):
            r = max(0.0, min(1.0, float(out)))
            return Verdict(r, r > 0.5, f"check scored {r:g}")
        return _pass(True, "check passed")


class JudgeVerifier(Verifier):
    """A judge model through a :mod:`molt.backends` backend answers PASS or FAIL for ``rubric``.

    Args:
        backend: the judge's backend (any kind; ``local`` runs SmolLM2 in process).
        rubric: what a good answer does, e.g. "states the refund window in days".
        model: the model name to ask (default: the backend's).
    """

    kind = "judge"
    PROMPT = ("You grade an assistant's answer. Rubric: {rubric}\nQuestion: {question}\nAnswer: {answer}\n"
              "Reply with exactly one word: PASS if the answer meets the rubric, otherwise FAIL.")

    def __init__(self, backend: Any, rubric: str, *, model: str | None = None):
        self.backend, self.rubric, self.model = backend, rubric, model

    def score(self, answer: Any, context: VerifyContext) -> Verdict:
        raise ReplayError("The judge verifier calls a model; use `await verifier.ascore(...)`.")

    async def ascore(self, answer: Any, context: VerifyContext) -> Verdict:
        from molt.backends.base import ChatRequest

        await self.backend.start()
        prompt = self.PROMPT.format(rubric=self.rubric, question=context.input, answer=_text(answer))
        res = await self.backend.chat(ChatRequest(model=self.model or self.backend.model, temperature=0.0,
                                                  max_tokens=4, messages=[{"role": "user", "content": prompt}]))
        said = (res.choices[0].text or "").strip().upper()
        ok = said.startswith("PASS")
        return _pass(ok, f"judge said {said[:20]!r}")


#: Verifier classes by kind (``build_verifier({"kind": …, …})``).
VERIFIERS: Registry[type[Verifier]] = Registry("verifier")
for _cls in (ExactMatch, ContainsMatch, RegexMatch, JsonSchemaAnswer, CallableVerifier, JudgeVerifier):
    VERIFIERS.register(_cls.kind, _cls)

#: The verifier of each task (``metadata.task``), used when neither the call nor the agent names one.
TASK_VERIFIERS: Registry[Verifier] = Registry("task verifier")

#: An agent's own checker, by agent id, registered by whoever runs the agent (a consumer's parse check,
#: a unit test of the answer): it judges the replays of that agent's trajectories that have neither an
#: explicit verifier nor a task's. It needs no label in the traffic — ``VerifyContext.trajectory_id``
#: names the request, so a checker that knows its own requests can judge each as it judged the original.
AGENT_VERIFIERS: Registry[Verifier] = Registry("agent verifier")


def build_verifier(spec: Verifier | dict[str, Any] | str | Callable[..., Any]) -> Verifier:
    """A verifier from an instance, a ``{"kind": …, **kwargs}`` dict, a ``"kind:argument"`` string
    (``"contains:45 days"``, ``"regex:^\\d+$"``, ``"exact:yes"``) or a plain callable."""
    if isinstance(spec, Verifier):
        return spec
    if isinstance(spec, dict):
        kw = dict(spec)
        kind = kw.pop("kind", None)
        if not kind:
            raise ReplayError(f"A verifier spec needs a 'kind' (one of {', '.join(VERIFIERS.names())}).")
        built: Verifier = VERIFIERS.get(kind)(**kw)
        return built
    if isinstance(spec, str):
        kind, sep, arg = spec.partition(":")
        if not sep or kind not in ("exact", "contains", "regex"):
            raise ReplayError(f"A verifier string is 'exact:…', 'contains:…' or 'regex:…', not {spec!r}.")
        made: Verifier = VERIFIERS.get(kind)(arg)  # type: ignore[call-arg]
        return made
    if callable(spec):
        return CallableVerifier(spec)
    raise ReplayError(f"Cannot build a verifier from {spec!r}.")


def verifier_from_spec(spec: str) -> Verifier:
    """A verifier from a command-line spec: ``contains:…`` / ``regex:…`` / ``exact:…`` as
    :func:`build_verifier` reads them, else ``module:function`` (or ``module:Class`` / an instance),
    imported. Raises :class:`ValueError` naming what is wrong (``molt serve`` and ``molt evolve run``
    turn it into a usage error)."""
    import importlib

    kind, _, rest = spec.partition(":")
    if kind in ("contains", "regex", "exact"):
        return build_verifier(spec)
    if not rest or not kind:
        raise ValueError(f"{spec!r}: give contains:TEXT, regex:PATTERN, exact:TEXT or module:function.")
    try:
        obj: Any = importlib.import_module(kind)
        for attr in rest.split("."):
            obj = getattr(obj, attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"{spec!r}: cannot import it ({exc}); is its module on PYTHONPATH?") from exc
    return build_verifier(obj)


def register_named_verifiers(task_specs: list[str], agent_specs: list[str]) -> list[str]:
    """Register ``NAME=SPEC`` verifiers in this process: by task label (:data:`TASK_VERIFIERS`) and by
    agent (:data:`AGENT_VERIFIERS`); returns what was registered (``"task NAME: SPEC"``). Bad input
    raises :class:`ValueError` before anything is registered."""
    todo = []
    for registry, specs, what in ((TASK_VERIFIERS, task_specs, "task"), (AGENT_VERIFIERS, agent_specs, "agent")):
        for item in specs:
            name, sep, spec = item.partition("=")
            if not sep or not name.strip() or not spec.strip():
                raise ValueError(f"{item!r}: expected NAME=SPEC (e.g. arithmetic=mychecks:opens_with_number).")
            todo.append((registry, name.strip(), verifier_from_spec(spec.strip()), f"{what} {name.strip()}: "
                                                                                   f"{spec.strip()}"))
    for registry, name, v, _ in todo:
        registry.register(name, v)
    return [d for *_, d in todo]
