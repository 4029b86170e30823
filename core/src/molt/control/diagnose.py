"""Diagnosis: cluster a window's failures without labels, test each cluster against the agent's base
failure rate, and propose typed interventions for the clusters that pass.

**What a failure is** is what production says (:mod:`molt.control.signals`): a low or negative reward
(verifier, judge, user feedback), a user correction, a thumbs-down, a tool error the agent did not
recover from.

**Clusters** (:func:`cluster_failures`) come from what every captured trajectory has, no
``metadata.task`` needed:

- the failure's *signature*: its first tool error (tool, error type) when it has one, else the kind of
  the verdict when there is one (``format`` when it names the answer's format, else ``answer``);
  failures of different signatures never share a cluster;
- the user's *intent*: the packaged all-MiniLM-L6-v2 embedding (:mod:`molt.control.embed`) of the
  first user message, with ids and numbers masked (an order number is not an intent);
- ``metadata.task``, when there is one: failures of different tasks never share a cluster, and a
  labelled cluster's requests are of its task; not a requirement. (The correction text decides what
  a memory says — :func:`agreed_correction` — not which cluster a failure is in.)

The *regions* a cluster can cover come from the window's requests alone, never their outcomes
(:func:`_intent_tree`): an average-linkage tree of the distinct request texts (ids masked) down to
``similarity`` (0.5 of the cosine range: unrelated requests sit below it). No one similarity
separates intents in every window — paraphrases of one request merge at 0.8-0.97 and a templated
request of another intent close by ("Where is order #?" and "Please refund order #." at 0.73) —
so the tree's first merges up to its largest ratio between consecutive merge distances make the
*base groups* (rephrasings of one request), and every base group and every node above it is a
candidate region. Each region that holds two or more failures of one signature (and one task,
when labelled) is a candidate cluster; all of them are tested and counted, and per signature the
most significant regions whose failures do not overlap are kept.

**The evidence bar** (:class:`Evidence`) is a one-sided exact test of the cluster's failure rate
against the agent's base failure rate. A cluster's *requests* are its region's (successes included,
and of the same task when both are labelled); ``k`` of those ``n`` are the cluster's failures. The
base rate is the rest of the window's
(``f`` failures in ``m`` requests; a request nothing said failed counts as served). Under the null
hypothesis — failures do not depend on the request — the ``k + f`` failures fall on the ``n + m``
requests at random, and the p-value is the hypergeometric tail P(X ≥ k) (Fisher's exact test, one
sided). It is exact for any window size, where a binomial test against the estimated rate is not: with
a low base rate measured on a small rest, that estimate is often too low (measured while building
this: a binomial test against the add-one-smoothed rest rate raised a cluster in 3.3 % of windows
without a pattern at a 5 % base rate and alpha 1 %). The
requests of clusters already found significant are left out of the rest (iterated until the set is
stable): a second pattern is not the agent's base rate; this only follows a first alarm, so it does
not raise the chance of one. A cluster of two or more failures is significant when its p-value is at
most ``alpha`` divided by the number of candidate clusters tested in the window (Bonferroni): the chance that a
window without patterns raises any cluster is at most ``alpha`` (default 1 %; measured in the tests).

A comparison with the rest of the window cannot see a pattern that *is* the agent's traffic: an agent
with one kind of request (the rest is empty), or one whose every intent fails in its own way (the rest
fails as often), gives the Fisher test nothing to compare against. So each cluster is also tested
against a stated failure rate the operator tolerates, ``tolerable`` (default 0.5: an intent whose
requests fail more often than not): under the null hypothesis that the intent's failure rate is at
most ``tolerable``, P(X ≥ k) for X ~ Binomial(n, tolerable) bounds the chance of an alarm (exact, no
estimated rate). Rewards are noisy, so each cluster is tested a third time on the failures a signal
other than the outcome reward confirms (a correction, an unrecovered tool error, a thumbs-down), which
a flipped reward can neither make nor unmake (:mod:`molt.control.evidence`). The three tests split the
level (Bonferroni again, ``alpha / 3`` per test and cluster), so the family-wise false-alarm rate stays
at most ``alpha`` for windows whose failures neither depend on the request nor exceed the tolerated rate.

Each cluster that passes gets the candidates that could fix it, built from the trajectories:

========================  =====================================================================
``memory_insert``         the correction a majority of the cluster's correcting users agree on,
                          abstracted through the redactor (:func:`agreed_correction`); none
                          when they disagree (the cluster's ``notes`` say so)
``tool_schema_edit``      a tool whose calls fail with an argument error: the error message is
                          added to the description of each parameter it names; an error that
                          names another tool than the one called (an upstream rename): the
                          agent's calls dispatched under that name (:func:`rename_targets`)
``skill_patch``           a multi-step procedure that the intent's successes share and its
                          failures lack, whatever signalled the failures (a tool error, a late
                          negative reward, a correction): procedural instructions with a trigger
``harness_edit``          format failures: the verdict's format requirement becomes a system-
                          prompt rule; answer failures: a generic "check your work" rule
``weight_update``         answer failures (no tool error): only when context changes were
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
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from molt.atdp.ids import new_id
from molt.control.embed import Embedder
from molt.control.evidence import Agreement, agreement
from molt.control.signals import Episode, arg_pattern
from molt.control.versions import PolicyParts, PolicyVersion
from molt.harness import ToolRewrite
from molt.replay.generic import checkable_facts

__all__ = ["ALPHA", "COSTS", "SCREEN", "SIMILARITY", "TOLERABLE", "Candidate", "Cluster", "Evidence", "Kind",
           "abstract_correction", "agreed_correction", "binomial_greater", "cluster_failures", "environment_fault",
           "fisher_greater", "intent_text", "propose", "rename_targets", "rollback_candidate", "same_pattern"]

log = logging.getLogger("molt.control")

Kind = Literal["memory_insert", "skill_patch", "harness_edit", "tool_schema_edit", "weight_update", "rollback",
               "noop"]

#: Relative cost of each intervention (compute, latency, token budget, blast radius): the selector
#: prefers the cheapest sufficient one.
COSTS: dict[str, float] = {"rollback": 0.5, "memory_insert": 1.0, "tool_schema_edit": 2.0, "harness_edit": 2.5,
                           "skill_patch": 3.0, "weight_update": 50.0, "noop": 0.0}

#: The family-wise false-alarm rate of a window's cluster tests (see the module docstring).
ALPHA = 0.01
#: The smallest p-value under which a cluster the bar does not pass is still *screened*: its context
#: candidates are replayed and may go live only when the replay confirms them at ``alpha``
#: (:mod:`molt.control.evidence`). A compute knob, not a false-alarm rate: about this share of the
#: clusters without a pattern get their candidates replayed.
SCREEN = 0.1
#: The failure rate of an intent the operator tolerates before acting on it (the module docstring).
TOLERABLE = 0.5
#: The request similarity under which the request tree merges nothing (see the module docstring).
SIMILARITY = 0.5
#: The tests each cluster gets, which split the level (Fisher vs the rest, binomial vs ``tolerable``,
#: Fisher on the confirmed failures).
TESTS = 3

_FORMAT = re.compile(r"\b(format|json|schema|markdown|yaml|csv)\b", re.I)
_ARG_ERRORS = re.compile(r"(validation|value|type|schema|argument|invalid)", re.I)
# Ids, amounts and dates carry no intent: "Where is order A-1003?" and "... A-2710?" ask the same thing.
_IDS = re.compile(r"[A-Za-z]*[-_#]?\d[\w\-./:]*")


@dataclass(frozen=True)
class Evidence:
    """The one-sided binomial test of a cluster (see the module docstring)."""

    failures: int            # k: the cluster's failures
    requests: int            # n: the window's requests of the cluster's intent (failures included)
    base_failures: int       # f: failures in the rest of the window
    base_requests: int       # m: requests in the rest of the window
    p_value: float           # one-sided Fisher exact test of k/n against f/m
    level: float             # alpha / (3 × clusters tested): what any of the p-values must not exceed
    significant: bool
    tolerable: float = TOLERABLE  # the failure rate the binomial test's null hypothesis allows
    p_tolerable: float = 1.0      # one-sided binomial test of k of n against ``tolerable``
    agreement: Agreement | None = None  # the test of the confirmed failures (molt.control.evidence)
    screened: bool = False        # not significant, but its smallest p-value is at most the screen

    @property
    def p_min(self) -> float:
        """The smallest of the cluster's three p-values."""
        return min(self.p_value, self.p_tolerable, self.agreement.p_value if self.agreement is not None else 1.0)

    @property
    def base_rate(self) -> float:
        """The agent's base failure rate (the rest of the window's)."""
        return self.base_failures / self.base_requests if self.base_requests else 0.0

    def summary(self) -> dict[str, Any]:
        return {"test": "one-sided Fisher exact vs the rest of the window, one-sided binomial vs the tolerated "
                        "failure rate (Bonferroni)", "k": self.failures,
                "n": self.requests, "f": self.base_failures, "m": self.base_requests, "p_value": self.p_value,
                "tolerable": self.tolerable, "p_tolerable": self.p_tolerable,
                "level": self.level, "significant": self.significant, "screened": self.screened,
                "confirmed": self.agreement.summary() if self.agreement is not None else None}


@dataclass
class Cluster:
    """Failures of one signature and one intent, with the window's requests of that intent."""

    key: str
    task: str | None            # the members' most common ``metadata.task`` (None without labels)
    signature: str              # "tool:<name>:<error type>" | "format" | "answer"
    kind: Literal["tool_error", "format", "answer"]
    failures: list[Episode] = field(default_factory=list)
    tool: str | None = None
    error_type: str | None = None
    intent: str = ""            # the words most of its requests share (a readable label)
    requests: list[Episode] = field(default_factory=list)   # the window's requests of this intent
    evidence: Evidence | None = None
    centroid: np.ndarray | None = field(default=None, repr=False)
    #: What :func:`propose` found it could not build, and why (contradicting corrections, ...): the
    #: decision log says it when the cluster ends in a no-op.
    notes: list[str] = field(default_factory=list)

    @property
    def size(self) -> int:
        return len(self.failures)

    @property
    def tenants(self) -> set[str]:
        return {e.tenant_id or "-" for e in self.failures}

    @property
    def significant(self) -> bool:
        return self.evidence is not None and self.evidence.significant

    @property
    def screened(self) -> bool:
        """Below the bar but within the screen: its candidates need the replay's confirmation."""
        return self.evidence is not None and self.evidence.screened

    def summary(self) -> dict[str, Any]:
        """JSON-able description (what the decision log keeps)."""
        errs = Counter(t.error_message for e in self.failures for t in e.tool_errors if t.name == self.tool)
        pats = Counter(arg_pattern(t.arguments) for e in self.failures for t in e.tool_errors if t.name == self.tool)
        return {"key": self.key, "task": self.task, "signature": self.signature, "kind": self.kind,
                "intent": self.intent, "size": self.size, "tenants": sorted(self.tenants),
                "corrections": sum(1 for e in self.failures if e.corrections),
                "top_error": errs.most_common(1)[0][0] if errs else None,
                "argument_pattern": pats.most_common(1)[0][0] if pats else None,
                "verdict": Counter(e.verdict for e in self.failures).most_common(1)[0][0],
                "failure_signals": dict(Counter(sig for e in self.failures for sig in e.failure_signals)),
                "notes": list(self.notes),
                "evidence": self.evidence.summary() if self.evidence is not None else None}


class Candidate(BaseModel):
    """A typed intervention proposed for a cluster; ``parts`` is the version it would make live."""

    model_config = ConfigDict(extra="forbid")

    candidate_id: str = Field(default_factory=lambda: "cand-" + new_id()[-12:])
    kind: Kind
    cluster: str
    description: str
    cost: float
    parts: PolicyParts | None = None
    payload: dict[str, Any] = Field(default_factory=dict)
    source_trajectories: list[str] = Field(default_factory=list)


def _signature(e: Episode) -> tuple[str, str, str | None, str | None]:
    errs = e.tool_errors
    if errs:
        t = errs[0]
        return f"tool:{t.name}:{t.error_type or 'error'}", "tool_error", t.name, t.error_type
    if e.verdict and _FORMAT.search(e.verdict):
        return "format", "format", None, None
    return "answer", "answer", None, None


def intent_text(question: str) -> str:
    """The request as its intent is embedded: ids and numbers masked, whitespace collapsed."""
    return " ".join(_IDS.sub("#", question).split())[:512]


def fisher_greater(k: int, n: int, f: int, m: int) -> float:
    """One-sided Fisher exact test: P(X ≥ k) when ``k + f`` failures fall at random on ``n + m``
    requests and X of them land on the ``n`` (hypergeometric tail)."""
    if k <= 0:
        return 1.0
    total, fails = n + m, k + f
    hi = min(n, fails)
    if k > hi:
        return 0.0
    base = _lcomb(total, n)
    return _sum_exp([_lcomb(fails, i) + _lcomb(total - fails, n - i) - base for i in range(k, hi + 1)])


def binomial_greater(k: int, n: int, p: float) -> float:
    """One-sided exact binomial test: P(X ≥ k) for X ~ Binomial(n, p)."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    if p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    lp, lq = math.log(p), math.log1p(-p)
    return _sum_exp([_lcomb(n, i) + i * lp + (n - i) * lq for i in range(k, n + 1)])


def _lcomb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def _sum_exp(terms: list[float]) -> float:
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))


def cluster_failures(eps: Sequence[Episode], *, embedder: Embedder | None = None, alpha: float = ALPHA,
                     similarity: float = SIMILARITY, tolerable: float = TOLERABLE,
                     screen: float = SCREEN) -> list[Cluster]:
    """The window's failure clusters with their :class:`Evidence`, significant first, then largest.

    ``embedder`` embeds requests and corrections (default: the packaged MiniLM; without it, a bag of
    words, logged). See the module docstring for the features, the linkage and the test.
    """
    fails = [e for e in eps if e.success is False]
    if not fails:
        return []
    emb = _embedder(embedder)
    questions = [intent_text(e.question) for e in eps]
    vecs = _embed(emb, questions)
    nodes, leaf, groups = _intent_tree(questions, vecs, similarity)
    base = set(nodes[:groups])
    index = {id(e): i for i, e in enumerate(eps)}
    parts: dict[tuple[tuple[str, str, str | None, str | None], str | None], list[Episode]] = {}
    for e in fails:
        parts.setdefault((_signature(e), e.task), []).append(e)
    # Every region of the request tree that holds two or more of a part's failures is a candidate
    # cluster; all of them are tested (and counted by the Bonferroni split), the most significant kept.
    candidates: list[Cluster] = []
    singles: list[Cluster] = []
    for ((sig, kind, tool, et), task), members in parts.items():
        for node in nodes:
            mem = [e for e in members if leaf[index[id(e)]] in node]
            if not mem or (len(mem) == 1 and node not in base):
                continue
            rows = [index[id(e)] for e in mem]
            centroid = vecs[rows].mean(axis=0)
            centroid = centroid / (np.linalg.norm(centroid) or 1.0)
            intent = _intent_label(mem)
            # The cluster's requests: the region's requests (of its task, when labelled).
            requests = [x for i, x in enumerate(eps) if leaf[i] in node and _same_task(x, task)]
            c = Cluster(key=f"{task or '-'}|{sig}|{intent or '-'}", task=task, signature=sig, kind=kind,  # type: ignore[arg-type]
                        failures=mem, tool=tool, error_type=et, intent=intent, centroid=centroid, requests=requests)
            (candidates if len(mem) >= 2 else singles).append(c)
    _unique_keys(candidates + singles)
    _test(candidates + singles, eps, alpha, tolerable, screen)
    # Keep, per part, the most significant regions whose failures do not overlap; then the failures no
    # kept region holds, each alone (what the decision log shows as below the bar).
    kept: list[Cluster] = []
    taken: set[str] = set()
    ranked = sorted(candidates, key=lambda c: (not c.significant, _p(c), -c.size, len(c.requests), c.key))
    for c in ranked:
        ids = {e.trajectory_id for e in c.failures}
        if ids & taken:
            continue
        kept.append(c)
        taken |= ids
    kept += [c for c in singles if c.failures[0].trajectory_id not in taken]
    clusters = kept
    return sorted(clusters, key=lambda c: (not c.significant, -c.size, c.key))


def same_pattern(a: Cluster, b: Cluster, similarity: float = SIMILARITY) -> bool:
    """Whether two clusters (e.g. of two tenants) are the same failure: one signature, one intent."""
    if a.signature != b.signature or (a.task and b.task and a.task != b.task):
        return False
    if a.centroid is None or b.centroid is None:
        return a.task is not None and a.task == b.task
    return float(a.centroid @ b.centroid) >= similarity


def _embedder(embedder: Embedder | None) -> Embedder:
    if embedder is not None:
        return embedder
    from molt.control.embed import default_embedder
    from molt.errors import MoltError

    try:
        return default_embedder()
    except MoltError as exc:
        log.warning("Clustering failures by words, not meaning: %s", exc)
        return _WordEmbedder()


class _WordEmbedder:
    """A hashed bag of words: the fallback when the packaged embedding model is not installed."""

    dim = 256

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            for w in re.findall(r"[a-z]{3,}", t.lower()):
                out[i, hash(w) % self.dim] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1.0, norms)


def _embed(emb: Embedder, texts: list[str]) -> np.ndarray:
    uniq = list(dict.fromkeys(texts))
    got = emb.embed(uniq) if uniq else np.zeros((0, emb.dim), np.float32)
    row = {t: i for i, t in enumerate(uniq)}
    return np.asarray(got, np.float32)[[row[t] for t in texts]] if texts else got


#: Distances below this are one text told twice (MiniLM's rounding between near-identical strings).
_RESOLUTION = 0.02


def _intent_tree(questions: list[str], vecs: np.ndarray,
                 floor: float) -> tuple[list[frozenset[int]], list[int], int]:
    """The window's request regions (base groups first), from the requests alone — never their
    outcomes —, each request's index among the window's distinct request texts (ids masked), and how
    many base groups there are.

    Average-linkage clustering of the distinct texts, down to ``floor`` (unrelated requests sit under
    it). Its first merges join rephrasings of one request; the *base groups* are what they make up to
    the largest ratio between consecutive merge distances (1 - similarity, the floor's last: a gap in
    log-distance, so paraphrases 0.09 apart and a template 0.27 away are told apart as well as 0.2
    and 0.6 would be). The regions are the base groups and every node the later merges make: no one
    similarity separates intents in every window (paraphrases merge at 0.8-0.97 for MiniLM, and a
    templated request of another intent close by: "Where is order #?" and "Please refund order #." at
    0.73), so each coarser region is one more hypothesis the cluster test tries (and counts).
    """
    uniq = list(dict.fromkeys(questions))
    row = {t: i for i, t in enumerate(uniq)}
    u = vecs[[questions.index(t) for t in uniq]]
    merges = _average_linkage(u @ u.T, floor) if len(uniq) > 1 else []
    keep = 0
    if merges:
        dist = [max(1.0 - h, _RESOLUTION) for h, _, _ in merges] + [max(1.0 - floor, _RESOLUTION)]
        keep = 1 + int(np.argmax([dist[i + 1] / dist[i] for i in range(len(dist) - 1)]))
    nodes: dict[int, frozenset[int]] = {i: frozenset([i]) for i in range(len(uniq))}
    for _, i, j in merges[:keep]:
        nodes[i] = nodes[i] | nodes.pop(j)
    out = list(nodes.values())
    groups = len(out)
    for _, i, j in merges[keep:]:
        nodes[i] = nodes[i] | nodes.pop(j)
        out.append(nodes[i])
    return out, [row[t] for t in questions], groups


def _average_linkage(sim: np.ndarray, threshold: float) -> list[tuple[float, int, int]]:
    """Average-linkage agglomerative clustering (Lance-Williams update): the merges, in order, as
    ``(similarity, i, j)`` (cluster ``j`` into ``i``), while the closest pair's mean similarity is at
    least ``threshold``."""
    n = sim.shape[0]
    link = sim.astype(np.float64).copy()
    np.fill_diagonal(link, -np.inf)
    sizes = np.ones(n)
    alive = set(range(n))
    out: list[tuple[float, int, int]] = []
    while len(alive) > 1:
        flat = int(np.argmax(link))
        i, j = divmod(flat, n)
        if link[i, j] < threshold:
            break
        out.append((float(link[i, j]), i, j))
        row = (sizes[i] * link[i] + sizes[j] * link[j]) / (sizes[i] + sizes[j])
        link[i], link[:, i] = row, row
        link[i, i] = -np.inf
        link[j], link[:, j] = -np.inf, -np.inf
        sizes[i] += sizes[j]
        alive.discard(j)
    return out


_STOP = frozenset(("about", "after", "again", "could", "from", "have", "please", "that", "their", "there",
                   "these", "this", "what", "when", "where", "which", "while", "with", "would", "your"))


def _intent_label(eps: Sequence[Episode]) -> str:
    """Up to three words that most of the cluster's requests contain (sorted): a stable, readable key."""
    words = Counter(w for e in eps for w in set(re.findall(r"[a-z]{4,}", e.question.lower())) if w not in _STOP)
    common = [w for w, c in words.most_common() if c * 2 >= len(eps)][:3]
    return ",".join(sorted(common))


def _unique_keys(clusters: list[Cluster]) -> None:
    seen: Counter[str] = Counter()
    for c in sorted(clusters, key=lambda c: -c.size):
        seen[c.key] += 1
        if seen[c.key] > 1:
            c.key = f"{c.key}#{seen[c.key]}"


def _test(clusters: list[Cluster], eps: Sequence[Episode], alpha: float, tolerable: float,
          screen: float = SCREEN) -> None:
    """Fill each cluster's :class:`Evidence` (see the module docstring)."""
    if not 0.0 < tolerable < 1.0:
        raise ValueError(f"tolerable must be a failure rate in (0, 1), got {tolerable!r}.")
    region = {c.key: {e.trajectory_id for e in c.requests} | {e.trajectory_id for e in c.failures}
              for c in clusters}
    tested = [c for c in clusters if c.size >= 2]
    level = alpha / (TESTS * max(1, len(tested)))
    # The base rate leaves out the requests of the clusters already found significant: a second
    # pattern in the window is not the agent's base rate. This only ever follows a first alarm, so the
    # chance of any alarm in a window without patterns is still that of the first pass (<= alpha).
    found: set[str] = set()
    for _ in range(len(clusters) + 1):
        for c in clusters:
            out = set().union(*(region[k] for k in found if k != c.key)) | region[c.key]
            rest = [e for e in eps if e.trajectory_id not in out]
            # A request nothing said failed counts as served: production is silent about most successes.
            f = sum(1 for e in rest if e.success is False)
            n = len(region[c.key])
            p = fisher_greater(c.size, n, f, len(rest))
            pt = binomial_greater(c.size, n, tolerable)
            agreed = agreement(c.failures, n, rest)
            least = min(p, pt, agreed.p_value)
            c.evidence = Evidence(failures=c.size, requests=n, base_failures=f, base_requests=len(rest),
                                  p_value=p, level=level, significant=c.size >= 2 and least <= level,
                                  tolerable=tolerable, p_tolerable=pt, agreement=agreed,
                                  screened=c.size >= 2 and level < least <= screen)
        now = {c.key for c in clusters if c.significant}
        if now == found:
            break
        found = now


def _p(c: Cluster) -> float:
    ev = c.evidence
    if ev is None:
        return 1.0
    return min(ev.p_value, ev.p_tolerable, ev.agreement.p_value if ev.agreement is not None else 1.0)


def _same_task(e: Episode, task: str | None) -> bool:
    return task is None or e.task is None or e.task == task


def _normalize(text: str) -> str:
    return " ".join(text.split()).strip()


def propose(cluster: Cluster, window: Sequence[Episode], live: PolicyVersion, *, redactor: Any = None,
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
                             payload={"text": text, "support": n}, source_trajectories=src))
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
        verdict = Counter(e.verdict or "" for e in cluster.failures).most_common(1)[0][0]
        req = _requirement(verdict)
        out.append(Candidate(kind="harness_edit", cluster=cluster.key, cost=COSTS["harness_edit"],
                             description=f"system-prompt rule from the verifier's format requirement: {req}",
                             parts=parts.with_system_prompt(f"Output format: every answer must be {req}."),
                             payload={"system_prompt": f"Output format: every answer must be {req}."},
                             source_trajectories=ids))
    if cluster.kind == "answer":
        rule = "Before answering, re-check every figure and computation step by step."
        if rule not in (parts.harness.system_prompt or ""):
            out.append(Candidate(kind="harness_edit", cluster=cluster.key, cost=COSTS["harness_edit"],
                                 description="generic self-check rule in the system prompt",
                                 parts=parts.with_system_prompt(rule), payload={"system_prompt": rule},
                                 source_trajectories=ids))
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
                if name != cluster.tool and name not in offered and name not in params and not re.search(r"\d", name):
                    counts[name] += 1
    words = set(re.split(r"[_.\-]|(?<=[a-z])(?=[A-Z])", cluster.tool.lower()))
    # Names sharing a word with the called tool first (get_order for lookup_order), then the most named.
    ranked = sorted(counts, key=lambda n: (-len(words & set(re.split(r"[_.\-]|(?<=[a-z])(?=[A-Z])", n.lower()))),
                                           -counts[n], n))
    return ranked[:limit]


def abstract_correction(text: str, redactor: Any = None) -> str:
    """A user's correction as a memory may keep it: the fact, not the customer.

    The redactor marks the personal data. A correction that carried some is cut into clauses (at
    ``, ; : . ! ?``): when clauses state checkable facts (a token with a digit: an amount, a date, a
    code), those clauses are the correction ("Hi, I am Maria Lopez." and "reach me at maria@…" go);
    otherwise all clauses are. The personal data left in the kept clauses is dropped."""
    text = _normalize(text)
    if redactor is None or not text:
        return text
    red, spans = redactor.redact(text)
    if not spans:
        return text
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


_PLACEHOLDER = re.compile(r"[(\[{\"']*<[A-Z_]+_\d+>[)\]}\"']*")


def _tidy(text: str) -> str:
    text = _PLACEHOLDER.sub(" ", text)
    text = re.sub(r"\s+([,.;:!?])", r"\1", text)
    text = re.sub(r"([,;:])(?:\s*[,;:])+", r"\1", text)
    return _normalize(text).strip(" ,;:")


def agreed_correction(cluster: Cluster, *, redactor: Any = None, embedder: Embedder | None = None,
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
    vecs = _embed(_embedder(embedder), uniq) if len(uniq) > 1 else np.ones((1, 1), np.float32)
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
        cluster.notes.append(f"the users' corrections disagree: {len(per)} correction(s) in {len(groups)} group(s) "
                             f"stating different facts, the largest backed by {len(best)} — no majority, so no "
                             f"memory (they contradict each other, or each is specific to its own request)")
        return None
    texts = Counter(t for _, t in best)
    text = min(texts, key=lambda t: (-texts[t], len(t), t))
    return text, [tid for tid, _ in best], len(best)


def rollback_candidate(live: PolicyVersion, previous: PolicyVersion, window: Sequence[Episode]) -> Candidate:
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


def _requirement(verdict: str) -> str:
    text = re.sub(r"^.*?format:\s*", "", verdict, flags=re.I)
    text = re.sub(r"^(the )?(answer|output) (is|was) not\s+", "", text, flags=re.I)
    return text.strip().rstrip(".") or "in the required format"


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
