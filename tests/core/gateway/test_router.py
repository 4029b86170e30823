"""The router: a pure function of session key and table; weighted canaries; affinity across table
changes; health-based failover."""

from __future__ import annotations

import uuid

import pytest

from molt.atdp import new_id
from molt.errors import BackendUnavailable, ModelNotFound
from molt.gateway import Router, RoutingTable, TrafficSplit, VersionSpec, choose, session_start


def _table(weights: dict[str, float], backends: dict[str, tuple[str, ...]] | None = None) -> RoutingTable:
    backends = backends or {}
    versions = {v: VersionSpec(version=v, backends=backends.get(v, ("b0",))) for v in weights}
    return RoutingTable(versions=versions, models={"m": (TrafficSplit(weights=weights),)})


def test_routing_is_a_pure_function_of_key_and_table() -> None:
    t = _table({"v1": 1.0, "v2": 1.0}, {"v1": ("a", "b"), "v2": ("c",)})
    keys = [f"session-{i}" for i in range(200)]
    first = [choose(t, "m", k, 0.0) for k in keys]
    # A second "replica" with its own router object agrees on every key.
    r1, r2 = Router(t), Router(t.model_copy())
    assert [(d.version.version, d.backend) for d in first] == [
        (r1.route("m", k).version.version, r1.route("m", k).backend) for k in keys]
    assert [r1.route("m", k).backend for k in keys] == [r2.route("m", k).backend for k in keys]
    assert {d.backend for d in first} == {"a", "b", "c"}


def test_weights_split_sessions_in_proportion() -> None:
    t = _table({"base": 0.9, "canary": 0.1})
    n = 4000
    share = sum(choose(t, "m", f"k{i}", 0.0).version.version == "canary" for i in range(n)) / n
    assert 0.07 < share < 0.13


def test_changing_a_weight_moves_only_the_sessions_that_must_move() -> None:
    before = _table({"v1": 0.5, "v2": 0.5})
    after = _table({"v1": 0.5, "v2": 0.5, "v3": 0.5})
    keys = [f"k{i}" for i in range(2000)]
    moved = [k for k in keys if choose(before, "m", k, 0).version.version != choose(after, "m", k, 0).version.version]
    assert all(choose(after, "m", k, 0).version.version == "v3" for k in moved)  # only to the new version
    assert 0.25 < len(moved) / len(keys) < 0.42


def test_sessions_keep_their_version_when_a_canary_starts() -> None:
    clock = [1000.0]
    router = Router(_table({"base": 1.0}), clock=lambda: clock[0])
    old_plain = "chat-session-42"               # first seen before the change
    old_v7 = new_id()                            # a UUIDv7 carries its own start time
    assert router.route("m", old_plain).version.version == "base"
    assert session_start(old_v7) is not None
    clock[0] = 2e10  # far later than old_v7's timestamp
    router.add_version("m", VersionSpec(version="canary", backends=("b0",)), weight=1.0, weights={"base": 0.0})
    assert router.route("m", old_plain).version.version == "base"
    assert router.route("m", old_v7).version.version == "base"
    assert router.route("m", "brand-new-session").version.version == "canary"
    assert router.table.current_weights("m") == {"base": 0.0, "canary": 1.0}
    # The version can also be asked for by id.
    assert router.route("canary", old_plain).version.version == "canary"


def test_uuid7_start_time() -> None:
    assert session_start(str(uuid.uuid4())) is None
    assert session_start("not-a-uuid") is None
    t = session_start(new_id())
    import time

    assert t is not None and abs(t - time.time()) < 5


def test_health_failover_within_and_across_versions() -> None:
    t = _table({"v1": 1.0, "v2": 0.0001}, {"v1": ("a", "b"), "v2": ("c",)})
    router = Router(t)
    keys = [f"k{i}" for i in range(100)]
    on_a = [k for k in keys if router.route("m", k).backend == "a"]
    on_b = [k for k in keys if router.route("m", k).backend == "b"]
    router.set_health("a", False)
    assert all(router.route("m", k).backend == "b" for k in on_a)      # a's sessions move to b …
    assert all(router.route("m", k).backend == "b" for k in on_b)      # … b's stay put
    router.set_health("b", False)
    d = router.route("m", on_a[0])
    assert d.backend == "c" and d.version.version == "v2" and d.failover
    router.set_health("c", False)
    with pytest.raises(BackendUnavailable):
        router.route("m", on_a[0])
    router.set_health("a", True)
    assert all(router.route("m", k).backend == "a" for k in on_a)      # and come back when a recovers


def test_unknown_model_and_table_validation() -> None:
    with pytest.raises(ModelNotFound, match="served models: m"):
        choose(_table({"v": 1.0}), "other", "k", 0)
    with pytest.raises(ValueError, match="unknown versions"):
        RoutingTable(versions={}, models={"m": (TrafficSplit(weights={"ghost": 1.0}),)})
    with pytest.raises(ValueError, match="weight > 0"):
        TrafficSplit(weights={"v": 0.0})
    with pytest.raises(ValueError, match="key and the id must match"):
        RoutingTable(versions={"x": VersionSpec(version="y", backends=("b",))}, models={})


def test_remove_version_is_a_rollback() -> None:
    router = Router(_table({"base": 1.0}))
    router.add_version("m", VersionSpec(version="bad", backends=("b0",)), weight=1.0, weights={"base": 0.0})
    assert router.route("m", "new-session").version.version == "bad"
    router.remove_version("bad")
    assert router.route("m", "new-session").version.version == "base"
    assert "bad" not in router.models()
