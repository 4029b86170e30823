"""Failure clusters without labels, and the evidence bar each must pass before the plane acts on it.

This module turns a window of episodes into tested clusters; :mod:`molt.control.diagnose` proposes the
candidates for the clusters that pass.

**What a failure is** is what production says (:mod:`molt.control.signals`): a low or negative reward
(verifier, judge, user feedback), a user correction, a thumbs-down, a tool error the agent did not
recover from.

**Clusters** (:func:`cluster_failures`) come from what every captured trajectory has, no
``metadata.task`` needed:

- the failure's *signature*: its first tool error (tool, error type) when it has one, else what the
  verdict requires of the answer when it states a requirement (``format:<requirement>``: a consumer's
  rejection reason, a judge's rubric, a validator's message — :func:`requirement_of`), else ``answer``;
  failures of different signatures never share a cluster;
- the user's *intent*: the packaged all-MiniLM-L6-v2 embedding (:mod:`molt.control.embed`) of the
  first user message, with ids and numbers masked (an order number is not an intent);
- ``metadata.task``, when there is one: failures of different tasks never share a cluster, and a
  labelled cluster's requests are of its task; not a requirement. (The correction text decides what
  a memory says — :func:`~molt.control.diagnose.agreed_correction` — not which cluster a failure is in.)

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
not raise the chance of one. The clusters of two or more failures are tested with Holm's step-down
procedure: sorted by p-value, the first is significant at ``alpha`` divided by the number of candidate
clusters tested in the window (Bonferroni's level), the next at ``alpha`` over one fewer, and so on while
each before it was found: the chance that a window without patterns raises any cluster is still at most
``alpha`` (default 1 %; measured in the tests), and a second and third real pattern in a mixed window no
longer pay for every cluster of the window.

A comparison with the rest of the window cannot see a pattern that *is* the agent's traffic: an agent
with one kind of request (the rest is empty), or one whose every intent fails in its own way (the rest
fails as often), gives the Fisher test nothing to compare against. So each cluster is also tested
against a stated failure rate the operator tolerates, ``tolerable`` (default 0.5: an intent whose
requests fail more often than not): under the null hypothesis that the intent's failure rate is at
most ``tolerable``, P(X ≥ k) for X ~ Binomial(n, tolerable) bounds the chance of an alarm (exact, no
estimated rate). Rewards are noisy, so each cluster is tested a third time on the failures a signal
other than the outcome reward confirms (a correction, an unrecovered tool error, a thumbs-down), which
a flipped reward can neither make nor unmake (:mod:`molt.control.significance`). The three tests split the
level (Bonferroni, the smallest p-value times three is what Holm's procedure reads), so the
family-wise false-alarm rate stays
at most ``alpha`` for windows whose failures neither depend on the request nor exceed the tolerated rate.

A cluster below that bar whose smallest p-value is at most ``screen`` (:data:`SCREEN`) is *screened*
(``Evidence.screened``): the observational test cannot reach ``alpha`` on the window it has (requests
whose text cannot tell a JSON consumer from a person; a small cluster among flipped rewards), so the
plane replays its context candidates and lets one go live only when the replay confirms it — an exact
paired test of the candidate against the live version on the cluster's region, at a weighted share of
``alpha`` (:mod:`molt.control.significance`, "Screen, then confirm by replay"). A screened cluster never
gets a weight update: replay cannot confirm one.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from molt.control.embed import Embedder
from molt.control.signals import Episode, arg_pattern
from molt.control.significance import Agreement, agreement, holm
from molt.stats import binomial_greater, fisher_greater

__all__ = ["ALPHA", "SCREEN", "SIMILARITY", "TESTS", "TOLERABLE", "Cluster", "Evidence",
           "cluster_failures", "embed_texts", "intent_text", "requirement_of", "resolve_embedder",
           "same_pattern"]

log = logging.getLogger("molt.control")

#: The family-wise false-alarm rate of a window's cluster tests (see the module docstring).
ALPHA = 0.01
#: The smallest p-value under which a cluster the bar does not pass is still *screened*: its context
#: candidates are replayed and may go live only when the replay confirms them at ``alpha``
#: (:mod:`molt.control.significance`). A compute knob, not a false-alarm rate: about this share of the
#: clusters without a pattern get their candidates replayed.
SCREEN = 0.1
#: The failure rate of an intent the operator tolerates before acting on it (the module docstring).
TOLERABLE = 0.5
#: The request similarity under which the request tree merges nothing (see the module docstring).
SIMILARITY = 0.5
#: The tests each cluster gets, which split the level (Fisher vs the rest, binomial vs ``tolerable``,
#: Fisher on the confirmed failures).
TESTS = 3

# How a consumer states a requirement on the answer, whatever it is about: a deontic modal ("answers
# must cite the section id", "the reply should be in German", "amounts need to be in EUR"), or the answer
# said to lack a property ("the answer is not a JSON object ...", "the answer does not cite ...").
_MODAL = re.compile(r"\b(?:must|should|shall|ha(?:s|ve) to|needs? to|(?:is|are) required to|(?:is|are) expected to)"
                    r"\s+(?:always\s+)?(?P<req>.+)", re.I)
_LACKS = re.compile(r"^(?:(?:the\s+)?(?:answer|output|reply|response|result)s?\s+(?:(?P<be>is|was|are|were)\s+not|"
                    r"(?:does|did|do)\s+not|doesn't|didn't)|(?P<bare>not))\s+(?P<req>.+)", re.I)
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
    level: float             # Holm's step for this cluster / 3: what any of the p-values must not exceed
    significant: bool
    tolerable: float = TOLERABLE  # the failure rate the binomial test's null hypothesis allows
    p_tolerable: float = 1.0      # one-sided binomial test of k of n against ``tolerable``
    agreement: Agreement | None = None  # the test of the confirmed failures (molt.control.significance)
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
                        "failure rate, Fisher on the confirmed failures (Bonferroni over the three); Holm's "
                        "step-down over the window's clusters", "k": self.failures,
                "n": self.requests, "f": self.base_failures, "m": self.base_requests, "p_value": self.p_value,
                "tolerable": self.tolerable, "p_tolerable": self.p_tolerable,
                "level": self.level, "significant": self.significant, "screened": self.screened,
                "confirmed": self.agreement.summary() if self.agreement is not None else None}


@dataclass
class Cluster:
    """Failures of one signature and one intent, with the window's requests of that intent."""

    key: str
    task: str | None            # the members' most common ``metadata.task`` (None without labels)
    signature: str              # "tool:<name>:<error type>" | "format:<requirement>" | "answer"
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


def _signature(e: Episode) -> tuple[str, str, str | None, str | None]:
    errs = e.tool_errors
    if errs:
        t = errs[0]
        return f"tool:{t.name}:{t.error_type or 'error'}", "tool_error", t.name, t.error_type
    req = requirement_of(e.verdict) if e.verdict else None
    if req is not None:
        return f"format:{_IDS.sub('#', req.lower())}", "format", None, None
    return "answer", "answer", None, None


def requirement_of(verdict: str) -> str | None:
    """What a consumer's rejection reason, a judge's rubric or a validator's message requires of the
    answer, as a verb phrase ("cite the section id", "be a JSON object with an 'answer' key"), or
    ``None`` when it states no requirement ("wrong answer", "the refund was not issued").

    Read from how a requirement is said, not what it is about: a clause with a deontic modal ("answers
    must cite the section id") or one saying the answer lacks a property ("the answer is not in EUR"),
    after a leading label ("format: …", "rejected: …"). Failures are clustered on the requirement,
    and :func:`molt.control.diagnose.propose` offers a harness edit stating it."""
    for clause in re.split(r"(?<=[.;!?])\s+(?=[A-Z])|\s*\n\s*", verdict.strip()):
        clause = re.sub(r"^(?:[A-Za-z][\w -]{0,30}:\s*)+", "", clause.strip()).strip().rstrip(".;!? ")
        m = _MODAL.search(clause)
        if m:
            return _tidy_requirement(m.group("req"))
        m = _LACKS.match(clause)
        if m:
            req = m.group("req")
            return _tidy_requirement(("be " + req) if m.group("be") or m.group("bare") else req)
    return None


#: What a verdict quotes of the answer after its requirement ("… does not open with the number: 'in
#: mathematics, '"): evidence of this failure, not part of what is required, so failures that broke the
#: same requirement differently still cluster together.
_QUOTED_EVIDENCE = re.compile(r"\s*:\s*(?:['\"\u2018\u201c`]|[rbu]?['\"]).*$", re.S)


def _tidy_requirement(text: str) -> str | None:
    text = _QUOTED_EVIDENCE.sub("", text)
    text = " ".join(text.split()).strip().rstrip(".;!? ")
    return text[:200] if re.search(r"[A-Za-z]{2,}", text) else None


def intent_text(question: str) -> str:
    """The request as its intent is embedded: ids and numbers masked, whitespace collapsed."""
    return " ".join(_IDS.sub("#", question).split())[:512]


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
    emb = resolve_embedder(embedder)
    questions = [intent_text(e.question) for e in eps]
    vecs = embed_texts(emb, questions)
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


def resolve_embedder(embedder: Embedder | None) -> Embedder:
    """``embedder``, else the packaged MiniLM one, else (not installed) a hashed bag of words."""
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


def embed_texts(emb: Embedder, texts: list[str]) -> np.ndarray:
    """``texts`` embedded by ``emb``, each distinct text once (rows in the order of ``texts``)."""
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
            c.evidence = Evidence(failures=c.size, requests=n, base_failures=f, base_requests=len(rest),
                                  p_value=p, level=alpha / (TESTS * max(1, len(tested))), significant=False,
                                  tolerable=tolerable, p_tolerable=pt, agreement=agreed)
        # Holm's step-down over the tested clusters, each cluster's three tests Bonferroni-combined
        # (its smallest p-value times three): the first step is Bonferroni's alpha / clusters, each
        # later one is held to a looser level once the ones before it were found.
        steps = holm({c.key: min(1.0, TESTS * _p(c)) for c in tested}, alpha)
        for c in clusters:
            ev = c.evidence
            assert ev is not None
            level = steps[c.key][0] / TESTS if c.key in steps else ev.level
            sig = c.key in steps and steps[c.key][1]
            c.evidence = replace(ev, level=level, significant=sig, screened=c.size >= 2 and not sig
                                 and _p(c) <= screen)
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
