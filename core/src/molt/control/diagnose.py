"""Diagnosis: the typed candidate interventions for each failure cluster that passed its test
(the clusters and their evidence bar: :mod:`molt.control.clusters`).

Each cluster that passes gets the candidates that could fix it, built from the trajectories:

========================  =====================================================================
``memory_insert``         the correction a majority of the cluster's correcting users agree on,
                          abstracted through the redactor (:func:`agreed_correction`); none
                          when they disagree (the cluster's ``notes`` say so) — in two forms,
                          prose and the question it answers (:func:`qa_form`): replay picks
``tool_schema_edit``      a tool whose calls fail with an argument error: the error message is
                          added to the description of each parameter it names; an error that
                          names another tool than the one called (an upstream rename): the
                          agent's calls dispatched under that name (:func:`rename_targets`)
``skill_patch``           a multi-step procedure that the intent's successes share and its
                          failures lack, whatever signalled the failures (a tool error, a late
                          negative reward, a correction): procedural instructions with a trigger
``harness_edit``          failures whose verdict states a requirement on the answer (a consumer's
                          rejection reason, a rubric, a validator's message — whatever it is
                          about: a citation, a JSON field, a unit, a language): a system-prompt
                          rule stating it; answer failures: a generic "check your work" rule
``weight_update``         answer and requirement failures (no tool error): only when context changes were
                          replayed on the cluster and failed (decided by the selector), sized by
                          recurrence across tenants
``rollback``              the live version, promoted in the window, does worse than the version
                          before it
========================  =====================================================================

A tool-error cluster whose calls failed outside the agent — a timeout, a refused connection, a 5xx, a
rate limit — is an *environment fault* (:func:`environment_fault`): no candidate, the operator is told.
A model can write more candidates for the same cluster: :mod:`molt.control.reflector`.

The candidates' parts are the live version's parts plus the change, so replay evaluates exactly
the version that would go live.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from molt.atdp.ids import new_id
from molt.control.clusters import (
    ALPHA,
    SCREEN,
    SIMILARITY,
    TOLERABLE,
    Cluster,
    Evidence,
    cluster_failures,
    embed_texts,
    intent_text,
    requirement_of,
    resolve_embedder,
    same_pattern,
)
from molt.control.collaborators import TextRedactor
from molt.control.embed import Embedder
from molt.control.signals import Episode
from molt.control.versions import AgentConfig, AgentVersion
from molt.harness import ToolRewrite
from molt.replay.generic import checkable_facts

__all__ = ["ALPHA", "COSTS", "QA_EXTRA", "SCREEN", "SIMILARITY", "TOLERABLE", "Candidate", "Cluster", "Evidence",
           "Kind", "abstract_correction", "agreed_correction", "cluster_failures", "environment_fault", "intent_text",
           "propose", "qa_form", "rename_targets", "rollback_candidate", "same_pattern"]
# The clusters' names (ALPHA … same_pattern) live in molt.control.clusters; re-exported for existing imports.

log = logging.getLogger("molt.control")

Kind = Literal["memory_insert", "memory_update", "memory_retire", "skill_patch", "harness_edit", "tool_schema_edit",
               "weight_update", "rollback", "noop"]

#: Relative cost of each intervention (compute, latency, token budget, blast radius): the selector
#: prefers the cheapest sufficient one.
COSTS: dict[str, float] = {"rollback": 0.5, "memory_retire": 0.5, "memory_update": 0.9, "memory_insert": 1.0,
                           "tool_schema_edit": 2.0, "harness_edit": 2.5,
                           "skill_patch": 3.0, "weight_update": 50.0, "noop": 0.0}

_ARG_ERRORS = re.compile(r"(validation|value|type|schema|argument|invalid)", re.I)


class Candidate(BaseModel):
    """A typed intervention proposed for a cluster; ``parts`` is the version it would make live."""

    model_config = ConfigDict(extra="forbid")

    candidate_id: str = Field(default_factory=lambda: "cand-" + new_id()[-12:])
    kind: Kind
    cluster: str
    description: str
    cost: float
    parts: AgentConfig | None = None
    payload: dict[str, Any] = Field(default_factory=dict)
    source_trajectories: list[str] = Field(default_factory=list)


#: What the question-and-answer form of a memory costs beyond its prose form (its question is more
#: prompt tokens on every request): at equal replay the prose wins, and the Q/A form is replayed only
#: when the prose does not already fix its cluster sufficiently (the cheapest sufficient candidate wins).
QA_EXTRA = 0.05


_PLACEHOLDER_TYPE = re.compile(r"<([A-Z_]+?)_(?:\d+|[0-9a-f]{6,64})>")
_PUBLIC_TYPES = frozenset({"ORGANIZATION", "LOCATION"})


def qa_form(fact: str, questions: Sequence[str], redactor: TextRedactor | None = None) -> str | None:
    """A memory's other form: the users' question and the agreed correction as its answer
    (``"Question: …\nAnswer: …"``). Small models use a fact stated as the answer to the question they are asked
    more often than the same fact in prose (measured on SmolLM2-135M: 38 % against 21 % on fresh asks),
    larger ones use either; which form a memory takes is decided by replay (both are candidates, see
    :func:`propose`). The question is the shortest of the correcting users' requests that holds no
    personal data (the redactor's, or a placeholder governance put in at capture for anything but an
    organisation or a place — what policy facts are about); ``None`` when every one does — a memory never
    carries a customer's personal data."""
    fact = _normalize(fact)
    asked = sorted({_normalize(q) for q in questions if q and q.strip()}, key=lambda q: (len(q), q))
    for q in asked:
        if len(q) > 300 or any(m.group(1) not in _PUBLIC_TYPES for m in _PLACEHOLDER_TYPE.finditer(q)):
            continue
        if redactor is not None and redactor.redact(q)[1]:
            continue
        return f"Question: {q}\nAnswer: {fact}"
    return None


def _normalize(text: str) -> str:
    return " ".join(text.split()).strip()


def propose(cluster: Cluster, window: Sequence[Episode], live: AgentVersion, *, redactor: TextRedactor | None = None,
            embedder: Embedder | None = None, similarity: float = SIMILARITY) -> list[Candidate]:
    """The template candidates for ``cluster`` (see the module docstring), cheapest first.

    ``redactor`` (a :class:`molt.governance.redaction.Redactor`) abstracts the users' corrections before
    they are compared and become a memory (the fact, not the customer); without one they are compared
    as written. What could not be built, and why, goes to ``cluster.notes``.
    """
    out: list[Candidate] = []
    parts = live.parts
    ids = [e.trajectory_id for e in cluster.failures]
    memory = agreed_correction(cluster, redactor=redactor, embedder=embedder, similarity=similarity)
    if memory is not None:
        text, src, n = memory
        out.append(Candidate(kind="memory_insert", cluster=cluster.key, cost=COSTS["memory_insert"],
                             description=f"remember the correction {n} user(s) agree on in this cluster: {text[:120]}",
                             payload={"text": text, "support": n, "form": "prose", "fact": text},
                             source_trajectories=src))
        qa = qa_form(text, [e.question for e in cluster.failures if e.trajectory_id in set(src)], redactor)
        if qa is not None:
            out.append(Candidate(kind="memory_insert", cluster=cluster.key, cost=COSTS["memory_insert"] + QA_EXTRA,
                                 description=f"remember the same correction as a question and its answer: "
                                             f"{qa[:160]}",
                                 payload={"text": qa, "support": n, "form": "qa", "fact": text},
                                 source_trajectories=src))
    if cluster.kind == "tool_error" and cluster.tool:
        tool_errs = [t for e in cluster.failures for t in e.tool_errors if t.name == cluster.tool]
        messages = Counter(t.error_message or "" for t in tool_errs)
        message = messages.most_common(1)[0][0]
        schema = _offered_schema(cluster.failures, cluster.tool)
        params = ((schema or {}).get("parameters") or {}).get("properties") or {}
        named = [p for p in params if re.search(rf"\b{re.escape(p)}\b", message)]
        if schema is not None and named and (_ARG_ERRORS.search(cluster.error_type or "") or named):
            new_params = _with_notes(schema.get("parameters") or {}, named, message)
            rw = ToolRewrite(parameters=new_params)
            out.append(Candidate(kind="tool_schema_edit", cluster=cluster.key, cost=COSTS["tool_schema_edit"],
                                 description=f"document in {cluster.tool}'s schema what its error says about "
                                             f"{', '.join(named)}: {message[:120]}",
                                 parts=parts.with_tools({cluster.tool: rw}),
                                 payload={"tool": cluster.tool, "parameters": named, "note": message},
                                 source_trajectories=ids))
        for new_name in rename_targets(cluster):
            rw = ToolRewrite(dispatch=new_name)
            out.append(Candidate(kind="tool_schema_edit", cluster=cluster.key, cost=COSTS["tool_schema_edit"],
                                 description=f"dispatch the agent's {cluster.tool} calls as {new_name} (its error "
                                             f"names {new_name}; the agent still offers {cluster.tool}): "
                                             f"{message[:120]}",
                                 parts=parts.with_tools({cluster.tool: rw}),
                                 payload={"tool": cluster.tool, "rename": new_name, "note": message},
                                 source_trajectories=ids))
    skill = _procedure(cluster, window)
    if skill is not None:
        name, trigger, instructions, src = skill
        out.append(Candidate(kind="skill_patch", cluster=cluster.key, cost=COSTS["skill_patch"],
                             description=f"skill '{name}': {instructions[:120]}",
                             payload={"name": name, "trigger": trigger, "instructions": instructions},
                             source_trajectories=src))
    if cluster.kind == "format":
        reqs = Counter(r for e in cluster.failures if e.verdict for r in [requirement_of(e.verdict)] if r)
        if reqs:
            req = reqs.most_common(1)[0][0]
            rule = f"Requirement on every answer (its consumer rejects answers that break it): answers must {req}."
            out.append(Candidate(kind="harness_edit", cluster=cluster.key, cost=COSTS["harness_edit"],
                                 description=f"system-prompt rule stating the consumer's requirement: {req}",
                                 parts=parts.with_system_prompt(rule), payload={"system_prompt": rule},
                                 source_trajectories=ids))
    if cluster.kind == "answer":
        rule = "Before answering, re-check every figure and computation step by step."
        if rule not in (parts.harness.system_prompt or ""):
            out.append(Candidate(kind="harness_edit", cluster=cluster.key, cost=COSTS["harness_edit"],
                                 description="generic self-check rule in the system prompt",
                                 parts=parts.with_system_prompt(rule),
                                 # a sentence Molt writes, nothing learned in it (molt.control.gate)
                                 payload={"system_prompt": rule, "fixed_text": True},
                                 source_trajectories=ids))
    if cluster.kind in ("answer", "format"):
        # A requirement the model still breaks with the rule in its prompt is a capability its weights
        # lack; the selector asks for weights only after the context changes were replayed and failed.
        out.append(Candidate(kind="weight_update", cluster=cluster.key, cost=COSTS["weight_update"],
                             description=f"train the weights on the cluster's requests "
                                         f"({cluster.task or cluster.intent}); "
                                         f"{cluster.size} failures over {len(cluster.tenants)} tenant(s)",
                             payload={"task": cluster.task, "tenants": sorted(cluster.tenants)},
                             source_trajectories=ids))
    return sorted(out, key=lambda c: c.cost)


#: Errors of the environment, not of the agent's call: a timeout, a connection that failed, an upstream
#: 5xx or a rate limit (HTTP's own split: 4xx is the caller's fault, 5xx and 429 the server's). The
#: error's type and message are what a tool or transport reports; these are their standard spellings.
_ENVIRONMENT = re.compile(
    r"time(?:d)?[ _-]?out|timeout|deadline exceeded|connection (?:refused|reset|error|aborted)|"
    r"connecterror|remotedisconnected|service unavailable|bad gateway|gateway time|internal server error|"
    r"too many requests|rate[ _-]?limit|\b(?:5\d\d|429)\b|temporar(?:y|ily) unavailable|try again later", re.I)


def environment_fault(cluster: Cluster) -> str | None:
    """Why ``cluster`` is an environment fault — the tool failed for reasons outside the agent (a
    timeout, a 5xx, a refused connection, a rate limit) on calls the tool did not reject as malformed —
    or ``None``. No context change or weight update fixes it: the operator is told, the agent is left
    as it is. Most of the cluster's failing calls must say so (one timeout beside argument errors is not
    the cluster's cause)."""
    if cluster.kind != "tool_error" or not cluster.tool:
        return None
    errs = [t for e in cluster.failures for t in e.tool_errors if t.name == cluster.tool]
    env = [t for t in errs if _ENVIRONMENT.search(f"{t.error_type or ''} {t.error_message or ''}")]
    if not errs or len(env) * 2 <= len(errs):
        return None
    top = Counter(f"{t.error_type or 'error'}: {(t.error_message or '')[:120]}" for t in env).most_common(1)[0][0]
    return (f"environment fault: {len(env)} of {len(errs)} failing {cluster.tool} calls failed outside the agent "
            f"({top}); no intervention on the agent fixes it — the tool's operator must")


_IDENT = re.compile(r"(?<![\w.])([A-Za-z][A-Za-z0-9]*(?:[_.\-][A-Za-z0-9]+)+|[a-z]+(?:[A-Z][a-z0-9]+)+)(?![\w])")


def rename_targets(cluster: Cluster, limit: int = 3) -> list[str]:
    """Tool names a cluster's tool error points to instead of the one the agent called: identifiers in
    the error message (``snake_case``, ``dotted.name``, ``camelCase``) that are neither the tool nor any
    tool the agent offers nor one of the tool's parameters — what an upstream that renamed a tool says
    ("unknown tool 'get_order'; available: fetch_order, ..."). Each becomes a ``dispatch`` rewrite that
    replay tries; replay, not this list, decides which (if any) works."""
    if cluster.kind != "tool_error" or not cluster.tool:
        return []
    offered = {str((t.get("function") or {}).get("name")) for e in cluster.failures for t in e.offered_tools
               if isinstance(t, dict)}
    schema = _offered_schema(cluster.failures, cluster.tool) or {}
    params = set((schema.get("parameters") or {}).get("properties") or {})
    counts: Counter[str] = Counter()
    for e in cluster.failures:
        for t in e.tool_errors:
            if t.name != cluster.tool:
                continue
            for name in dict.fromkeys(_IDENT.findall(t.error_message or "")):
                # "e.g", "i.e": segments of one letter are an abbreviation, not a tool's name.
                if name != cluster.tool and name not in offered and name not in params and not re.search(r"\d", name) \
                        and any(len(w) > 1 for w in re.split(r"[_.\-]", name)):
                    counts[name] += 1
    words = set(re.split(r"[_.\-]|(?<=[a-z])(?=[A-Z])", cluster.tool.lower()))
    # Names sharing a word with the called tool first (get_order for lookup_order), then the most named.
    ranked = sorted(counts, key=lambda n: (-len(words & set(re.split(r"[_.\-]|(?<=[a-z])(?=[A-Z])", n.lower()))),
                                           -counts[n], n))
    return ranked[:limit]


def abstract_correction(text: str, redactor: TextRedactor | None = None) -> str:
    """A user's correction as a memory may keep it: the fact, not the customer.

    The redactor marks the personal data, and so do the placeholders and pseudonyms governance put in
    at capture (a stored correction reads "Hello, this is <PERSON_1>. The fine is …"). A correction
    that carried some is cut into clauses (at ``, ; : . ! ?``): when clauses state checkable facts (a
    token with a digit: an amount, a date, a code), those clauses are the correction ("Hi, I am Maria
    Lopez." and "reach me at maria@…" go); otherwise all clauses are. The personal data left in the
    kept clauses is dropped."""
    text = _normalize(text)
    if redactor is None or not text:
        return text
    red, spans = redactor.redact(text)
    if not spans and not _PLACEHOLDER.search(text):
        return text  # nothing personal: neither found now nor replaced when it was captured
    pieces = re.split(r"(?<=[,;:.!?])\s+", red)
    facts = [p for p in pieces if re.search(r"\d", _PLACEHOLDER.sub("", p))]
    # With checkable facts, they are the correction; without, every clause is, less the personal data
    # (which clause holds a fact in words is not something a rule can tell).
    kept = facts or pieces
    out = _tidy(" ".join(kept)) if kept else ""
    if not re.search(r"[A-Za-z]{3,}", out):
        out = _tidy(red)
    if redactor.redact(out)[1]:  # a name the first pass did not see in its old context
        out = _tidy(redactor.redact(out)[0])
    return out[:1].upper() + out[1:]


# a placeholder (<PERSON_1>) or a keyed pseudonym (<PERSON_5e1f0a9c2b>), with its possessive clitic ("'s"
# belongs to the name it follows, so it goes with it) and the quotes or brackets around it
_PLACEHOLDER = re.compile(r"[(\[{\"']*<[A-Z_]+_(?:\d+|[0-9a-f]{6,64})>(?:['’]s\b)?[)\]}\"']*")


def _tidy(text: str) -> str:
    text = _PLACEHOLDER.sub(" ", text)
    text = re.sub(r"\s+([,.;:!?])", r"\1", text)
    text = re.sub(r"([,;:])(?:\s*[,;:])+", r"\1", text)
    return _normalize(text).strip(" ,;:")


def agreed_correction(cluster: Cluster, *, redactor: TextRedactor | None = None, embedder: Embedder | None = None,
                      similarity: float = SIMILARITY) -> tuple[str, list[str], int] | None:
    """The correction most of the cluster's correcting users agree on, abstracted
    (:func:`abstract_correction`): ``(text, source trajectories, support)``; ``None`` — with the reason
    in ``cluster.notes`` — when there is none or they contradict each other.

    Two corrections agree when they state the same checkable facts (their tokens holding a digit:
    amounts, dates, codes — less what they repeat of their own request, such as its order number) and
    their embeddings' similarity is at least ``similarity``, the clustering's bar. A memory needs the
    agreement of more than half of the failures that carry a correction: which one came first must not
    decide what the agent is told. Without a majority the corrections either contradict each other or
    are each specific to its own request (the product of that order's total): nothing common to
    remember either way, and the text cannot tell which — so no memory, and the note says so; what a
    weight update may do is the selector's rule (replayed context candidates must have failed).
    Corrections without
    digits that contradict in words only ("open on Sundays" / "closed on Sundays") embed alike and are
    not told apart here (the reflector, or replay against each user's correction, is what catches them).
    """
    per: list[tuple[str, str]] = []
    params: dict[str, frozenset[str]] = {}
    for e in cluster.failures:
        texts = [abstract_correction(c, redactor) for c in e.corrections]
        texts = [t for t in texts if t]
        if texts:
            per.append((e.trajectory_id, texts[-1]))   # the user's latest word on this answer
            asked = {f.lower() for f in checkable_facts(e.question)}
            # What the correction repeats of its own request (an order number) is the request's, not the fact's.
            params[e.trajectory_id] = frozenset(f.lower() for f in checkable_facts(texts[-1])) & asked
    if not per:
        return None
    uniq = list(dict.fromkeys(t for _, t in per))
    vecs = embed_texts(resolve_embedder(embedder), uniq) if len(uniq) > 1 else np.ones((1, 1), np.float32)
    row = {t: i for i, t in enumerate(uniq)}
    facts = {tid: frozenset(f.lower() for f in checkable_facts(t)) - params[tid] for tid, t in per}
    groups: list[list[tuple[str, str]]] = []
    for tid, text in per:
        for g in groups:
            head_tid, head = g[0]
            if facts[head_tid] == facts[tid] and float(vecs[row[head]] @ vecs[row[text]]) >= similarity:
                g.append((tid, text))
                break
        else:
            groups.append([(tid, text)])
    best = max(groups, key=len)
    if len(best) * 2 <= len(per):
        changed = _changed_fact(per, groups)
        if changed is not None:
            said = Counter(t for _, t in changed)
            text = min(said, key=lambda t: (-said[t], len(t), t))
            cluster.notes.append(f"the users' corrections changed over time: the latest {len(changed)} agree, after "
                                 f"{len(per) - len(changed)} earlier one(s) that stated other facts — a change, not "
                                 f"noise")
            return text, [tid for tid, _ in changed], len(changed)
        cluster.notes.append(f"the users' corrections disagree: {len(per)} correction(s) in {len(groups)} group(s) "
                             f"stating different facts, the largest backed by {len(best)} — no majority, so no "
                             f"memory (they contradict each other, or each is specific to its own request)")
        return None
    said = Counter(t for _, t in best)
    text = min(said, key=lambda t: (-said[t], len(t), t))
    return text, [tid for tid, _ in best], len(best)


def _changed_fact(per: list[tuple[str, str]], groups: list[list[tuple[str, str]]]) -> list[tuple[str, str]] | None:
    """The group of corrections that superseded the others: ``per`` is in time order (the window's, oldest
    first); when the latest three or more corrections all agree, and every correction of their group comes
    after every other correction, the facts changed (a new policy) — the later word is the fact. Otherwise
    ``None`` (contradiction without an order is noise)."""
    where = {tid: i for i, g in enumerate(groups) for tid, _ in g}
    last = where[per[-1][0]]
    members = [i for i, (tid, _) in enumerate(per) if where[tid] == last]
    first = members[0]
    if len(members) < 3 or members != list(range(first, len(per))) or first == 0:
        return None
    return [per[i] for i in members]


def rollback_candidate(live: AgentVersion, previous: AgentVersion, window: Sequence[Episode]) -> Candidate:
    """Roll back to ``previous``: evaluated by replaying the live version's failures under it."""
    ids = [e.trajectory_id for e in window if e.policy_version == live.version_id and e.success is False]
    return Candidate(kind="rollback", cluster=f"version:{live.version_id}", cost=COSTS["rollback"],
                     description=f"restore {previous.version_id} (live before {live.version_id})",
                     parts=previous.parts, payload={"to": previous.version_id, "from": live.version_id},
                     source_trajectories=ids)


def _offered_schema(eps: Sequence[Episode], tool: str) -> dict[str, Any] | None:
    for e in eps:
        for t in e.offered_tools:
            fn = t.get("function") if isinstance(t, dict) else None
            if isinstance(fn, dict) and fn.get("name") == tool:
                return fn
    return None


def _with_notes(parameters: dict[str, Any], names: list[str], note: str) -> dict[str, Any]:
    params = {**parameters, "properties": dict(parameters.get("properties") or {})}
    for n in names:
        prop = dict(params["properties"].get(n) or {})
        desc = prop.get("description") or ""
        prop["description"] = f"{desc} Note: {note}".strip()
        params["properties"][n] = prop
    return params


def _procedure(cluster: Cluster, window: Sequence[Episode]) -> tuple[str, str, str, list[str]] | None:
    """A skill from the tool sequence that successes of the cluster's intent share and its failures
    lack (≥ 2 steps), whatever said the failures failed — a tool error, a late negative reward, a
    correction: a skipped verification step raises no error, only a worse outcome."""
    wins = [e for e in (cluster.requests or window) if e.success and len(e.tools) >= 2
            and e.tenant_id in cluster.tenants and (cluster.task is None or e.task == cluster.task)]
    if len(wins) < 1:
        return None
    seqs = Counter(tuple(t.name for t in e.tools if t.ok) for e in wins)
    seq, _ = seqs.most_common(1)[0]
    if len(seq) < 2:
        return None
    # The failures lack the procedure when most of them do not follow it (its steps in this order).
    follows = sum(_subsequence(seq, tuple(t.name for t in e.tools if t.ok)) for e in cluster.failures)
    if follows * 2 >= cluster.size:
        return None  # the failures already follow this procedure: it is not what they lack
    keys: dict[str, None] = {}
    for e in wins:
        for t in e.tools:
            if isinstance(t.arguments, dict):
                keys.update(dict.fromkeys(t.arguments))
    task = cluster.task or cluster.intent.replace(",", " ") or "these"
    steps = ", then ".join(f"call {name}" for name in seq)
    instructions = (f"For {task} requests: {steps}. Pass values returned by earlier calls "
                    f"({', '.join(keys) or 'ids, amounts'}) as the arguments of later calls.")
    questions = Counter(w for e in cluster.failures for w in re.findall(r"[a-z]{5,}", e.question.lower()))
    trigger = f"{task} requests; mentions " + ", ".join(w for w, _ in questions.most_common(3))
    src = [e.trajectory_id for e in wins]
    return f"{task} procedure", trigger, instructions, src


def _subsequence(seq: tuple[str, ...], of: tuple[str, ...]) -> bool:
    it = iter(of)
    return all(step in it for step in seq)
