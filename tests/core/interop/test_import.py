"""Imports from Langfuse, LangSmith and OTLP files (fixtures written by hand from the vendors' documented
formats): trajectories verify, the causal tree is the source's, planted PII is not stored, late scores
and feedback become rewards, reruns are idempotent, bad input is refused with its reason."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from molt.capture.otlp import event_id_for
from molt.errors import MoltError
from molt.interop import ImportRefused, import_file
from molt.store import Store

FIXTURES = Path(__file__).parent / "fixtures"
#: PII planted in the fixtures; none of it may reach any table of the store
PII = ["jane.doe@example.com", "415 555 0134", "4111 1111 1111 1111", "Maria Lopez", "tom.hanson@example.org"]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(tmp_path / "store", auto_compact=False)
    yield s
    s.close()


def _source_tree(fmt: str) -> dict[str, dict[str, str | None]]:
    """{trace id: {event id: parent event id}} read from the fixture itself, by the documented links."""
    out: dict[str, dict[str, str | None]] = {}
    if fmt == "langfuse":
        for t in json.loads((FIXTURES / "langfuse_traces.json").read_text())["data"]:
            tid = t["id"]
            root = event_id_for(tid, "trace")
            tree: dict[str, str | None] = {root: None}
            for o in t["observations"]:
                parent = o.get("parentObservationId")
                tree[event_id_for(tid, o["id"])] = event_id_for(tid, parent) if parent else root
            out[tid] = tree
    elif fmt == "langsmith":
        for r in json.loads((FIXTURES / "langsmith_runs.json").read_text())["runs"]:
            tid = r["trace_id"]
            parent = r.get("parent_run_id")
            out.setdefault(tid, {})[event_id_for(tid, r["id"])] = event_id_for(tid, parent) if parent else None
    else:
        for line in (FIXTURES / "otlp_traces.jsonl").read_text().splitlines():
            for rs in json.loads(line)["resourceSpans"]:
                for ss in rs["scopeSpans"]:
                    for s in ss["spans"]:
                        tid, parent = s["traceId"], s.get("parentSpanId")
                        out.setdefault(tid, {})[event_id_for(tid, s["spanId"])] = (
                            event_id_for(tid, parent) if parent else None)
    return out


def _all_stored_text(store: Store) -> str:
    """Every byte the store keeps for events, rewards, quarantine and decisions, as text."""
    parts = []
    for name in ("events", "rewards", "quarantine"):
        tbl = store.table(name).to_arrow()
        for col in tbl.column_names:
            for v in tbl.column(col).to_pylist():
                if isinstance(v, bytes):
                    parts.append(v.decode("utf-8", "replace"))
                elif v is not None:
                    parts.append(str(v))
    return "\n".join(parts)


CASES = [("langfuse", "langfuse_traces.json", {"user_feedback", "judge", "human_label"}),
         ("langsmith", "langsmith_runs.json", {"user_correction", "user_feedback", "judge"}),
         ("otlp", "otlp_traces.jsonl", {"judge"})]


@pytest.mark.parametrize(("fmt", "name", "sources"), CASES, ids=[c[0] for c in CASES])
def test_import_keeps_the_tree_and_rewards_and_stores_no_pii(store: Store, pipeline: Any, fmt: str, name: str,
                                                            sources: set[str]) -> None:
    report = import_file(store, FIXTURES / name, fmt, pipeline=pipeline)
    expected = _source_tree(fmt)
    assert not report.refused and report.quarantined == 0
    assert report.imported == sum(len(t) for t in expected.values()) and report.redacted > 0
    assert sorted(store.trajectory_ids()) == sorted(expected)
    kinds: set[str] = set()
    for tid, tree in expected.items():
        assert store.verify(tid).ok
        traj = store.trajectory(tid)
        assert {e.event_id: e.parent_id for e in traj.events} == tree  # the source's parent links, exactly
        kinds |= {e.kind.value for e in traj.events}
        assert all(e.provenance.integration in (f"{fmt}-import", "otlp") for e in traj.events)
    assert {"model_call", "tool_call", "agent_step"} <= kinds
    rewards = [r for tid in expected for r in store.rewards(tid)]
    assert {r.source.value for r in rewards} == sources
    assert all(r.event_id is None or r.event_id in expected[r.trajectory_id] for r in rewards)
    text = _all_stored_text(store)
    assert not [p for p in PII if p in text], "planted PII reached the store"
    # a tool error in the source is an error outcome here
    errors = [e for tid in expected for e in store.trajectory(tid).events
              if e.outcome is not None and e.outcome.status.value == "error"]
    assert errors and all(e.outcome.error is not None and e.outcome.error.message for e in errors)

    again = import_file(store, FIXTURES / name, fmt, pipeline=pipeline)  # a rerun stores nothing twice
    assert (again.imported, again.rewards) == (0, 0)
    assert again.duplicates == report.imported and again.reward_duplicates == report.rewards
    assert store.count("events") == report.imported


def test_generations_carry_messages_tool_calls_and_usage(store: Store, pipeline: Any) -> None:
    import_file(store, FIXTURES / "otlp_traces.jsonl", "otlp", pipeline=pipeline)
    import_file(store, FIXTURES / "langsmith_runs.json", "langsmith", pipeline=pipeline)
    trace = "5b8efff798038103d269b633813fc60c"
    by_span = {e.event_id: e for e in store.trajectory(trace).events}
    legacy = by_span[event_id_for(trace, "aa00000000000002")]  # gen_ai.prompt.N / gen_ai.completion.N
    call = legacy.action.tool_calls[0]
    assert call.name == "search_flights" and call.arguments == {"to": "LIS"}
    assert legacy.action.finish_reason == "tool_calls" and legacy.metadata.usage.total_tokens == 70
    assert [m["role"] for m in legacy.observation.data] == ["system", "user"]
    events_style = by_span[event_id_for(trace, "aa00000000000004")]  # gen_ai.user.message / gen_ai.choice events
    assert events_style.action.text == "TP123 leaves at 9:05." and events_style.action.finish_reason == "stop"
    assert [m["role"] for m in events_style.observation.data] == ["system", "user", "tool"]
    current = by_span[event_id_for(trace, "aa00000000000005")]  # the operation.details event
    assert current.observation.data[0]["parts"][0]["content"] == "Book TP123"
    assert current.outcome.status.value == "error" and current.outcome.error.message == "rate limited"
    run = "1d000000-0000-4000-8000-000000000001"
    llm = next(e for e in store.trajectory(run).events if e.kind.value == "model_call")
    assert [m.role for m in llm.observation.messages] == ["system", "user"]  # LangChain's serialized messages
    assert llm.action.tool_calls[0].name == "issue_refund" and llm.action.model == "gpt-4o-mini"


def test_molt_verify_passes_on_an_import(molt_home: Path, pipeline: Any) -> None:
    from typer.testing import CliRunner

    from molt.cli import app

    runner = CliRunner()
    got = runner.invoke(app, ["trajectories", "import", str(FIXTURES / "langfuse_traces.json"), "--format",
                              "langfuse"])
    assert got.exit_code == 0, got.output
    out = " ".join(got.output.split())  # rich wraps at the terminal's width
    assert "9 events of 2 trajectories imported" in out and "3 rewards" in out
    again = runner.invoke(app, ["trajectories", "import", str(FIXTURES / "langfuse_traces.json"), "--format",
                                "langfuse"])
    out = " ".join(again.output.split())
    assert again.exit_code == 0 and "0 events" in out and "9 already stored" in out
    ver = runner.invoke(app, ["verify"])
    assert ver.exit_code == 0 and "2 of 2 trajectories verify" in ver.output


# ----------------------------------------------------------------------------------------- bad input


def _otlp_line(spans: list[dict[str, Any]], tenant: str | None = None) -> str:
    res: dict[str, Any] = {"attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]}
    if tenant:
        res["attributes"].append({"key": "tenant.id", "value": {"stringValue": tenant}})
    return json.dumps({"resourceSpans": [{"resource": res, "scopeSpans": [{"scope": {}, "spans": spans}]}]})


def _span(trace: str, span: str, parent: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"traceId": trace, "spanId": span, **({"parentSpanId": parent} if parent else {}), "name": "step",
            "startTimeUnixNano": "1746090000000000000", "endTimeUnixNano": "1746090001000000000",
            "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "invoke_agent"}}], **extra}


GOOD = "11111111111111111111111111111111"


def _bad_files(tmp: Path) -> dict[str, tuple[Path, str, str]]:
    """{case: (file, format, what the reason says)}; each file also holds a good trajectory."""
    good = _span(GOOD, "0000000000000001")
    lf = json.loads((FIXTURES / "langfuse_traces.json").read_text())
    lf["data"][1]["observations"][0]["type"] = "WIDGET"
    runs = json.loads((FIXTURES / "langsmith_runs.json").read_text())
    runs["runs"][2]["parent_run_id"] = runs["runs"][5]["id"]  # 3 -> 6 -> 5 -> root: fine; now close a loop:
    runs["runs"][4]["parent_run_id"] = runs["runs"][5]["id"]  # 5 -> 6 -> 5
    files = {
        "truncated": ("otlp", (FIXTURES / "otlp_traces.jsonl").read_text()[:-400], "not valid JSON"),
        "cycle": ("langsmith", json.dumps(runs), "cycle"),
        "10MB attribute": ("otlp", _otlp_line([good, {**_span("22" * 16, "0000000000000002"), "attributes": [
            {"key": "gen_ai.input.messages", "value": {"stringValue": "x" * (10 << 20)}}]}]), "record limit"),
        "unknown enum (OTLP status)": ("otlp", _otlp_line([good, _span("33" * 16, "0000000000000003",
                                                                        status={"code": 7})]), "not an OTLP status"),
        "unknown enum (Langfuse type)": ("langfuse", json.dumps(lf), "unknown observation type 'WIDGET'"),
        "unknown enum (LangSmith run_type)": ("langsmith", json.dumps([
            {"id": "r1", "run_type": "chain", "name": "ok", "start_time": "2025-05-01T09:00:00"},
            {"id": "r2", "run_type": "agentic", "name": "x", "trace_id": "r2", "start_time": "2025-05-01T09:00:00"}]),
            "unknown run_type 'agentic'"),
    }
    out = {}
    for case, (fmt, text, why) in files.items():
        p = tmp / f"{case.split()[0]}-{len(out)}.{'jsonl' if fmt == 'otlp' else 'json'}"
        p.write_text(text)
        out[case] = (p, fmt, why)
    return out


def test_bad_input_refuses_the_file_by_default_and_nothing_is_stored(tmp_path: Path, store: Store,
                                                                    pipeline: Any) -> None:
    for case, (path, fmt, why) in _bad_files(tmp_path).items():
        with pytest.raises(ImportRefused) as got:
            import_file(store, path, fmt, pipeline=pipeline)
        assert any(why in r for r in got.value.report.refused), (case, got.value.report.refused)
        assert "Nothing imported" in str(got.value)
        assert (store.count("events"), store.count("rewards"), store.count("quarantine")) == (0, 0, 0), case


def test_per_trajectory_mode_quarantines_refused_rows_with_the_reason(tmp_path: Path, store: Store,
                                                                     pipeline: Any) -> None:
    files = _bad_files(tmp_path)
    path, _, why = files["unknown enum (Langfuse type)"]
    rep = import_file(store, path, "langfuse", pipeline=pipeline, mode="per-trajectory")
    assert rep.trajectories == 1 and rep.imported == 7 and len(rep.refused) == 1 and why in rep.refused[0]
    assert store.trajectory_ids() == ["7f3a2c1e-5b4d-4e8f-9a01-2b3c4d5e6f70"]
    q = store.table("quarantine").to_arrow().to_pylist()
    # the refused row and the rest of its trajectory, each with the reason; the source record is not kept
    assert len(q) == 2 and all(r["stage"] == "import" and r["record"] is None for r in q)
    assert any(why in r["reason"] for r in q) and any("another row of its trajectory" in r["reason"] for r in q)
    path, _, why = files["10MB attribute"]
    rep = import_file(store, path, "otlp", pipeline=pipeline, mode="per-trajectory")
    assert rep.trajectories == 1 and store.verify(GOOD).ok and any(why in r for r in rep.refused)
    # a truncated line costs that line in per-trajectory mode; a file that is not JSON at all is refused whole
    path, _, why = files["truncated"]
    rep = import_file(store, path, "otlp", pipeline=pipeline, mode="per-trajectory")
    assert rep.imported == 2 and any(why in r for r in rep.refused)  # the first line's two spans
    assert any(why in r for r in store.table("quarantine").to_arrow().column("reason").to_pylist())
    broken = tmp_path / "broken.json"
    broken.write_text('{"data": [{"id": "t1", "observations": [')
    with pytest.raises(MoltError, match="truncated export cannot be imported"):
        import_file(store, broken, "langfuse", pipeline=pipeline, mode="per-trajectory")


def test_a_file_mixing_tenants_needs_a_key(tmp_path: Path, store: Store, pipeline: Any) -> None:
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(_otlp_line([_span("44" * 16, "0000000000000004")], tenant="acme") + "\n"
                     + _otlp_line([_span("55" * 16, "0000000000000005")], tenant="globex") + "\n")
    for mode in ("all-or-nothing", "per-trajectory"):
        with pytest.raises(ImportRefused, match="mixes 2 tenants"):
            import_file(store, mixed, "otlp", pipeline=pipeline, mode=mode)  # type: ignore[arg-type]
    assert store.count("events") == 0
    # with acme's key: acme's rows are imported under acme, globex's row is refused with the reason
    from molt.capture.tenancy import TrajectoryNamespace, store_tenant

    ns = TrajectoryNamespace(store_tenant(store), multi_tenant=lambda: True)
    with pytest.raises(ImportRefused, match="names tenant 'globex'"):
        import_file(store, mixed, "otlp", pipeline=pipeline, tenant_id="acme", namespace=ns)
    rep = import_file(store, mixed, "otlp", pipeline=pipeline, tenant_id="acme", namespace=ns, mode="per-trajectory")
    assert rep.imported == 1 and len(rep.refused) == 1
    (tid,) = store.trajectory_ids()
    assert tid != "44" * 16 and tid.startswith("44" * 16 + "~")  # namespaced within acme
    assert store.trajectory(tid).events[0].metadata.tenant_id == "acme"
