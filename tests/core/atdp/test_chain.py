"""Hash chain: sealing, verification, and detection of edits, deletions and reorderings."""

from __future__ import annotations

import dataclasses
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from molt.atdp import GENESIS, SealedEvent, seal, verify_chain
from molt.atdp.chain import unseal


def _chain(event_factory, n: int = 12) -> list[SealedEvent]:  # type: ignore[no-untyped-def]
    out, prev = [], GENESIS
    for i in range(n):
        s = seal(event_factory("traj", i), i, prev)
        out.append(s)
        prev = s.hash
    return out


def test_a_sealed_chain_verifies_and_unseals_to_the_event(event_factory) -> None:  # type: ignore[no-untyped-def]
    chain = _chain(event_factory)
    assert verify_chain("traj", chain).ok
    assert verify_chain("traj", list(reversed(chain))).ok  # storage order does not matter
    ev = event_factory("traj", 1)
    assert unseal(seal(ev, 0, GENESIS).envelope, seal(ev, 0, GENESIS).payload) == ev.model_copy(update={"seq": 0})


def _flip(data: bytes, pos: int) -> bytes:
    b = bytearray(data)
    b[pos] ^= 0x01
    return bytes(b)


@settings(max_examples=300, deadline=None)
@given(field=st.sampled_from(["envelope", "payload", "digest", "prev_hash", "hash"]),
       which=st.integers(min_value=0, max_value=11), where=st.floats(min_value=0, max_value=0.999))
def test_every_single_byte_edit_is_detected(event_factory, field: str, which: int, where: float) -> None:  # type: ignore[no-untyped-def]
    chain = _chain(event_factory)
    target = chain[which]
    value = getattr(target, field)
    raw = value if isinstance(value, bytes) else value.encode()
    edited = _flip(raw, int(where * len(raw)))
    new = edited if isinstance(value, bytes) else edited.decode(errors="replace")
    chain[which] = dataclasses.replace(target, **{field: new})
    assert not verify_chain("traj", chain).ok


def test_deletions_are_detected(event_factory) -> None:  # type: ignore[no-untyped-def]
    for i in range(12):
        chain = _chain(event_factory)
        head = (chain[-1].seq, chain[-1].hash)
        del chain[i]
        assert not verify_chain("traj", chain, expected_head=head).ok, f"deleting event {i} went unnoticed"
    # without a recorded head, deleting the tail is only detectable by count; every other deletion is
    for i in range(11):
        chain = _chain(event_factory)
        del chain[i]
        assert not verify_chain("traj", chain).ok


def test_reorderings_are_detected(event_factory) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(7)
    for _ in range(50):
        chain = _chain(event_factory)
        i, j = rng.sample(range(12), 2)
        # swap the causal positions (seq) of two events, as a reordering attack would
        a, b = chain[i], chain[j]
        chain[i] = dataclasses.replace(a, seq=b.seq)
        chain[j] = dataclasses.replace(b, seq=a.seq)
        assert not verify_chain("traj", chain).ok


def test_erased_payloads_keep_the_chain_verifiable(event_factory) -> None:  # type: ignore[no-untyped-def]
    chain = _chain(event_factory)
    chain[3] = dataclasses.replace(chain[3], payload=None, salt=None)
    report = verify_chain("traj", chain)
    assert report.ok and report.erased_payloads == 1
    # but an erased payload cannot be swapped for another event's payload without detection
    chain[4] = dataclasses.replace(chain[4], payload=chain[5].payload)
    assert not verify_chain("traj", chain).ok


def test_a_record_from_another_trajectory_is_detected(event_factory) -> None:  # type: ignore[no-untyped-def]
    chain = _chain(event_factory)
    other = seal(event_factory("other", 0), 0, GENESIS)
    chain[0] = other
    assert not verify_chain("traj", chain).ok
