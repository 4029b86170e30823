"""The governance pipeline on the capture path: policy files, stages, decisions, and bad input.

Troubleshooting: these run the real Recorder (writer thread + spool) into a real LanceDB store; a
failure that says "not delivered" usually means a stage raised outside the pipeline's try block.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from molt.atdp import Consent, Event, EventKind, Generation, Outcome, ToolCall, UserMessage
from molt.capture import Recorder
from molt.errors import GovernanceError
from molt.governance import (
    GovernancePipeline,
    GovernancePolicy,
    GovernedSink,
    KeyRing,
    Reject,
    load_policy_file,
)
from molt.governance.redaction import Redactor, redactors
from molt.governance.stages import stages
from molt.store import Store

POLICY: dict[str, Any] = {
    "name": "test",
    "unknown_tenants": "quarantine",
    "defaults": {"training": {"opt_in": False}},
    "tenants": {
        "acme": {"training": {"opt_in": True, "require_consent": False, "exclude_tools": ["shell*"],
                              "exclude_kinds": ["human_approval"], "exclude_fields": ["hidden.reasoning"]}},
        "globex": {"training": {"opt_in": True}, "retention": {"days": {
            "public": 10, "internal": 5, "confidential": 2, "restricted": 1}}},
    },
}


def _write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def _user(tid: str, text: str, tenant: str | None = "acme", **md: Any) -> Event:
    return Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE, action=UserMessage(content=text),
                 metadata={"tenant_id": tenant, **md})


def _run(store: Store, molt_home: Path, events: list[Event], pipeline: GovernancePipeline) -> Recorder:
    rec = Recorder(GovernedSink(store), spool_dir=molt_home / "spool", pipeline=pipeline)
    for ev in events:
        assert rec.record(ev) is True  # the agent-facing call always returns normally
    assert rec.flush(deliver=True)
    return rec


def _decisions(store: Store) -> dict[str, dict[str, Any]]:
    rows = store.table("governance").search().limit(None).to_arrow().to_pylist()
    return {r["event_id"]: r for r in rows}


def _quarantine(store: Store) -> list[dict[str, Any]]:
    return store.table("quarantine").search().limit(None).to_arrow().to_pylist()


# ------------------------------------------------------------------------------------ policy file


def test_policy_files_load_from_yaml_and_toml(tmp_path: Path) -> None:
    pol = load_policy_file(_write(tmp_path / "g.yaml", POLICY))
    assert pol.for_tenant("acme").training.opt_in and not pol.for_tenant(None).training.opt_in
    assert pol.for_tenant("globex").retention.days["internal"] == 5
    assert pol.for_tenant("acme").retention.days["internal"] == 365  # defaults merge under overrides
    toml = tmp_path / "g.toml"
    toml.write_text('name = "t"\n[tenants.acme.training]\nopt_in = true\nshare_with = ["b"]\n')
    assert load_policy_file(toml).for_tenant("acme").training.share_with == {"b"}
    assert load_policy_file(None) == GovernancePolicy()
    assert pol.fingerprint() == load_policy_file(tmp_path / "g.yaml").fingerprint()


@pytest.mark.parametrize(("text", "field"), [
    ("tenants:\n  acme:\n    training:\n      opt_in: maybe\n", "tenants.acme.training.opt_in"),
    ("defaults:\n  retention:\n    days: {public: -1}\n", "defaults.retention.days"),
    ("tenants:\n  acme:\n    trainign: {}\n", "tenants.acme.trainign"),
    ("pipeline: [validate, telepathy]\n", "pipeline"),
    ("tenants:\n  acme:\n    training:\n      exclude_fields: [metadata.tenant_id]\n",
     "tenants.acme.training.exclude_fields"),
    ("defaults:\n  redaction:\n    policy: {mode: pseudonym}\n", "defaults.redaction.policy"),
    ("defaults:\n  classification:\n    escalate: {NOT_A_TYPE: restricted}\n", "defaults.classification.escalate"),
    ("unknown_tenants: sometimes\n", "unknown_tenants"),
    ("tenants: [acme]\n", "tenants"),
    ("defaults: {training: {quality: {min_events: 5, max_events: 2}}}\n", "defaults.training.quality"),
])
def test_a_malformed_policy_file_names_the_file_and_the_field(tmp_path: Path, text: str, field: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(GovernanceError) as err:
        load_policy_file(path)
    assert str(path) in str(err.value) and f"'{field}" in str(err.value), str(err.value)


def test_unparseable_and_missing_policy_files_are_clear_errors(tmp_path: Path) -> None:
    (tmp_path / "b.yaml").write_text("tenants: {acme: [unclosed\n")
    with pytest.raises(GovernanceError, match=r"b\.yaml is not valid YAML"):
        load_policy_file(tmp_path / "b.yaml")
    (tmp_path / "b.toml").write_text("[tenants\n")
    with pytest.raises(GovernanceError, match=r"b\.toml is not valid TOML"):
        load_policy_file(tmp_path / "b.toml")
    with pytest.raises(GovernanceError, match="does not exist"):
        load_policy_file(tmp_path / "nope.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(GovernanceError, match="mapping at the top level"):
        load_policy_file(tmp_path / "list.yaml")


# ------------------------------------------------------------------------------------ the pipeline


def test_events_are_redacted_before_sealing_and_decisions_stored_with_them(store: Store, molt_home: Path) -> None:
    pipe = GovernancePipeline(GovernancePolicy.model_validate(POLICY))
    tid = "t-redact"
    evs = [
        _user(tid, "Hi, I am Ana Lima, write to ana.lima@example.org", consent={"training": True}),
        _user(tid, "my password=hunter2hunter2 please reset"),
        Event(trajectory_id=tid, kind=EventKind.TOOL_CALL, metadata={"tenant_id": "acme"},
              action=ToolCall(tool_name="shell_exec", arguments={"cmd": "ls"}), outcome=Outcome(output="ok")),
        _user(tid, "do not train on me", consent={"training": False, "retention_days": 7}),
    ]
    rec = _run(store, molt_home, evs, pipe)
    traj = store.trajectory(tid)
    text = orjson.dumps([e.model_dump(mode="json") for e in traj.events])
    assert b"ana.lima@example.org" not in text and b"hunter2hunter2" not in text
    assert b"<EMAIL_ADDRESS_1>" in text
    assert store.verify(tid).ok  # sealed after redaction: the chain covers what is stored
    d = _decisions(store)
    by_seq = [d[e.event_id] for e in traj.events]
    assert orjson.loads(by_seq[0]["redacted_types"])["EMAIL_ADDRESS"] == 1  # types and counts, no values
    assert by_seq[0]["redacted_fields"] == ["action.content"] and by_seq[0]["eligible"] is True
    assert by_seq[0]["policy"].startswith("test@") and by_seq[0]["retention_class"] == "internal"
    # a secret raises the classification, which makes the event ineligible and shortens retention
    assert traj.events[1].metadata.classification.value == "restricted"
    assert by_seq[1]["escalated_by"] == ["PASSWORD"] and by_seq[1]["retention_days"] == 30
    assert by_seq[1]["eligible"] is False and "classification: restricted" in by_seq[1]["reasons"][0]
    assert by_seq[2]["reasons"] == ["tool: calls to 'shell_exec' are excluded"]
    assert by_seq[3]["reasons"] == ["consent: training consent was refused"]
    assert by_seq[3]["retention_class"] == "internal+consent" and by_seq[3]["retention_days"] == 7
    assert by_seq[0]["excluded_fields"] == ["hidden.reasoning"]
    assert pipe.stats.processed == 4 and pipe.stats.accepted == 4 and pipe.stats.eligible == 1
    assert pipe.stats.events_per_s > 0
    rec.close()


def test_writer_tenant_comes_from_the_api_key(store: Store, molt_home: Path) -> None:
    ring = KeyRing.from_mapping({"w-acme": ("acme", "agent_writer"), "r-acme": ("acme", "reader")})
    pipe = GovernancePipeline(GovernancePolicy.model_validate(POLICY), keyring=ring, api_key="w-acme")
    evs = [_user("t-k", "no tenant named", tenant=None), _user("t-k", "claims globex", tenant="globex")]
    rec = _run(store, molt_home, evs, pipe)
    assert [e.metadata.tenant_id for e in store.trajectory("t-k").events] == ["acme"]
    (q,) = _quarantine(store)
    assert q["stage"] == "authenticate" and "belongs to tenant 'acme'" in q["reason"]
    rec.close()
    reader = GovernancePipeline(GovernancePolicy(), keyring=ring, api_key="r-acme")
    assert "may not write" in (reader.auth_error or "")


def test_pipeline_as_configured_runs_only_its_stages(store: Store, molt_home: Path) -> None:
    pol = GovernancePolicy.model_validate({"pipeline": ["validate", "authenticate", "retention"]})
    rec = _run(store, molt_home, [_user("t-s", "mail ana@example.org")], GovernancePipeline(pol))
    (row,) = _decisions(store).values()
    assert row["stages"] == ["validate", "authenticate", "retention"] and row["eligible"] is None
    assert "ana@example.org" in store.trajectory("t-s").events[0].action.content  # type: ignore[union-attr]
    rec.close()


# ------------------------------------------------------------------------------------ bad input


class _Boom(Redactor):
    """A redactor whose detectors raise on some texts."""

    def detect(self, text: str) -> list[Any]:
        if "boom" in text:
            raise RuntimeError("detector exploded")
        return super().detect(text)


@pytest.fixture
def boom_redactor() -> Any:
    redactors.register("test-boom", _Boom)
    yield "test-boom"
    redactors.unregister("test-boom")


def test_a_redactor_that_raises_quarantines_the_record_and_the_rest_flows(
        store: Store, molt_home: Path, boom_redactor: str) -> None:
    pol = GovernancePolicy.model_validate({"defaults": {"redaction": {"redactor": boom_redactor}}})
    evs = [_user("t-b", "fine, mail ana@example.org"), _user("t-b", "boom ana@example.org"), _user("t-b", "fine")]
    rec = _run(store, molt_home, evs, GovernancePipeline(pol))
    assert [e.seq for e in store.trajectory("t-b").events] == [0, 1] and store.verify("t-b").ok
    (q,) = _quarantine(store)
    assert q["stage"] == "redact" and "detector exploded" in q["reason"] and q["event_id"] == evs[1].event_id
    # the record could not be redacted, so none of it is kept: unredacted data is never stored
    assert q["record"] is None and "never stored" in q["reason"]
    assert not any(b"ana@example.org" in (row["record"] or b"") for row in _quarantine(store))
    assert rec.stats.quarantined == 1 and rec.stats.delivered == 3
    rec.close()
    # nor anywhere else: no byte of the store's tables or the spool holds the raw address
    files = [p for p in molt_home.rglob("*") if p.is_file()]
    assert files and not [p for p in files if b"ana@example.org" in p.read_bytes()]


def test_a_malformed_policy_file_quarantines_everything_but_never_breaks_the_agent(
        store: Store, molt_home: Path, tmp_path: Path) -> None:
    bad = tmp_path / "g.yaml"
    bad.write_text("tenants:\n  acme:\n    training:\n      opt_in: perhaps\n")
    with pytest.raises(GovernanceError, match=r"tenants\.acme\.training\.opt_in"):
        GovernancePipeline.from_file(bad)
    pipe = GovernancePipeline.from_file(bad, strict=False)
    rec = _run(store, molt_home, [_user("t-p", "hello"), _user("t-p", "again")], pipe)
    assert store.count() == 0
    qs = _quarantine(store)
    assert len(qs) == 2 and all(str(bad) in q["reason"] and "opt_in" in q["reason"] for q in qs)
    assert all(q["record"] for q in qs)
    rec.close()


def test_an_unknown_tenant_key_or_tenant_is_quarantined_with_the_reason(store: Store, molt_home: Path) -> None:
    ring = KeyRing.from_mapping({"w-acme": ("acme", "agent_writer")})
    pipe = GovernancePipeline(GovernancePolicy.model_validate(POLICY), keyring=ring, api_key="sk-wrong")
    rec = _run(store, molt_home, [_user("t-u", "hello")], pipe)
    rec.close()
    (q,) = _quarantine(store)
    assert q["stage"] == "authenticate" and "API key was rejected" in q["reason"]
    rec = Recorder(GovernedSink(store), spool_dir=molt_home / "spool2",
                   pipeline=GovernancePipeline(GovernancePolicy.model_validate(POLICY)))
    assert rec.record(_user("t-u2", "hello", tenant="initech")) and rec.flush(deliver=True)
    assert "tenant 'initech' has no section" in _quarantine(store)[-1]["reason"]
    rec.close()


def test_oversized_payloads_are_quarantined_with_the_record(store: Store, molt_home: Path) -> None:
    pol = GovernancePolicy.model_validate({"defaults": {"limits": {"max_event_bytes": 4096,
                                                                   "quarantine_record_bytes": 40_000}}})
    evs = [_user("t-o", "x" * 10_000), _user("t-o", "y" * 100_000), _user("t-o", "small")]
    rec = _run(store, molt_home, evs, GovernancePipeline(pol))
    assert store.count() == 1
    qs = sorted(_quarantine(store), key=lambda q: len(q["reason"]))
    assert all(q["stage"] == "validate" and "max_event_bytes=4,096" in q["reason"] for q in qs)
    assert qs[0]["record"] is not None and b"x" * 10_000 in qs[0]["record"]
    assert qs[1]["record"] is None and "not kept" in qs[1]["reason"]
    rec.close()


def test_a_stage_that_raises_fails_closed(store: Store, molt_home: Path) -> None:
    class Buggy:
        name = "buggy"

        def __init__(self, pipeline: Any) -> None:
            pass

        def run(self, ctx: Any) -> None:
            if "bug" in str(ctx.event.action):
                raise ZeroDivisionError("oops")
            if "veto" in str(ctx.event.action):
                raise Reject("buggy", "vetoed by policy")

    stages.register("buggy", Buggy)  # type: ignore[arg-type]
    try:
        pol = GovernancePolicy.model_validate({"pipeline": ["validate", "authenticate", "buggy", "redact"]})
        evs = [_user("t-x", "bug here"), _user("t-x", "veto this"), _user("t-x", "ok")]
        rec = _run(store, molt_home, evs, GovernancePipeline(pol))
    finally:
        stages.unregister("buggy")
    reasons = sorted(q["reason"] for q in _quarantine(store))
    assert reasons[0].startswith("the buggy stage failed: ZeroDivisionError") and reasons[1].startswith("vetoed")
    assert store.count() == 1
    rec.close()


def test_a_hook_that_raises_outside_the_pipeline_is_quarantined_by_the_recorder(
        store: Store, molt_home: Path) -> None:
    class Broken:
        def process(self, event: Event) -> Any:
            raise RuntimeError("hook down")

    rec = Recorder(GovernedSink(store), spool_dir=molt_home / "spool", pipeline=Broken())
    assert rec.record(_user("t-h", "hello")) and rec.flush(deliver=True)
    (q,) = _quarantine(store)
    assert q["stage"] == "pipeline" and "hook down" in q["reason"] and b"hello" in q["record"]
    rec.close()


def test_token_traces_are_dropped_when_a_generation_was_redacted(store: Store, molt_home: Path) -> None:
    ev = Event(trajectory_id="t-g", kind=EventKind.MODEL_CALL, metadata={"tenant_id": "acme"},
               action=Generation(text="Sure Ana Lima, I emailed ana@example.org",
                                 tokens={"prompt_ids": [1, 2], "completion_ids": [3, 4]}))
    rec = _run(store, molt_home, [ev], GovernancePipeline(GovernancePolicy.model_validate(POLICY)))
    stored = store.trajectory("t-g").events[0]
    assert stored.action.tokens is None  # type: ignore[union-attr]
    assert next(iter(_decisions(store).values()))["token_trace_dropped"] is True
    rec.close()


def test_consent_subject_and_classification_flow_into_the_decision(store: Store, molt_home: Path) -> None:
    ev = _user("t-c", "hello", consent=Consent(training=True, subject_id="subj-1"), classification="public")
    pol = GovernancePolicy.model_validate({**POLICY, "defaults": {"classification": {"floor": "internal"}}})
    rec = _run(store, molt_home, [ev], GovernancePipeline(pol))
    (row,) = _decisions(store).values()
    assert row["subject_id"] == "subj-1" and row["classification"] == "internal"
    assert row["classification_in"] == "public" and row["escalated_by"] == ["floor:internal"]
    rec.close()


def test_the_documented_example_policy_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import textwrap

    import molt.governance.policy as policy_module

    doc = policy_module.__doc__ or ""
    block = doc.split("::\n\n", 1)[1].split("\n\n", 1)[0]
    path = tmp_path / "example.yaml"
    path.write_text(textwrap.dedent(block))
    monkeypatch.setenv("MOLT_PSEUDONYM_KEY", "a-master-secret-of-32-characters!")
    pol = load_policy_file(path)
    assert pol.shares("acme", "globex") and pol.shares("globex", "acme")
    assert pol.for_tenant("globex").redaction_policy.mode == "pseudonym"
    assert pol.for_tenant("acme").training.tool_excluded("payments.refund")
