"""The OpenTelemetry span processor (``MoltSpanProcessor``) passes the adapter conformance suite.

The "framework" is the OpenTelemetry SDK itself: the scripted agent is a home-grown orchestration
instrumented by hand with GenAI-convention spans (an agent span, a chat asking for ``lookup`` and
``explode``, the two tools — ``explode`` raising — and a last chat answering), the way a stack without
a Molt adapter exports its traces.
"""

from __future__ import annotations

import json
from importlib import metadata
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Status, StatusCode

from molt.capture import Recorder
from molt.capture.otlp import MoltSpanProcessor
from molt.testing import AdapterCapabilities, AdapterConformanceSuite, Script, huge_blob

_SDK = "opentelemetry-sdk"


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "content": text}


def _run(handle: MoltSpanProcessor | None, script: Script) -> str:
    provider = TracerProvider()
    if handle is not None:
        provider.add_span_processor(handle)
    tracer = provider.get_tracer(_SDK, metadata.version(_SDK))
    marker = script.marker
    request = [{"role": "user", "parts": [_text_part(f"help with {marker}")]}]
    try:
        with tracer.start_as_current_span("invoke_agent scripted") as agent:
            agent.set_attributes({"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "scripted"})
            with tracer.start_as_current_span("chat scripted-model") as chat:
                calls = [{"type": "tool_call", "id": "call_ok", "name": "lookup", "arguments": {"query": marker}},
                         {"type": "tool_call", "id": "call_bad", "name": "explode", "arguments": {"reason": marker}}]
                chat.set_attributes({
                    "gen_ai.operation.name": "chat", "gen_ai.request.model": "scripted-model",
                    "gen_ai.usage.input_tokens": 20, "gen_ai.usage.output_tokens": 6,
                    "gen_ai.input.messages": json.dumps(request),
                    "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": calls}]),
                })
            found = f"found {marker}"
            if script.huge_output:
                found += " " + "x" * 2_500_000 + " " + huge_blob()
            with tracer.start_as_current_span("execute_tool lookup") as tool:
                tool.set_attributes({
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup",
                    "gen_ai.tool.call.id": "call_ok", "gen_ai.tool.call.arguments": json.dumps({"query": marker}),
                    "gen_ai.tool.call.result": json.dumps({"text": found}),
                })
            error = ""
            try:
                with tracer.start_as_current_span("execute_tool explode") as bad:
                    bad.set_attributes({
                        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "explode",
                        "gen_ai.tool.call.id": "call_bad",
                        "gen_ai.tool.call.arguments": json.dumps({"reason": marker}),
                    })
                    raise ValueError(marker)
            except ValueError as exc:  # the agent hands the error to the model and goes on
                error = str(exc)
            answer = f"done: {marker}"
            with tracer.start_as_current_span("chat scripted-model") as chat:
                chat.set_attributes({
                    "gen_ai.operation.name": "chat", "gen_ai.request.model": "scripted-model",
                    "gen_ai.usage.input_tokens": 40, "gen_ai.usage.output_tokens": 3,
                    "gen_ai.input.messages": json.dumps([*request, {"role": "tool", "parts": [_text_part(error)]}]),
                    "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [_text_part(answer)]}]),
                })
            agent.set_status(Status(StatusCode.OK))
    finally:
        if handle is not None:
            handle.force_flush()
    return answer


class TestOtelSpanProcessorConformance(AdapterConformanceSuite):
    adapter = "otlp"
    framework = _SDK
    framework_dist = _SDK
    # no streaming, async, approvals or retrieval in the scripted orchestration; no version hook:
    # spans are read after the fact, there is nothing to intervene in
    capabilities = AdapterCapabilities(streaming=False, async_=False, approvals=False, retrieval=False)

    def make_capture(self, recorder: Recorder, *, strict: bool) -> MoltSpanProcessor:
        return MoltSpanProcessor(recorder, strict=strict)

    def run_scripted_agent(self, handle: Any, script: Script) -> str:
        return _run(handle, script)

    @pytest.mark.xfail(reason="provenance.integration is 'otlp' at molt-core's version (the processor ships in "
                              "molt-core; 'otlp' is not a distribution)", strict=True)
    def test_provenance(self, standard_run: Any) -> None:
        super().test_provenance(standard_run)

    def test_provenance_names_otlp_at_molt_cores_version(self, standard_run: Any) -> None:
        """What the processor writes instead: the SDK and its version as the framework (from the
        instrumentation scope), ``otlp`` at molt-core's version as the integration."""
        sdk, core = metadata.version(_SDK), metadata.version("molt-core")
        for ev in standard_run.all_events:
            p = ev.provenance
            assert (p.framework, p.framework_version) == (_SDK, sdk)
            assert (p.integration, p.integration_version) == ("otlp", core)

    @pytest.mark.xfail(reason="MoltSpanProcessor is an OpenTelemetry SpanProcessor, not an Instrumentor: "
                              "spans are recorded after they end, there is no framework hook to apply a "
                              "version at", strict=True)
    def test_version_hook_is_declared(self, tmp_path: Any) -> None:
        super().test_version_hook_is_declared(tmp_path)
