"""molt-openai-agents beyond the conformance suite: handoffs, guardrails, MCP tool listings and other
SDK spans, the framework check and the README quickstart."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent,
    GuardrailFunctionOutput,
    InputGuardrailTripwireTriggered,
    Runner,
    input_guardrail,
    set_trace_processors,
)
from agents.tracing import custom_span, function_span, mcp_tools_span, trace

from molt.atdp import EventKind, OutcomeStatus
from molt.capture import MemorySink, Recorder
from molt_openai_agents import MoltTracingProcessor

from ..openai_stub import stub_server
from .scripted import model, run_config, worker

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def srv() -> Iterator[Any]:
    with stub_server() as s:
        yield s


@pytest.fixture
def proc(tmp_path: Path) -> Iterator[MoltTracingProcessor]:
    sink = MemorySink()
    # raw capture: what the adapter maps, value by value (governance would redact some of it)
    rec = Recorder(sink, spool_dir=tmp_path / "spool", fsync="never", flush_interval_s=0.0, pipeline=None)
    p = MoltTracingProcessor(rec, tenant_id="acme", strict=True)
    p.sink_ = sink  # type: ignore[attr-defined]
    set_trace_processors([p])
    yield p
    set_trace_processors([])
    rec.close()


def _events(p: MoltTracingProcessor) -> list[Any]:
    assert p.flush(10, deliver=True)
    sink = p.sink_  # type: ignore[attr-defined]
    tids = sorted({r.x["trajectory_id"] if hasattr(r, "x") else r["x"]["trajectory_id"] for r in sink.events.values()})
    return [e for t in tids for e in sink.trajectory_events(t)]


@input_guardrail
async def polite(ctx: Any, agent: Any, text: Any) -> GuardrailFunctionOutput:
    return GuardrailFunctionOutput(output_info={"rude": "rude" in str(text)}, tripwire_triggered="rude" in str(text))


def test_handoff_and_guardrail(srv: Any, proc: MoltTracingProcessor) -> None:
    triage = Agent(
        name="triage",
        instructions="triage",
        handoffs=[worker(srv.url)],
        model=model(srv.url),
        input_guardrails=[polite],
    )
    result = Runner.run_sync(triage, "help kappa", run_config=run_config("kappa"))
    assert result.final_output == "done: kappa"
    evs = _events(proc)
    assert len({e.trajectory_id for e in evs}) == 1 and {e.metadata.tenant_id for e in evs} == {"acme"}
    steps = {e.action.step_type: e for e in evs if e.kind == EventKind.AGENT_STEP}
    assert steps["handoff"].name == "triage -> worker"
    assert steps["guardrail"].name == "polite" and steps["guardrail"].outcome.status == OutcomeStatus.OK
    agents = [e.name for e in evs if e.kind == EventKind.AGENT_STEP and e.action.step_type == "agent"]
    assert sorted(agents) == ["triage", "worker"]
    tools = [e for e in evs if e.kind == EventKind.TOOL_CALL]
    assert {t.action.call_id for t in tools} == {"call-kappa-2", "call-kappa-3"}


def test_tripped_guardrail_is_denied(srv: Any, proc: MoltTracingProcessor) -> None:
    agent = worker(srv.url, input_guardrails=[polite])
    with pytest.raises(InputGuardrailTripwireTriggered):
        Runner.run_sync(agent, "help rude lambda", run_config=run_config("lambda"))
    evs = _events(proc)
    [g] = [e for e in evs if e.kind == EventKind.AGENT_STEP and e.action.step_type == "guardrail"]
    assert g.outcome.status == OutcomeStatus.DENIED
    assert proc.stats.open_spans == 0


def test_sdk_spans_without_a_model(proc: MoltTracingProcessor) -> None:
    """MCP tool listings, custom spans and MCP function calls, made with the SDK's own span API."""
    with trace("manual", group_id="g-1"):
        with mcp_tools_span(server="files", result=["read", "write"]):
            pass
        with custom_span("plan", data={"steps": 3}), function_span("read", input='{"path": "a.txt"}') as fs:
            fs.span_data.output = "contents"
            fs.span_data.mcp_data = {"server": "files"}
    evs = _events(proc)
    by_name = {e.name: e for e in evs}
    assert by_name["mcp:files"].action.step_type == "mcp.list_tools"
    assert by_name["mcp:files"].outcome.output == {"tools": ["read", "write"]}
    assert by_name["plan"].outcome.output == {"steps": 3}
    read = by_name["read"]
    assert read.action.arguments == {"path": "a.txt"} and read.metadata.tags == {"mcp": "1"}
    assert read.parent_id == by_name["plan"].event_id
    assert by_name["manual"].parent_id is None and {e.session_id for e in evs} == {"g-1"}


def test_a_span_error_of_any_shape_is_recorded_as_an_error(proc: MoltTracingProcessor) -> None:
    """The SDK's SpanError is {message, data}; set_error() given something else (a string, a number)
    still yields the span's event with an error outcome, and the mapper raises nothing (strict)."""
    with trace("errors"):
        for i, err in enumerate([{"message": "Tool failed", "data": {"error": "boom"}}, "plain text", 1.5]):
            with custom_span(f"step-{i}") as sp:
                sp.set_error(err)  # type: ignore[arg-type]
    by_name = {e.name: e for e in _events(proc)}
    outcomes = [by_name[f"step-{i}"].outcome for i in range(3)]
    assert all(o.status == OutcomeStatus.ERROR for o in outcomes)
    assert (outcomes[0].error.type, outcomes[0].error.message) == ("Tool failed", "boom")
    assert outcomes[1].error.message == "plain text" and outcomes[2].error.message == "1.5"


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no str")

    __repr__ = __str__


def test_span_data_of_the_wrong_shape_costs_its_text_not_the_event(proc: MoltTracingProcessor) -> None:
    """Objects that cannot print themselves (a custom span's name, a span error, a handoff's agents)
    and fields of another type than the SDK declares (usage, model_config, input, output) are
    recorded as far as they can be read; strict mode turns a mapper exception into a failure."""
    from agents.tracing import generation_span, handoff_span

    odd = _Unprintable()
    with trace("odd shapes"):
        with custom_span("named oddly") as sp:
            sp.span_data.name = odd  # type: ignore[assignment]
            sp.set_error(odd)  # type: ignore[arg-type]
        with handoff_span(from_agent=odd, to_agent="billing"):  # type: ignore[arg-type]
            pass
        with generation_span(input="not a list", output=[{"content": odd}], model=odd,  # type: ignore[arg-type]
                             model_config=["not", "a", "dict"], usage={"input_tokens": -3,  # type: ignore[arg-type]
                                                                      "output_tokens": "7"}):
            pass
    evs = _events(proc)
    assert proc.stats.errors == 0 and proc.stats.open_spans == 0
    by_kind: dict[str, list[Any]] = {}
    for e in evs:
        by_kind.setdefault(e.kind.value, []).append(e)
    custom = next(e for e in evs if e.name == "<unprintable _Unprintable>" and e.kind == EventKind.AGENT_STEP
                  and e.action.step_type == "custom")
    assert custom.outcome.status == OutcomeStatus.ERROR and custom.outcome.error.message == "<unprintable _Unprintable>"
    handoff = next(e for e in evs if e.kind == EventKind.AGENT_STEP and e.action.step_type == "handoff")
    assert handoff.name == "<unprintable _Unprintable> -> billing"
    [gen] = by_kind["model_call"]
    assert gen.action.text == "<unprintable _Unprintable>" and gen.action.sampling is None
    assert gen.metadata.usage is None or (gen.metadata.usage.input_tokens is None
                                          and gen.metadata.usage.output_tokens is None)


def test_framework_version_is_checked_at_import() -> None:
    code = (
        "import importlib.metadata as m; v = m.version\n"
        "m.version = lambda d: '0.1.0' if d == 'openai-agents' else v(d)\n"
        "try:\n    import molt_openai_agents\n"
        "except Exception as e:\n    print(type(e).__name__, e, *getattr(e, '__notes__', []), sep='|')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    assert out.startswith("AdapterError|molt-openai-agents needs openai-agents>=0.20, but found 0.1.0.")

