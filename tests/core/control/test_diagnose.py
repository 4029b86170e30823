"""Label-free diagnosis: clusters from intent, tool error and correction text (no ``metadata.task``),
the binomial evidence bar and its false-alarm rate, and stability under flipped rewards and late
corrections."""

from __future__ import annotations

import hashlib
import math
import random
import string
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from molt.control.diagnose import (
    ALPHA,
    Cluster,
    cluster_failures,
    intent_text,
    same_pattern,
)
from molt.control.signals import Episode, ToolUse
from molt.stats import binomial_greater, fisher_greater

T0 = datetime(2026, 11, 30, tzinfo=UTC)


def ep(i: int, question: str, ok: bool | None, *, tools: list[ToolUse] | None = None,
       corrections: list[str] | None = None, task: str | None = None, tenant: str = "acme") -> Episode:
    return Episode(trajectory_id=f"t{i}", tenant_id=tenant, agent_id="agent", task=task, policy_version="v1",
                   started_at=T0 + timedelta(seconds=i), success=ok, reward=None if ok is None else float(ok),
                   question=question, answer="x", tools=tools or [], corrections=corrections or [])


# --------------------------------------------------------------------------- the real embedding, no labels

POLICY = ["What is the refund window?", "How long is the refund window for my purchase?",
          "Could you tell me the refund window please?", "how many days is your refund window?"]
HOURS = ["When does your phone line open?", "What are your opening hours on weekdays?"]
STATUS = ["Where is order A-{n}?", "Has my order A-{n} shipped yet?", "Track order A-{n} for me"]


def _production_window() -> list[Episode]:
    """A window as a gateway captures it: no task, no verifier reason. Refund-window questions fail
    and some users correct them; one legacy tool rejects half the order lookups; the rest is fine."""
    rng = random.Random(7)
    bad = ToolUse("lookup_order", {"order_id": "1003"}, False, "ValidationError", "order_id must keep the A- prefix")
    good = ToolUse("lookup_order", {"order_id": "A-1003"}, True)
    out: list[Episode] = []
    for i in range(8):
        corr = ["Our refund window is 45 days from delivery."] if i % 2 == 0 else []
        out.append(ep(len(out), POLICY[i % len(POLICY)] + f" (ref {rng.randrange(10**5)})", False, corrections=corr))
    for i in range(14):
        fails = i % 7 < 5
        out.append(ep(len(out), STATUS[i % 3].format(n=1000 + rng.randrange(60)), None if fails else True,
                      tools=[bad] if fails else [good]))
    for i in range(30):
        out.append(ep(len(out), HOURS[i % 2], True))
    out.append(ep(len(out), "Can I pay with a voucher?", False))  # one stray failure
    rng.shuffle(out)
    return out


def test_clusters_without_task_labels_by_intent_and_tool_error() -> None:
    window = _production_window()
    # What production says failed: the tool errors with no reward are failures too (signals.episode_of
    # marks them; here the window is built directly, so mark them the same way).
    for e in window:
        if e.success is None and e.tool_errors:
            e.success = False
    found = cluster_failures(window)
    sig = [c for c in found if c.significant]
    assert all(c.task is None for c in found)
    by_sig = {c.signature: c for c in sig}
    assert set(by_sig) == {"answer", "tool:lookup_order:ValidationError"}, [c.summary() for c in found]
    policy = by_sig["answer"]
    # Paraphrases join one intent cluster.
    assert sorted(e.question.split(" (ref")[0] for e in policy.failures) == sorted(POLICY * 2)
    assert sum(1 for e in policy.failures if e.corrections) == 4
    tool = by_sig["tool:lookup_order:ValidationError"]
    assert tool.size == 10 and tool.evidence is not None and tool.evidence.requests == 14  # successes counted
    # The stray failure is its own cluster and not evidence of anything.
    stray = [c for c in found if any("voucher" in e.question for e in c.failures)]
    assert len(stray) == 1 and not stray[0].significant and stray[0].size == 1


def test_task_is_one_more_feature_not_a_requirement() -> None:
    same_q = "Where is order A-{n}?"
    window = ([ep(i, same_q.format(n=1000 + i), False, task="status_json") for i in range(8)]
              + [ep(10 + i, same_q.format(n=1100 + i), True, task="status") for i in range(6)]
              + [ep(20 + i, HOURS[i % 2], True, task="hours") for i in range(20)])
    [c] = [c for c in cluster_failures(window) if c.significant]
    # With labels the task separates identical questions: the cluster's requests are its task's only.
    assert c.task == "status_json" and c.evidence is not None and c.evidence.requests == 8
    unlabelled = [ep(i, e.question, e.success) for i, e in enumerate(window)]
    [u] = [c for c in cluster_failures(unlabelled) if c.significant]
    # Without them the same failures still form one significant cluster over the same intent (14 asks).
    assert u.task is None and u.size == 8 and u.evidence is not None and u.evidence.requests == 14


def test_intent_masks_ids_and_numbers() -> None:
    assert intent_text("Where is order A-1003? (ticket 52311)") == intent_text("Where is order A-2710? (ticket 7)")
    assert intent_text("refund  order\nA-1") == "refund order #"


# --------------------------------------------------------------------------- the test and its false-alarm rate


def test_fisher_tail_is_exact() -> None:
    # Against brute force: every way to place k + f failures on n + m requests, equally likely.
    from itertools import combinations

    for n, m, fails in [(3, 5, 2), (4, 6, 5), (6, 12, 6), (2, 9, 3)]:
        placements = list(combinations(range(n + m), fails))
        for k in range(min(n, fails) + 2):
            want = sum(1 for pl in placements if sum(1 for i in pl if i < n) >= k) / len(placements)
            if k <= fails:
                assert fisher_greater(k, n, fails - k, m) == pytest.approx(want, rel=1e-9, abs=1e-15), (n, m, k)
    assert fisher_greater(0, 5, 1, 5) == 1.0 and fisher_greater(6, 5, 0, 5) == 0.0


class IntentEmbedder:
    """Requests of one named intent near one random unit vector (what a sentence embedding gives
    paraphrases); the intent is the request's first word. Stands in for the embedding so the test
    measures the statistics, not the model."""

    dim = 64

    def __init__(self, spread: float = 0.15) -> None:
        self.spread = spread

    def _unit(self, key: str) -> np.ndarray:
        seed = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")
        v = np.random.default_rng(seed).standard_normal(self.dim)
        return v / np.linalg.norm(v)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = []
        for t in texts:
            v = self._unit(t.split()[0]) + self.spread * self._unit(t)
            out.append(v / np.linalg.norm(v))
        return np.asarray(out, np.float32)


def _tag(rng: random.Random) -> str:
    return "".join(rng.choices(string.ascii_lowercase, k=8))


def _null_window(rng: random.Random, n: int = 60, intents: int = 6, p: float = 0.15) -> list[Episode]:
    """Failures independent of the request: any cluster raised here is a false alarm."""
    sizes = [1 + rng.randrange(2 * n // intents) for _ in range(intents)]
    out: list[Episode] = []
    for k, size in enumerate(sizes):
        for _ in range(size):
            out.append(ep(len(out), f"intent{string.ascii_lowercase[k]} ask {_tag(rng)}", rng.random() >= p))
    return out


@pytest.mark.parametrize("p", [0.05, 0.15, 0.3])
def test_false_alarm_rate_is_at_most_alpha(p: float) -> None:
    rng = random.Random(f"null-{p}")
    emb = IntentEmbedder()
    windows = 300
    alarms = sum(any(c.significant for c in cluster_failures(_null_window(rng, p=p), embedder=emb))
                 for _ in range(windows))
    # Bonferroni bounds the family-wise rate by alpha; allow three binomial standard errors of the estimate.
    assert alarms / windows <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / windows), alarms


def test_binomial_tail_is_exact() -> None:
    assert binomial_greater(3, 3, 0.5) == pytest.approx(0.125)
    assert binomial_greater(2, 3, 0.5) == pytest.approx(0.5)
    assert binomial_greater(0, 5, 0.3) == 1.0 and binomial_greater(6, 5, 0.3) == 0.0


def test_a_pattern_that_is_all_of_the_traffic_is_found() -> None:
    """One kind of request, failing most of the time: the rest of the window is empty, so only the test
    against the tolerated rate can see it (a Fisher test alone gives p = 1)."""
    rng = random.Random("single")
    window = [ep(i, f"What is {rng.randint(10, 99)} plus {rng.randint(10, 99)}?", rng.random() < 0.2)
              for i in range(30)]
    sig = [c for c in cluster_failures(window, embedder=IntentEmbedder()) if c.significant]
    assert sig and sig[0].evidence is not None
    assert sig[0].evidence.p_value > sig[0].evidence.level  # the comparison with the rest had no power
    assert sig[0].evidence.p_tolerable <= sig[0].evidence.level


def test_every_intent_failing_its_own_way_is_found() -> None:
    """Three intents, each failing on every request: the rest fails as often as each cluster."""
    rng = random.Random("all-fail")
    window = [ep(i, f"intent{'abc'[i % 3]} ask {_tag(rng)}", False) for i in range(36)]
    sig = [c for c in cluster_failures(window, embedder=IntentEmbedder()) if c.significant]
    assert len(sig) == 3
    assert all(c.evidence is not None and c.evidence.p_value > c.evidence.level for c in sig)


def _pattern_window(rng: random.Random, *, flip: float = 0.0, late: bool = False) -> tuple[list[Episode], str]:
    """90 requests over 6 intents at a 5 % base failure rate, one intent (15 asks) failing 90 % of the
    time with a correction on half; ``flip`` of the outcome rewards flipped; ``late``: no correction
    has arrived yet."""
    out: list[Episode] = []
    for k in range(6):
        bad = k == 2
        for _ in range(15):
            fails = rng.random() < (0.9 if bad else 0.05)
            corr = ["Loyalty points expire after 12 months."] if bad and fails and rng.random() < 0.5 else []
            ok: bool = not fails
            if rng.random() < flip:
                ok = not ok
            if late:
                corr = []
            out.append(ep(len(out), f"intent{string.ascii_lowercase[k]} ask {_tag(rng)}", False if corr else ok,
                          corrections=corr))
    return out, "intentc"


def _top(window: list[Episode], emb: IntentEmbedder) -> Cluster | None:
    sig = [c for c in cluster_failures(window, embedder=emb) if c.significant]
    return sig[0] if sig else None


def test_power_and_stability_under_flipped_rewards_and_late_corrections() -> None:
    emb = IntentEmbedder()
    rng = random.Random("stable")
    runs = 60
    clean = flipped = late = 0
    for _ in range(runs):
        for mode in ("clean", "flip", "late"):
            window, intent = _pattern_window(rng, flip=0.2 if mode == "flip" else 0.0, late=mode == "late")
            top = _top(window, emb)
            hit = top is not None and all(e.question.startswith(intent) for e in top.failures)
            clean += hit and mode == "clean"
            flipped += hit and mode == "flip"
            late += hit and mode == "late"
    assert clean == runs
    # 20 % flipped rewards raise the base rate to ~24 % and drop ~2 of the 9 failures: still found.
    assert flipped / runs >= 0.9, flipped
    # Without the (late) corrections the failures alone still make the cluster.
    assert late / runs >= 0.95, late


def _confirmed_null_window(rng: random.Random, p: float) -> list[Episode]:
    """Failures independent of the request, half of them confirmed by a correction, and 20 % of the
    outcome rewards flipped: a confirmed-failure alarm here is a false alarm too."""
    out = _null_window(rng, p=p)
    for i, e in enumerate(out):
        corr = ["That is wrong."] if e.success is False and rng.random() < 0.5 else []
        ok = e.success if corr or rng.random() >= 0.2 else not e.success
        out[i] = ep(i, e.question, False if corr else ok, corrections=corr)
    return out


@pytest.mark.parametrize("p", [0.05, 0.3])
def test_false_alarm_rate_with_confirmed_failures_is_at_most_alpha(p: float) -> None:
    rng = random.Random(f"null-confirmed-{p}")
    emb = IntentEmbedder()
    windows = 300
    alarms = sum(any(c.significant for c in cluster_failures(_confirmed_null_window(rng, p), embedder=emb))
                 for _ in range(windows))
    assert alarms / windows <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / windows), alarms


def test_failures_another_signal_confirms_survive_flipped_rewards() -> None:
    """A legacy tool rejects every lookup of one intent (6 requests, each an unrecovered tool error); 20 % of
    the other 30 requests' rewards are flipped to failures (9 fail). Counting every failure, the rest of the window
    fails as often as a pattern's neighbours would and the Fisher test waits (and 6 of 6 is too few for
    the binomial one); the tool errors, which no reward flip makes or unmakes, stand out."""
    from molt.control.significance import confirmed

    rng = random.Random("confirmed")
    bad = ToolUse("lookup_order", {"order_id": "1003"}, False, "ValidationError", "order_id must keep the A- prefix")
    window = [ep(i, f"intentz lookup {_tag(rng)}", False, tools=[bad]) for i in range(6)]
    for k in range(30):
        window.append(ep(len(window), f"intent{'abc'[k % 3]} ask {_tag(rng)}", k % 10 not in (0, 3, 7)))  # 9 failed
    window = [w if w.success is not False or not w.tools else
              w.__class__(**{**w.__dict__, "failure_signals": ["tool_error"]}) for w in window]
    assert sum(confirmed(e) for e in window) == 6
    sig = [c for c in cluster_failures(window, embedder=IntentEmbedder()) if c.significant]
    assert len(sig) == 1 and {e.question.split()[0] for e in sig[0].failures} == {"intentz"}
    ev = sig[0].evidence
    assert ev is not None and ev.agreement is not None
    assert min(ev.p_value, ev.p_tolerable) > ev.level >= ev.agreement.p_value, ev.summary()


def test_same_pattern_across_tenants() -> None:
    emb = IntentEmbedder()
    a = [ep(i, f"intentx ask {i}x", i % 5 != 0, tenant="acme") for i in range(1, 30)]
    a += [ep(100 + i, f"intenty ask {i}y", False, tenant="acme") for i in range(6)]
    b = [ep(200 + i, f"intenty ask {i}z", False, tenant="globex") for i in range(5)]
    b += [ep(300 + i, f"intentx ask {i}w", True, tenant="globex") for i in range(20)]
    ca = next(c for c in cluster_failures(a, embedder=emb) if c.significant)
    cb = next(c for c in cluster_failures(b, embedder=emb) if c.significant)
    other = Cluster(key="k", task=None, signature="answer", kind="answer", centroid=emb.embed(["intentx q"])[0])
    assert same_pattern(ca, cb) and not same_pattern(ca, other)


# --------------------------------------------------------------------------- what production says failed


def _desk_run(question: str, *, agent: str | None = None) -> tuple[list[Any], list[Any]]:
    import asyncio

    from molt.replay import ReplayAgent, record_episode
    from molt_desk.world import AGENT, DeskModel, World

    events, rewards, _ = asyncio.run(record_episode(agent or AGENT, question, ReplayAgent(DeskModel()),
                                                    World().live_tools(), tenant_id="acme"))
    return events, list(rewards)


def test_failure_is_what_production_says() -> None:
    from molt.atdp.models import EventKind, FeedbackAction, RewardAnnotation, RewardSource
    from molt.control.signals import episode_of
    from molt.store.query import Trajectory
    from molt_desk.world import LEGACY_AGENT

    events, _ = _desk_run("Where is order A-1003?")           # answered right; nobody said anything yet
    tid = events[0].trajectory_id

    def judged(*rewards: RewardAnnotation, evs: list[Any] | None = None) -> Episode:
        return episode_of(Trajectory(trajectory_id=tid, events=evs or events, rewards=list(rewards)))

    def reward(value: float, source: RewardSource, reason: str | None = None) -> RewardAnnotation:
        return RewardAnnotation(trajectory_id=tid, value=value, source=source, reason=reason, tenant_id="acme")

    silent = judged()
    assert silent.success is None and silent.failure_signals == []
    assert judged(reward(1.0, RewardSource.USER_FEEDBACK)).success is True
    low = judged(reward(-1.0, RewardSource.USER_FEEDBACK))                  # a negative late reward
    assert low.success is False and low.failure_signals == ["reward"]
    fail = judged(reward(0.0, RewardSource.JUDGE, "FAIL"))                  # a judge's FAIL
    assert fail.success is False and fail.failure_signals == ["judge"]
    corrected = judged(reward(1.0, RewardSource.VERIFIER), reward(0.0, RewardSource.USER_CORRECTION, "It shipped."))
    assert corrected.success is False and corrected.failure_signals == ["correction"]
    # A thumbs-down inside the conversation (a FEEDBACK event) overrides a positive reward.
    down = events[-1].model_copy(update={"kind": EventKind.FEEDBACK, "action": FeedbackAction(rating=-1.0),
                                         "event_id": events[-1].event_id + "f"})
    thumbs = judged(reward(1.0, RewardSource.VERIFIER), evs=[*events, down])
    assert thumbs.success is False and thumbs.failure_signals == ["thumbs_down"]
    # A tool error the agent never recovered from, with no reward at all.
    legacy, _ = _desk_run("Where is order A-1003?", agent=LEGACY_AGENT)
    err = episode_of(Trajectory(trajectory_id=legacy[0].trajectory_id, events=legacy, rewards=[]))
    assert err.success is False and err.failure_signals == ["tool_error"] and err.tool_errors
