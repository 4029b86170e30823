"""The memory and skill store and the retrieval harness, with real embeddings (all-MiniLM-L6-v2)."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from molt.control.embed import default_embedder
from molt.control.memory import MAX_TEXT_BYTES, MemoryStore, RetrievalHarness, approx_tokens
from molt.errors import InterventionError
from molt.governance.redaction import Redactor
from molt.harness import HarnessSpec, StaticHarness
from molt.store import Store

REFUND = "Refunds go back to the original card within 5 business days."
FILLER = [
    "The office cafeteria serves lunch from noon until two.",
    "Our Kubernetes cluster runs in the eu-west-1 region.",
    "Visitors park in the underground garage on level minus two.",
    "The quarterly all-hands meeting is on the first Monday.",
]


@pytest.fixture(scope="module")
def embedder() -> Any:
    return default_embedder()  # loaded once for the module


@pytest.fixture(scope="module")
def redactor() -> Redactor:
    return Redactor()


@pytest.fixture()
def mem(tmp_path: Path, embedder: Any, redactor: Redactor) -> Iterator[MemoryStore]:
    store = Store.open(tmp_path / "store", auto_compact=False)
    yield MemoryStore(store, embedder, redactor)
    store.close()


@dataclass(frozen=True)
class Version:
    """What the gateway hands the harness (VersionSpec-like)."""

    version: str = "v1"
    harness: HarnessSpec | None = None
    tenant_id: str | None = "acme"
    memory_ids: tuple[str, ...] = ()
    skill_ids: tuple[str, ...] = ()


def _ids(hits: Sequence[tuple[Any, float]]) -> list[str]:
    return [getattr(h, "memory_id", None) or h.skill_id for h, _ in hits]


def _system(applied: Any) -> str:
    assert applied.messages[0]["role"] == "system"
    return str(applied.messages[0]["content"])


# ---------------------------------------------------------------------- the embedder


def test_default_embedder_is_cached_and_returns_unit_float32_rows(embedder: Any) -> None:
    assert default_embedder() is embedder and embedder.dim == 384
    vecs = embedder.embed(["refunds take five days", "lunch is at noon"])
    assert vecs.shape == (2, 384) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert embedder.embed([]).shape == (0, 384)


# ---------------------------------------------------------------------- search


def test_vector_search_ranks_the_semantically_related_memory_first(mem: MemoryStore) -> None:
    for text in FILLER[:2]:
        mem.add_memory("acme", text)
    refund = mem.add_memory("acme", REFUND)
    for text in FILLER[2:]:
        mem.add_memory("acme", text)
    # no word of the query is in the memory: only its meaning matches
    hits = mem.search_memories("acme", "How long until my money is returned?", mode="vector", k=5)
    assert _ids(hits)[0] == refund.memory_id and len(hits) == 5
    assert hits[0][1] > hits[1][1] + 0.15, hits  # by a margin, not a coin toss
    assert all(-1.0 <= s <= 1.0 for _, s in hits)


def test_full_text_search_finds_a_keyword_and_nothing_without_one(mem: MemoryStore) -> None:
    for text in FILLER:
        mem.add_memory("acme", text)
    hit = mem.add_memory("acme", "Firmware 7.2 bricks the Zorblax router; roll it back to 7.1.")
    got = mem.search_memories("acme", "zorblax", mode="text")
    assert _ids(got) == [hit.memory_id] and got[0][1] > 0
    assert mem.search_memories("acme", "flibbertigibbet", mode="text") == []
    assert mem.store.table("memories").list_indices()[0].index_type in ("FTS", "Inverted")


def test_hybrid_search_is_the_reciprocal_rank_fusion_of_both_lists(mem: MemoryStore) -> None:
    refund = mem.add_memory("acme", REFUND)
    code = mem.add_memory("acme", "Error E4471 means the payment gateway timed out; retry after a minute.")
    for text in FILLER:
        mem.add_memory("acme", text)
    query = "a customer saw E4471 while asking for a refund"
    vec = _ids(mem.search_memories("acme", query, mode="vector", k=20))
    txt = _ids(mem.search_memories("acme", query, mode="text", k=20))
    hyb = mem.search_memories("acme", query, mode="hybrid", k=3)
    assert set(_ids(hyb)[:2]) == {refund.memory_id, code.memory_id}

    def rrf(mid: str) -> float:
        return sum(1 / (60 + lst.index(mid) + 1) for lst in (vec, txt) if mid in lst) / (2 / 61)

    assert [round(s, 9) for _, s in hyb] == [round(rrf(m.memory_id), 9) for m, _ in hyb]
    assert hyb[0][1] <= 1.0 and hyb[0][1] > hyb[2][1]


def test_skills_are_matched_on_name_and_trigger(mem: MemoryStore) -> None:
    refund = mem.add_skill("acme", "refund procedure", "the customer asks for their money back",
                           "1. Find the order. 2. Call refund_order. 3. Confirm the amount.")
    mem.add_skill("acme", "password reset", "the user cannot log in", "Send the reset link; never read it out.")
    hits = mem.search_skills("acme", "I would like a refund for my order please", k=2)
    assert _ids(hits)[0] == refund.skill_id
    assert _ids(mem.search_skills("acme", "refund", mode="text")) == [refund.skill_id]
    assert mem.skills("acme", [refund.skill_id]) == [refund]


def test_expired_memories_are_excluded_and_expire_deletes_them(mem: MemoryStore) -> None:
    short = mem.add_memory("acme", "The spring sale code is BLOOM10.", ttl_s=60)
    keep = mem.add_memory("acme", "The spring sale ends in May.")
    assert short.expires_at == short.created_at + timedelta(seconds=60) and keep.expires_at is None
    q = "spring sale"
    before = short.created_at + timedelta(seconds=59)
    after = short.created_at + timedelta(seconds=60)  # expires_at itself is already expired
    for mode in ("vector", "text", "hybrid"):
        assert short.memory_id in _ids(mem.search_memories("acme", q, mode=mode, now=before)), mode  # type: ignore[arg-type]
        assert _ids(mem.search_memories("acme", q, mode=mode, now=after)) == [keep.memory_id], mode  # type: ignore[arg-type]
    assert len(mem.memories("acme")) == 2  # expired rows stay readable by id until expire() runs
    assert mem.expire(before) == 0
    assert mem.expire(after) == 1
    assert mem.memories("acme") == [keep]
    assert mem.expire(after) == 0


def test_snapshot_ids_restrict_the_search(mem: MemoryStore) -> None:
    refund = mem.add_memory("acme", REFUND)
    lunch = mem.add_memory("acme", FILLER[0])
    for mode in ("vector", "text", "hybrid"):
        got = mem.search_memories("acme", "refund to my card", ids=[lunch.memory_id], mode=mode)  # type: ignore[arg-type]
        assert refund.memory_id not in _ids(got), mode
    assert _ids(mem.search_memories("acme", "refund", ids=[refund.memory_id, lunch.memory_id], k=1)) == [
        refund.memory_id]
    assert mem.search_memories("acme", "refund", ids=[]) == []
    assert mem.memories("acme", [lunch.memory_id, "no-such-id", refund.memory_id]) == [lunch, refund]


def test_agent_scope(mem: MemoryStore) -> None:
    sales = mem.add_memory("acme", "Sales quotes are valid for thirty days.", agent_id="sales", scope="agent")
    shared = mem.add_memory("acme", "Quotes and invoices are in euros.", agent_id="sales", scope="tenant")
    got = _ids(mem.search_memories("acme", "quotes", agent_id="support"))
    assert got == [shared.memory_id]
    assert set(_ids(mem.search_memories("acme", "quotes", agent_id="sales"))) == {sales.memory_id, shared.memory_id}


# ---------------------------------------------------------------------- safety


def test_tenant_isolation_holds_even_when_the_snapshot_names_another_tenants_ids(mem: MemoryStore) -> None:
    secret = mem.add_memory("acme", "Acme's vault combination is kept by the night manager.")
    skill = mem.add_skill("acme", "vault procedure", "someone asks about the vault", "Escalate to the night manager.")
    own = mem.add_memory("globex", "Globex ships from Rotterdam.")
    q = "vault combination night manager"
    for mode in ("vector", "text", "hybrid"):
        assert mem.search_memories("globex", q, ids=[secret.memory_id], mode=mode) == [], mode  # type: ignore[arg-type]
        assert _ids(mem.search_memories("globex", q, mode=mode)) in ([], [own.memory_id]), mode  # type: ignore[arg-type]
        assert mem.search_skills("globex", q, ids=[skill.skill_id], mode=mode) == [], mode  # type: ignore[arg-type]
        assert mem.search_skills("globex", q, mode=mode) == [], mode  # type: ignore[arg-type]
    assert mem.memories("globex", [secret.memory_id]) == [] and mem.skills("globex", [skill.skill_id]) == []
    assert mem.memories("globex") == [own]
    messages = [{"role": "user", "content": "What is the vault combination?"}]
    harness = RetrievalHarness(mem)
    applied = harness.apply(messages, None, Version(tenant_id="globex", memory_ids=(secret.memory_id,),
                                                    skill_ids=(skill.skill_id,)))
    assert applied.messages == messages and harness.errors == 0
    assert "vault" in _system(harness.apply(messages, None, Version(memory_ids=(secret.memory_id,))))


def test_memory_and_skill_text_is_redacted_before_it_is_stored(tmp_path: Path, embedder: Any) -> None:
    store = Store.open(tmp_path / "store", auto_compact=False)
    mem = MemoryStore(store, embedder)  # the default redaction policy
    m = mem.add_memory("acme", "Ana's invoices go to ana.lima@example.org; her SSN is 536-22-8197.")
    assert "ana.lima@example.org" not in m.text and "536-22-8197" not in m.text
    assert "<EMAIL_ADDRESS_1>" in m.text and "<US_SSN_1>" in m.text
    s = mem.add_skill("acme", "billing contact", "invoices for bob.k@example.com bounce",
                      "Write to bob.k@example.com from the billing queue.")
    assert "<EMAIL_ADDRESS_1>" in s.trigger and s.instructions == "Write to <EMAIL_ADDRESS_1> from the billing queue."
    for name in ("memories", "skills"):
        raw = str(store.table(name).to_arrow().drop_columns(["vector"]).to_pylist())
        assert "example.org" not in raw and "example.com" not in raw and "536-22-8197" not in raw
    assert mem.memories("acme") == [m] and mem.skills("acme") == [s]
    store.close()


@pytest.mark.parametrize(("call", "message"), [
    (lambda m: m.add_memory("acme", ""), "memory text is empty"),
    (lambda m: m.add_memory("acme", "   \n"), "memory text is empty"),
    (lambda m: m.add_memory("acme", "x" * (MAX_TEXT_BYTES + 1)), "limit is 4,096"),
    (lambda m: m.add_memory("acme", "é" * (MAX_TEXT_BYTES // 2 + 1)), "limit is 4,096"),  # bytes, not chars
    (lambda m: m.add_memory("acme corp!", "fine text"), "tenant id"),
    (lambda m: m.add_memory("", "fine text"), "tenant id"),
    (lambda m: m.add_memory(None, "fine text"), "tenant id"),
    (lambda m: m.add_memory("acme", "fine text", agent_id="a b"), "agent id"),
    (lambda m: m.add_memory("acme", "fine text", scope="global"), "scope"),
    (lambda m: m.add_memory("acme", "fine text", ttl_s=0), "ttl_s"),
    (lambda m: m.add_skill("acme", "name", "", "do it"), "trigger"),
    (lambda m: m.add_skill("acme", "name", "when", " "), "instructions"),
    (lambda m: m.add_skill("acme", "", "when", "do it"), "skill name"),
    (lambda m: m.add_skill("acme", "n" * 201, "when", "do it"), "limit is 200"),
    (lambda m: m.search_memories("acme'--", "q"), "tenant id"),
    (lambda m: m.search_memories("acme", "q", mode="fuzzy"), "search mode"),
    (lambda m: m.memories("acme", "one-id"), "sequence of ids"),
])
def test_bad_input_is_rejected_with_a_clear_error_and_nothing_is_stored(mem: MemoryStore, call: Any,
                                                                        message: str) -> None:
    with pytest.raises(InterventionError, match=message):
        call(mem)
    assert mem.store.count("memories") == 0 and mem.store.count("skills") == 0


# ---------------------------------------------------------------------- the retrieval harness


def test_retrieval_harness_injects_the_best_matches_within_the_token_budget(mem: MemoryStore) -> None:
    refund = mem.add_memory("acme", REFUND)
    others = [mem.add_memory("acme", t) for t in FILLER]
    skill = mem.add_skill("acme", "refund procedure", "the customer wants their money back",
                          "Find the order, call refund_order, confirm the amount.")
    other_skill = mem.add_skill("acme", "password reset", "the user cannot log in", "Send the reset link.")
    version = Version(harness=HarnessSpec(system_prompt="Be brief."),
                      memory_ids=(refund.memory_id, *(m.memory_id for m in others)),
                      skill_ids=(skill.skill_id, other_skill.skill_id))
    messages = [{"role": "system", "content": "You are Acme support."},
                {"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello!"},
                {"role": "user", "content": "When will I get my refund?"}]
    before = copy.deepcopy(messages)

    wide = RetrievalHarness(mem, k_memories=4, k_skills=2, token_budget=10_000).apply(messages, None, version)
    system = _system(wide)
    assert system.startswith("You are Acme support.\n\nBe brief.")
    assert system.index(REFUND) < min(system.index(m.text) for m in others if m.text in system)
    assert system.count("\n- ") == 4 and "## refund procedure" in system and "## password reset" in system
    assert system.index("## refund procedure") < system.index("## password reset")
    assert messages == before and wide.fingerprint is not None

    # room for the best memory and the best skill only
    budget = approx_tokens(REFUND) + approx_tokens(f"## {skill.name}\n{skill.instructions}")
    narrow = RetrievalHarness(mem, token_budget=budget).apply(messages, None, version)
    system = _system(narrow)
    assert REFUND in system and "## refund procedure" in system
    assert system.count("\n- ") == 1 and "password reset" not in system
    assert not any(m.text in system for m in others)
    assert narrow.messages[1:] == messages[1:]

    nothing = RetrievalHarness(mem, token_budget=3).apply(messages, None, version)  # nothing fits
    assert nothing.messages == StaticHarness().apply(messages, None, version).messages


def test_retrieval_harness_is_the_static_harness_without_tenant_or_snapshot(mem: MemoryStore) -> None:
    m = mem.add_memory("acme", REFUND)
    messages = [{"role": "user", "content": "refund?"}]
    harness = RetrievalHarness(mem)
    spec = HarnessSpec(system_prompt="Be brief.")
    for version in (Version(harness=spec, tenant_id=None, memory_ids=(m.memory_id,)), Version(harness=spec), None):
        got, want = harness.apply(messages, None, version), StaticHarness().apply(messages, None, version)
        assert (got.messages, got.tools, got.fingerprint) == (want.messages, want.tools, want.fingerprint)
    assert harness.errors == 0


class _BrokenEmbedder:
    dim = 384
    name = "broken"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        raise RuntimeError("the embedding service is down")


def test_retrieval_harness_falls_back_to_the_static_harness_on_errors(mem: MemoryStore, caplog: Any) -> None:
    m = mem.add_memory("acme", REFUND)
    broken = MemoryStore(mem.store, _BrokenEmbedder(), mem.redactor)
    harness = RetrievalHarness(broken)
    messages = [{"role": "user", "content": "When will I get my refund?"}]
    spec = HarnessSpec(system_prompt="Be brief.")
    want = StaticHarness().apply(messages, None, Version(harness=spec))
    for version in (Version(harness=spec, memory_ids=(m.memory_id,)),
                    Version(harness=spec, tenant_id="not a tenant!", memory_ids=(m.memory_id,))):
        got = harness.apply(messages, None, version)
        assert (got.messages, got.fingerprint) == (want.messages, want.fingerprint)
    assert harness.errors == 2
    assert "Memory retrieval for version 'v1' failed" in caplog.text
