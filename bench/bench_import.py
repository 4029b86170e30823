"""Import throughput: a 100k-span OTLP file through ``molt trajectories import --format otlp`` on one core,
beside the same file posted to the gateway's ``/v1/traces``.

    python bench/bench_import.py [--spans 100000] [--spans-per-request 500] [--out bench/out/import.json]

The file is OTLP/JSON lines as an OpenTelemetry collector's file exporter writes them (one
``ExportTraceServiceRequest`` per line, ``--spans-per-request`` spans each): agent runs of 10 spans
each — an ``invoke_agent`` root, chat spans (half in the current ``gen_ai.input.messages`` form, half
in the older ``gen_ai.prompt.N`` / ``gen_ai.completion.N`` attributes, a user message with an e-mail
address and a phone number to redact), ``execute_tool`` spans with arguments and results.

What is timed, both with the default governance pipeline (redaction, classification, eligibility,
retention) into a fresh LanceDB store:

- ``import``: :func:`molt.interop.import_file` in a process pinned to one core (``sched_setaffinity``):
  read + decode + map + check (sizes, tenants, cycles) + govern + seal + write, all or nothing;
- ``gateway /v1/traces``: the gateway as ``molt serve`` builds it (in-process Recorder, the default
  policy, a stub backend) in a server process pinned to one core; this process posts the same lines
  (from another core when there is one) one request at a time, and the clock stops when the store holds
  every event. The server's time is the same work plus HTTP and the Recorder's spool (fsync).

Prints one line per path (events/s, seconds) and the ratio; ``--out`` writes them as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
KEY = "sk-bench-writer"
SPANS_PER_RUN = 10


def _attr(k: str, v: Any) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"key": k, "value": {"boolValue": v}}
    if isinstance(v, int):
        return {"key": k, "value": {"intValue": str(v)}}
    return {"key": k, "value": {"stringValue": v}}


def _run_spans(i: int, rng: random.Random, t0: int) -> list[dict[str, Any]]:
    trace = f"{rng.getrandbits(128):032x}"
    root = f"{rng.getrandbits(64):016x}"
    start = t0 + i * 5_000_000_000
    order = f"A-{rng.randint(100, 99999)}"
    user = (f"Where is my order {order}? Write to customer{i}@example.com or call +1 415 555 "
            f"{rng.randint(1000, 9999)}.")
    spans = [{"traceId": trace, "spanId": root, "name": "invoke_agent support", "kind": 1,
              "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + 4_000_000_000),
              "attributes": [_attr("gen_ai.operation.name", "invoke_agent"), _attr("gen_ai.agent.name", "support")],
              "status": {"code": 1}}]
    for k in range(1, SPANS_PER_RUN):
        sid = f"{rng.getrandbits(64):016x}"
        s0 = start + k * 300_000_000
        base = {"traceId": trace, "spanId": sid, "parentSpanId": root, "startTimeUnixNano": str(s0),
                "endTimeUnixNano": str(s0 + 250_000_000), "status": {"code": 1}}
        if k % 2:  # a chat span
            if k % 4 == 1:
                attrs = [_attr("gen_ai.input.messages", json.dumps([
                            {"role": "system", "parts": [{"type": "text", "content": "You are a support agent."}]},
                            {"role": "user", "parts": [{"type": "text", "content": user}]}])),
                         _attr("gen_ai.output.messages", json.dumps([{"role": "assistant", "parts": [
                             {"type": "tool_call", "id": f"call_{k}", "name": "lookup_order",
                              "arguments": {"order_id": order}}]}]))]
            else:
                attrs = [_attr("gen_ai.prompt.0.role", "user"), _attr("gen_ai.prompt.0.content", user),
                         _attr("gen_ai.completion.0.role", "assistant"),
                         _attr("gen_ai.completion.0.content", f"Order {order} shipped yesterday."),
                         _attr("gen_ai.completion.0.finish_reason", "stop")]
            attrs += [_attr("gen_ai.operation.name", "chat"), _attr("gen_ai.request.model", "gpt-4o-mini"),
                      _attr("gen_ai.usage.input_tokens", 40 + k), _attr("gen_ai.usage.output_tokens", 12)]
            spans.append({**base, "name": "chat gpt-4o-mini", "kind": 3, "attributes": attrs})
        else:
            spans.append({**base, "name": "execute_tool lookup_order", "kind": 1, "attributes": [
                _attr("gen_ai.operation.name", "execute_tool"), _attr("gen_ai.tool.name", "lookup_order"),
                _attr("gen_ai.tool.call.id", f"call_{k - 1}"),
                _attr("gen_ai.tool.call.arguments", json.dumps({"order_id": order})),
                _attr("gen_ai.tool.call.result", json.dumps({"state": "shipped", "carrier": "DHL"}))]})
    return spans


def write_file(path: Path, spans: int, per_request: int, seed: int = 7) -> list[bytes]:
    """The OTLP/JSON lines file; returns its lines (the gateway run posts them)."""
    rng = random.Random(seed)
    t0 = 1_746_090_000_000_000_000
    all_spans: list[dict[str, Any]] = []
    for i in range(spans // SPANS_PER_RUN):
        all_spans += _run_spans(i, rng, t0)
    res = {"attributes": [_attr("service.name", "support-agent")]}
    scope = {"name": "opentelemetry.instrumentation.openai_v2", "version": "2.1b0"}
    lines = [json.dumps({"resourceSpans": [{"resource": res, "scopeSpans": [
        {"scope": scope, "spans": all_spans[i:i + per_request]}]}]}).encode()
        for i in range(0, len(all_spans), per_request)]
    path.write_bytes(b"\n".join(lines) + b"\n")
    return lines


def pin(cpu: int) -> None:
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setaffinity(0, {cpu})


def run_import(path: Path, home: Path, cpu: int) -> dict[str, Any]:
    """Child process: the import on one core."""
    pin(cpu)
    from molt.governance.pipeline import GovernancePipeline
    from molt.interop import import_file
    from molt.store import Store

    pipeline = GovernancePipeline()
    pipeline.warm()  # lexicon loading is a one-off per process, not throughput
    store = Store.open(home / "store", auto_compact=False)
    t = time.perf_counter()
    rep = import_file(store, path, "otlp", pipeline=pipeline)
    dt = time.perf_counter() - t
    return {"events": rep.imported, "seconds": dt, "redacted": rep.redacted, "refused": len(rep.refused)}


def serve(port: int, home: str, cpu: int) -> None:
    """Child process: the gateway as `molt serve` builds it, pinned to one core."""
    pin(cpu)
    import uvicorn

    from molt.backends import StubBackend
    from molt.gateway import RoutingTable, VersionSpec, create_app
    from molt.gateway.cli import build_gateway, tune_process
    from molt.governance.access import KeyRing

    backend = StubBackend("stub")
    gw, recorder, store = build_gateway(backend, model="stub", record=True, home=Path(home), capture_process=False,
                                        governance="default")
    gw.keyring = KeyRing.from_mapping({KEY: ("bench", "agent_writer")})
    gw.router.replace(RoutingTable.single("stub", VersionSpec(version="stub@base", backends=(backend.name,))))
    warm = getattr(recorder.pipeline, "warm", None)
    if warm is not None:
        warm()
    tune_process()
    try:
        uvicorn.run(create_app(gw), host="127.0.0.1", port=port, log_level="warning", access_log=False)
    finally:
        recorder.close(timeout=60)
        store.close()


def run_gateway(lines: list[bytes], home: Path, cpu: int, client_cpu: int, expected: int) -> dict[str, Any]:
    import httpx

    from molt.gateway.loopback import free_port
    from molt.store import Store

    port = free_port("127.0.0.1")
    log = tempfile.TemporaryFile()  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, __file__, "--serve", str(port), "--home", str(home), "--cpu", str(cpu)],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    pin(client_cpu)
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    try:
        deadline = time.monotonic() + 900  # the governance lexicons load before it serves
        with httpx.Client(timeout=600) as client:
            while True:
                if proc.poll() is not None:
                    log.seek(0)
                    raise RuntimeError(f"the gateway exited:\n{log.read().decode(errors='replace')[-3000:]}")
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(f"http://127.0.0.1:{port}/health", headers=headers).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError("the gateway did not start")
                time.sleep(0.3)
            t = time.perf_counter()
            rejected = 0
            for body in lines:
                r = client.post(f"http://127.0.0.1:{port}/v1/traces", content=body, headers=headers)
                if r.status_code != 200:
                    raise RuntimeError(f"/v1/traces answered {r.status_code}: {r.text[:500]}")
                rejected += int((r.json().get("partialSuccess") or {}).get("rejectedSpans") or 0)
            posted = time.perf_counter() - t
        store = Store.open(home / "store", auto_compact=False)
        stored = 0
        while time.perf_counter() - t < 1800:
            stored = store.count("events")
            if stored >= expected - rejected:
                break
            time.sleep(0.5)
        dt = time.perf_counter() - t
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
    return {"events": stored, "seconds": dt, "posted_seconds": posted, "rejected": rejected}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spans", type=int, default=100_000)
    ap.add_argument("--spans-per-request", type=int, default=500)
    ap.add_argument("--cpu", type=int, default=0, help="the core the timed process is pinned to")
    ap.add_argument("--only", choices=["import", "gateway"], help="time one path (a rerun of the other's half)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--home", help=argparse.SUPPRESS)
    ap.add_argument("--import-file", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve, args.home, args.cpu)
        return
    if args.import_file:
        print(json.dumps(run_import(Path(args.import_file), Path(args.home), args.cpu)))
        return
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
    cpu = args.cpu if args.cpu in cpus else cpus[0]
    client_cpu = next((c for c in cpus if c != cpu), cpu)
    with tempfile.TemporaryDirectory(prefix="molt-bench-import-") as tmp:
        path = Path(tmp) / "traces.jsonl"
        lines = write_file(path, args.spans, args.spans_per_request)
        n = sum(1 for _ in range(args.spans // SPANS_PER_RUN)) * SPANS_PER_RUN
        print(f"{n:,} spans in {len(lines):,} requests, {path.stat().st_size / 1e6:.1f} MB (OTLP/JSON lines); "
              f"timed process on core {cpu}, client on core {client_cpu}", flush=True)
        imp = gw = None
        if args.only in (None, "import"):
            out = subprocess.run([sys.executable, __file__, "--import-file", str(path), "--home", tmp + "/imp",
                                  "--cpu", str(cpu)], capture_output=True, text=True, check=True)
            imp = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"import (molt trajectories import --format otlp): {imp['events']:,} events in "
                  f"{imp['seconds']:.1f} s = {imp['events'] / imp['seconds']:,.0f} events/s", flush=True)
        if args.only in (None, "gateway"):
            gw = run_gateway(lines, Path(tmp) / "gw", cpu, client_cpu, n)
            print(f"gateway /v1/traces: {gw['events']:,} events stored in {gw['seconds']:.1f} s = "
                  f"{gw['events'] / gw['seconds']:,.0f} events/s (posting took {gw['posted_seconds']:.1f} s)",
                  flush=True)
        ratio = None
        if imp and gw:
            ratio = (imp["events"] / imp["seconds"]) / (gw["events"] / gw["seconds"])
            print(f"import / gateway throughput: {ratio:.2f}x")
        if args.out:
            args.out.write_text(json.dumps({"spans": n, "import": imp, "gateway": gw, "ratio": ratio}, indent=2))


if __name__ == "__main__":
    main()
