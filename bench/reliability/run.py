"""Reliability and security campaign (issue 10): one table of what was tried and what broke.

    .venv/bin/python bench/reliability/run.py --quick          # about 5 minutes
    .venv/bin/python bench/reliability/run.py                  # >= 200 SIGKILL trials, 10-minute soak
    .venv/bin/python bench/reliability/run.py --soak-s 60 --kills 40   # anything in between

Sections (each one a group of rows in the table; the harness is shared with ``tests/reliability``):

1. **Crash safety** — ingest (Recorder → spool → LanceDB, 3 writer threads, compaction on), the
   gateway (stub backend, in-process Recorder, 4 HTTP clients) and ``molt serve`` as shipped (its capture
   child process; acknowledgements there are not observable, so it adds duplicates, chains, orphaned
   children and restarts, not "lost") are SIGKILLed at random points; every trial home lives
   through several kills, each life continuing the same trajectories. After a restart: acknowledged
   events and rewards lost, stored twice, chains that do not verify.
2. **Exit with the sink down** — a process using the Recorder, and one using molt-langchain, whose
   remote sink accepts connections and never answers: the time from its last line to its exit, and
   every record delivered on the next start.
3. **Fault injection** — store down / slow / flaky under the gateway, the spool's disk full (a tmpfs),
   the spool full, a governance stage that raises, the backend down and too slow, the online trainer
   failing mid-step and killed mid-step (``tests/reliability/test_trainer_fault.py``, run as it is).
   "Survived" means the agent's answer was unchanged (or a clean OpenAI-style 502/504 for a dead
   backend), the fault was counted, and recovery delivered everything acknowledged. The ``record()``
   p99 while the store is down is the agent's added latency.
4. **Hostile input** — schemathesis (positive + negative) against the gateway's OpenAPI document,
   hypothesis on ATDP parsing and OTLP span ingest: server errors (5xx or an exception that is not a
   Molt error) and rejections that are not OpenAI-style.
5. **Tenant isolation** — every endpoint × no key, wrong key, each role of two tenants; cross-tenant
   reward / end / session probes (read probes); write probes with one tenant's keys against the other
   (``tests/reliability/write_probe.py``: shared routing, OTLP trace and span ids, client-chosen
   trajectory ids, ``/metrics``) counting cross-tenant writes and leaks; the web console's pages and
   JSON endpoints over seeded random worlds of 2-3 tenants (``tests/reliability/console_probe.py``).
6. **Tamper evidence and erasure** — a mutation test over stored trajectories (single-byte edits of
   every sealed column, deletions, reorderings), and the existing byte-level erasure and chain test
   files run as they are.
7. **Load and soak** — ``molt serve --backend stub`` with tenant keys and capture on, a closed-loop
   load of 16 connections: throughput, p50/p99/max, error rate, the longest event-loop lag of the
   gateway (its ``/metrics``) and of the load generator (a late client looks like a slow server), and
   the RSS of the serving process and of its capture child after warm-up, at the end and at the peak,
   with the growth after warm-up in MiB per 1,000 requests and over the measured part's second half;
   the serving process's LanceDB caches (its ``/metrics``, every 10 s; bounded) and the same figures
   for its RSS less them. The load's sessions are never ended (orphaned runs): the gateway runs with
   ``--session-idle-s 60 --dedupe-ids 10000 --max-sessions 2000 --evolve-every 60`` so that its
   bounded state fills within the warm-up and control-plane cycles run during the measured part. The
   server's log is kept beside the JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "reliability"))

import faults  # noqa: E402
import openapi_doc  # noqa: E402
import relharness  # noqa: E402
from openapi_doc import KEYS  # noqa: E402

Row = tuple[str, str, str, str]  # section, figure, value, required


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------ 1 crash


def crash(work: Path, kills: int, lives: int) -> tuple[list[Row], dict[str, Any]]:
    homes = max(1, kills // lives)
    totals = {"kills": 0, "acked": 0, "lost": 0, "dup": 0, "chains": 0, "bad": 0, "ok_req": 0, "problems": []}
    per_kind: dict[str, dict[str, int]] = {}
    for i in range(homes):
        kind = ("ingest", "gateway", "ingest", "gateway", "serve")[i % 5]
        fn = {"ingest": relharness.ingest_trial, "gateway": relharness.gateway_trial,
              "serve": relharness.serve_trial}[kind]
        res = fn(work / f"crash-{i}", seed=1000 + i, lives=lives)
        k = per_kind.setdefault(kind, {"kills": 0, "acked": 0})
        k["kills"] += res.kills
        k["acked"] += res.acked_events + res.acked_rewards
        totals["kills"] += res.kills
        totals["acked"] += res.acked_events + res.acked_rewards
        totals["lost"] += res.lost
        totals["dup"] += res.duplicated
        totals["chains"] += res.trajectories
        totals["bad"] += res.chains_bad
        totals["ok_req"] += res.requests_ok
        totals["problems"] += res.problems
        totals.setdefault("orphan_or_restart_problems", 0)
        totals["orphan_or_restart_problems"] += sum("outlived" in p for p in res.problems)
        log(f"crash trial {i + 1}/{homes} ({kind}): {res.kills} kills, {res.acked_events} events acked, "
            f"lost {res.lost}, dup {res.duplicated}, bad chains {res.chains_bad}")
        shutil.rmtree(work / f"crash-{i}", ignore_errors=True)
    s = "1 crash (SIGKILL)"
    detail = ", ".join(f"{k} {v['kills']}" for k, v in per_kind.items())
    rows: list[Row] = [
        (s, f"SIGKILL trials run ({detail})", str(totals["kills"]), ">= 200 (full mode)"),
        (s, "events + rewards acknowledged", f"{totals['acked']:,}", ""),
        (s, "acknowledged lost", str(totals["lost"]), "0"),
        (s, "duplicated in the store", str(totals["dup"]), "0"),
        (s, f"chains that fail verify (of {totals['chains']}, each continued after restart)", str(totals["bad"]), "0"),
        (s, "capture children orphaned by a SIGKILLed molt serve", str(totals.get("orphan_or_restart_problems", 0)),
         "0"),
    ]
    return rows, totals


# ------------------------------------------------------------------------------------------ 2 exit


def exit_sink_down(work: Path, runs: int) -> tuple[list[Row], dict[str, Any]]:
    rows: list[Row] = []
    out: dict[str, Any] = {}
    for mode in ("recorder", "langchain"):
        times, molt, missing, expected = [], [], 0, 0
        for i in range(runs):
            r = relharness.exit_trial(work / f"exit-{mode}-{i}", mode, n=50)
            times.append(r.exit_s)
            molt.append(r.molt_exit_s)
            missing += r.missing
            expected += r.expected
        out[mode] = {"exit_s": times, "molt_exit_s": molt, "missing": missing, "expected": expected}
        label = "Recorder" if mode == "recorder" else "molt-langchain"
        rows.append(("2 exit, sink down", f"{label}: exit time, max of {runs} (median); Molt's atexit share, max",
                     f"{max(times):.2f} s ({statistics.median(times):.2f} s); {max(molt):.2f} s", "<= 1 s"))
        rows.append(("2 exit, sink down", f"{label}: records missing on next start (of {expected})", str(missing), "0"))
    base = _baseline_exit()
    out["langchain_baseline_exit_s"] = base
    rows.append(("2 exit, sink down", "  (langchain-core alone, no Molt: interpreter exit)", f"{base:.2f} s",
                 "reference"))
    return rows, out


def _baseline_exit() -> float:
    code = ("from langchain_core.language_models.fake_chat_models import FakeListChatModel as F\n"
            "F(responses=['ok']).invoke('x')\nimport time; print(time.time(), flush=True)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    t = time.time()
    return t - float(p.stdout.split()[-1])


# ------------------------------------------------------------------------------------------ 3 faults


def fault_injection(work: Path, n_calls: int) -> tuple[list[Row], dict[str, Any]]:
    from starlette.testclient import TestClient

    from molt.atdp import Event, EventKind, UserMessage
    from molt.backends import StubBackend
    from molt.capture import Recorder
    from molt.gateway import Gateway, GatewayConfig, create_app
    from molt.governance.access import KeyRing
    from molt.store import Store

    results: dict[str, dict[str, Any]] = {}
    W = {"authorization": "Bearer sk-acme-writer"}

    def record_p99(rec: Recorder, n: int = 5000) -> float:
        tid = rec.new_trajectory()
        evs = [Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE, action=UserMessage(content=f"m{i}"),
                     metadata={"tenant_id": "acme"}) for i in range(n)]
        lat = []
        for ev in evs:
            t0 = time.perf_counter()
            rec.record(ev)
            lat.append(time.perf_counter() - t0)
        return pct(lat, 0.99) * 1000

    # store down / slow / flaky, under the gateway. The four gateways (healthy is the reference) serve side
    # by side and the timed requests go round-robin between them (the order rotating each round), so every
    # fault's latency is measured against a healthy gateway under the same machine load: on a busy 2-core
    # machine, gateways timed one after the other differed by more than any fault added.
    setups = (("store healthy", {}), ("store down", {"down": True}), ("store slow (0.3 s a write)", {"delay_s": 0.3}),
              ("store flaky (1 write in 2 fails)", {"fail_every": 2}))
    runs: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        for k, (name, kw) in enumerate(setups):
            home = work / f"fault-{k}"
            store = Store.open(home / "store", auto_compact=False)
            sink = faults.FaultySink(store, **kw)
            rec = Recorder(sink, spool_dir=home / "spool")  # default retry backoff (up to 5 s), as deployed
            gw = Gateway([StubBackend()], recorder=rec, store=store, keyring=KeyRing.from_mapping(KEYS),
                         config=GatewayConfig(health_interval_s=0))
            c = stack.enter_context(TestClient(create_app(gw)))
            for _ in range(5):  # warm-up, not timed (first-request imports)
                c.post("/v1/chat/completions", headers=W, json={"model": "stub", "messages": [
                    {"role": "user", "content": "warm-up"}]})
            runs.append({"name": name, "kw": kw, "store": store, "sink": sink, "rec": rec, "c": c, "lat": [],
                         "same": True, "eids": []})
        for i in range(n_calls):
            for r_ in runs[i % len(runs):] + runs[:i % len(runs)]:
                t0 = time.perf_counter()
                r = r_["c"].post("/v1/chat/completions", headers=W, json={"model": "stub", "messages": [
                    {"role": "user", "content": f"q{i}"}]})
                r_["lat"].append(time.perf_counter() - t0)
                r_["same"] &= r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == f"echo: q{i}"
                r_["eids"].append(r.headers.get("x-molt-event-id"))
        for r_ in runs:
            rec = r_["rec"]
            r_["p99_record"] = record_p99(rec)
            rec.flush(timeout=60)
            r_["counted"] = rec.stats.sink_errors > 0 or r_["kw"].get("delay_s", 0) > 0 or not r_["kw"]
            r_["sink"].down = False
            r_["drained"] = rec.flush(timeout=120, deliver=True)
    healthy_p99 = pct(runs[0]["lat"], 0.99) * 1000
    for r_ in runs:
        rec, store, name, lat = r_["rec"], r_["store"], r_["name"], r_["lat"]
        rec.close()
        stored = store._where("events", None, ["event_id"]).column("event_id").to_pylist()
        ok = (r_["same"] and r_["counted"] and r_["drained"] and set(r_["eids"]) <= set(stored)
              and len(stored) == len(set(stored)))
        p99 = pct(lat, 0.99) * 1000
        results[name] = {"survived": ok, "p50_ms": pct(lat, 0.5) * 1000, "p99_ms": p99,
                         "added_p99_ms": p99 - healthy_p99, "record_p99_ms": r_["p99_record"],
                         "sink_errors": rec.stats.sink_errors}
        store.close()
        log(f"fault {name}: survived={ok} gateway p99 {p99:.2f} ms ({p99 - healthy_p99:+.2f} ms vs healthy, "
            f"interleaved), record() p99 {r_['p99_record']:.3f} ms")

    # the spool's disk full
    results["disk full (256 KiB tmpfs)"] = _disk_full(work)
    # the spool full (a quota on undelivered bytes)
    rec = Recorder(None, spool_dir=work / "spool-full", max_spool_bytes=64 << 10, batch_size=16)
    tid = rec.new_trajectory()
    acks = []
    for _ in range(20):
        for _ in range(16):
            rec.record(Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE, action=UserMessage(content="x" * 400)))
        acks.append(rec.flush(timeout=30))
    results["spool full (64 KiB quota)"] = {"survived": acks[0] and not acks[-1] and rec.stats.dropped_spool_full > 0}
    rec.close()
    # a governance stage (redactor) that raises: quarantined, the rest flows
    results["governance stage raises"] = _raising_stage(work)
    # backend down and too slow
    results.update(_backend_faults())
    # the online trainer fails mid-step twice, then is killed mid-step and restarted, the gateway serving
    results["trainer crash mid-step (rolled back; killed and restarted)"] = _trainer_crash()

    injected = len(results) - 1  # "store healthy" is the reference
    survived = sum(1 for k, v in results.items() if k != "store healthy" and v["survived"])
    s = "3 fault injection"
    down, healthy = results["store down"], results["store healthy"]
    rows: list[Row] = [
        (s, "faults injected: " + ", ".join(k for k in results if k != "store healthy"), str(injected), ""),
        (s, "faults survived (answer unchanged, fault counted, spool drained)", str(survived), f"{injected}"),
        (s, "record() p99 while the store is down / healthy",
         f"{down['record_p99_ms']:.3f} / {healthy['record_p99_ms']:.3f} ms", "<= 5 ms added"),
        (s, "gateway p99 added by the fault (interleaved with a healthy gateway): store down / slow / flaky",
         " / ".join(f"{results[k]['added_p99_ms']:+.1f}" for k in (
             "store down", "store slow (0.3 s a write)", "store flaky (1 write in 2 fails)"))
         + f" ms (healthy p99 {healthy['p99_ms']:.1f} ms)", "<= 5 ms added"),
    ]
    return rows, results


def _disk_full(work: Path) -> dict[str, Any]:
    from molt.atdp import Event, EventKind, UserMessage
    from molt.capture import Recorder
    from molt.store import Store

    with faults.small_tmpfs("256k") as disk:
        if disk is None:
            return {"survived": False, "note": "no tmpfs (not root)"}
        rec = Recorder(None, spool_dir=disk / "spool")
        tid = rec.new_trajectory()
        acked, oks = [], []
        filler = faults.fill(disk)
        for _ in range(6):
            ids = []
            for i in range(40):
                ev = Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE,
                           action=UserMessage(content=f"{i}" + "x" * 400))
                rec.record(ev)
                ids.append(ev.event_id)
            ok = rec.flush(timeout=30)
            oks.append(ok)
            if ok:
                acked += ids
        filler.unlink()
        ids = []
        for i in range(40):
            ev = Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE, action=UserMessage(content=f"after {i}"))
            rec.record(ev)
            ids.append(ev.event_id)
        resumed = rec.flush(timeout=30)
        acked += ids if resumed else []
        errors = rec.stats.writer_errors
        rec.close()
        store = Store.open(work / "disk-full-store", auto_compact=False)
        rec2 = Recorder(store, spool_dir=disk / "spool")
        rec2.flush(timeout=60, deliver=True)
        stored = store._where("events", None, ["event_id"]).column("event_id").to_pylist()
        ok = (not all(oks)) and resumed and errors > 0 and set(acked) <= set(stored) and store.verify(tid).ok
        rec2.close()
        store.close()
        return {"survived": ok, "writer_errors": errors, "acked": len(acked), "stored": len(stored)}


def _raising_stage(work: Path) -> dict[str, Any]:
    from molt.atdp import Event, EventKind, UserMessage
    from molt.capture import MemorySink, Recorder

    class Boom:
        def process(self, event: Any) -> Any:
            if "boom" in str(event.action):
                raise RuntimeError("redactor exploded")
            from molt.capture.hooks import HookResult

            return HookResult(event=event)

    sink = MemorySink()
    rec = Recorder(sink, spool_dir=work / "spool-boom", pipeline=Boom())  # type: ignore[arg-type]
    tid = rec.new_trajectory()
    ok = all(rec.record(Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE, action=UserMessage(content=t)))
             for t in ("fine", "boom", "fine again"))
    rec.flush(timeout=30, deliver=True)
    survived = ok and len(sink.events) == 2 and len(sink.quarantine) == 1 and rec.stats.quarantined == 1
    rec.close()
    return {"survived": survived}


def _trainer_crash() -> dict[str, Any]:
    """``tests/reliability/test_trainer_fault.py`` as it is: the real trainer, training queue and gateway
    (its checks: answers unchanged, the crash counted and in ``molt doctor``, no half-applied adapter,
    nothing lost or trained twice across the restart)."""
    import importlib.util

    if importlib.util.find_spec("molt_trainer") is None:
        return {"survived": False, "note": "molt-trainer is not installed"}
    counts = _pytest_counts(["tests/reliability/test_trainer_fault.py"])
    return {"survived": counts["passed"] > 0 and counts["failed"] == 0, **counts}


def _backend_faults() -> dict[str, dict[str, Any]]:
    from starlette.testclient import TestClient

    from molt.backends import StubBackend
    from molt.gateway import Gateway, GatewayConfig, create_app

    out: dict[str, dict[str, Any]] = {}
    W = {"authorization": "Bearer sk"}
    body = {"model": "stub", "messages": [{"role": "user", "content": "hi"}]}
    down = StubBackend()
    gw = Gateway([down], config=GatewayConfig(health_interval_s=0))
    with TestClient(create_app(gw)) as c:
        down.healthy = False
        r = c.post("/v1/chat/completions", headers=W, json=body)
        bad = r.status_code in (502, 503) and openapi_doc.is_openai_error(r.json())
        down.healthy = True
        c.post("/v1/molt/admin/health", headers=W)  # what the health loop does every 5 s
        r2 = c.post("/v1/chat/completions", headers=W, json=body)
        out["backend down, then back"] = {"survived": bad and r2.status_code == 200, "status": r.status_code}
    slow = StubBackend(latency_s=2.0)
    gw = Gateway([slow], config=GatewayConfig(health_interval_s=0, backend_timeout_s=0.3))
    with TestClient(create_app(gw)) as c:
        r = c.post("/v1/chat/completions", headers=W, json=body)
        out["backend too slow (timeout)"] = {"survived": r.status_code == 504 and openapi_doc.is_openai_error(r.json()),
                                             "status": r.status_code}
    a, b = StubBackend("a"), StubBackend("b")
    gw = Gateway([a, b], config=GatewayConfig(health_interval_s=0))
    with TestClient(create_app(gw)) as c:
        a.healthy = False
        codes = [c.post("/v1/chat/completions", headers={**W, "x-molt-session": f"s{i}"}, json=body).status_code
                 for i in range(6)]
        out["one of two backends down (failover)"] = {"survived": codes == [200] * 6, "codes": codes}
    return out


# ------------------------------------------------------------------------------------------ 4 fuzz


def fuzz(work: Path, per_op: int, hyp: int) -> tuple[list[Row], dict[str, Any]]:
    import test_hostile_input as thi
    from hypothesis import HealthCheck, given, settings

    from molt.atdp.validate import parse_event, parse_reward
    from molt.errors import MoltError

    app, close = _app(work / "fuzz")
    st = openapi_doc.fuzz_gateway(app, max_examples=per_op, seed=7)
    close()
    counts = {"parse": 0, "parse_errors": 0, "otlp": 0, "otlp_5xx": 0}
    crashes: list[str] = []

    @settings(max_examples=hyp, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(raw=thi._event_like.map(thi._dumps) | thi._json.map(thi._dumps))
    def parse(raw: bytes) -> None:
        counts["parse"] += 1
        for fn in (parse_event, parse_reward):
            try:
                fn(raw)
            except MoltError:
                pass
            except Exception as exc:
                counts["parse_errors"] += 1
                crashes.append(f"{fn.__name__}: {exc!r}")

    parse()
    from starlette.testclient import TestClient

    app, close = _app(work / "fuzz-otlp")
    with TestClient(app) as c:
        @settings(max_examples=hyp, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(body=thi._export)
        def otlp(body: Any) -> None:
            counts["otlp"] += 1
            r = c.post("/v1/traces", content=thi._dumps(body), headers={
                "authorization": "Bearer sk-acme-writer", "content-type": "application/json"})
            if r.status_code >= 500:
                counts["otlp_5xx"] += 1
                crashes.append(f"otlp {r.status_code}: {r.text[:200]}")

        otlp()
    close()
    s = "4 hostile input"
    rows: list[Row] = [
        (s, f"schemathesis cases ({per_op}/operation/mode, {len(openapi_doc.gateway_openapi()['paths'])} paths)",
         f"{st.cases:,}", ""),
        (s, "  server errors (5xx)", str(len(st.server_errors)), "0"),
        (s, "  rejections that are not OpenAI-style errors", str(len(st.bad_errors)), "0"),
        (s, "hypothesis cases: ATDP parsing / OTLP span export", f"{counts['parse']:,} / {counts['otlp']:,}", ""),
        (s, "  errors (non-Molt exception / 5xx)", f"{counts['parse_errors']} / {counts['otlp_5xx']}", "0"),
    ]
    return rows, {"schemathesis": {"cases": st.cases, "by_status": st.by_status, "server_errors": st.server_errors,
                                   "bad_errors": st.bad_errors}, "hypothesis": counts, "crashes": crashes[:20]}


def _app(home: Path) -> tuple[Any, Callable[[], None]]:
    from molt.backends import StubBackend
    from molt.capture import Recorder
    from molt.gateway import Gateway, GatewayConfig, create_app
    from molt.governance.access import KeyRing
    from molt.store import Store

    store = Store.open(home / "store", auto_compact=False)
    rec = Recorder(store, spool_dir=home / "spool", fsync="never")
    gw = Gateway([StubBackend()], recorder=rec, store=store, keyring=KeyRing.from_mapping(KEYS),
                 config=GatewayConfig(health_interval_s=0, max_body_bytes=64 << 10))

    def close() -> None:
        rec.close()
        store.close()

    return create_app(gw), close


# ------------------------------------------------------------------------------------------ 5 tenants


def tenants(work: Path, worlds: int = 3) -> tuple[list[Row], dict[str, Any]]:
    from starlette.testclient import TestClient

    from molt.governance.access import Permission, Role

    allowed = {Role.OPERATOR: set(Permission), Role.ADMIN: set(Permission) - {Permission.OPERATE},
               Role.TRAINER: {Permission.READ, Permission.EXPORT, Permission.TRAIN},
               Role.READER: {Permission.READ}, Role.AGENT_WRITER: {Permission.WRITE}}
    app, close = _app(work / "tenants")
    probes = leaks = 0
    leak_notes: list[str] = []
    body_for = {"/v1/chat/completions": {"model": "stub", "messages": [{"role": "user", "content": "hi"}]},
                "/v1/completions": {"model": "stub", "prompt": "hi"}}
    with TestClient(app) as c:
        for method, path, needs in openapi_doc.ENDPOINTS:
            p = path.replace("{tid}", "t")
            for key in (None, "sk-wrong", *KEYS):
                h = {"authorization": f"Bearer {key}"} if key else {}
                r = c.request(method, p, headers=h, json=body_for.get(p, {}))
                probes += 1
                if key in KEYS:
                    role = Role(KEYS[key][1])
                    refused = needs is not None and Permission(needs) not in allowed[role]
                else:
                    refused = True
                expect = {401} if key not in KEYS else ({403} if refused else None)
                if expect is not None and r.status_code not in expect:
                    leaks += 1
                    leak_notes.append(f"{method} {p} key={key}: {r.status_code}")
    close()
    app, close = _app(work / "tenants-data")  # the matrix ran admin calls (it may have removed versions)
    gw = app.state.gateway
    with TestClient(app) as c:
        # cross-tenant probes on acme's data with globex keys
        acme, globex = {"authorization": "Bearer sk-acme-writer"}, {"authorization": "Bearer sk-globex-writer"}
        r = c.post("/v1/chat/completions", headers={**acme, "x-molt-session": "acme-s"},
                   json=body_for["/v1/chat/completions"])
        tid, eid = r.headers["x-molt-trajectory"], r.headers["x-molt-event-id"]
        gw.recorder.flush(timeout=30, deliver=True)
        for m, p, b in [("POST", "/v1/molt/rewards/trajectory", {"trajectory_id": tid, "value": 1.0}),
                        ("POST", "/v1/molt/rewards/call", {"call_id": f"chatcmpl-{eid}", "value": 1.0}),
                        ("POST", "/v1/molt/rewards/last-call", {"session_id": "acme-s", "value": 1.0}),
                        ("POST", f"/v1/molt/trajectories/{tid}/end", None),
                        ("POST", "/v1/molt/sessions/acme-s/end", None)]:
            probes += 1
            rr = c.request(m, p, headers=globex, json=b)
            if rr.status_code != 404:
                leaks += 1
                leak_notes.append(f"{p} by globex: {rr.status_code}")
    close()
    # write probes (issue 27): with acme's keys, change globex's serving or data, or tell its ids
    import write_probe

    app, close = _app(work / "tenants-writes")
    with TestClient(app) as c:
        writes = write_probe.run(c, app.state.gateway)
    close()
    log(f"write probes: {writes.probes}, cross-tenant writes {writes.cross_writes}, leaks {writes.leaks}")
    # the web console: every page and JSON endpoint with each tenant's keys, over random worlds
    import console_probe

    rng = random.Random(10)
    console_probes, console_leaks = 0, []
    for i in range(worlds):
        got = console_probe.run_world(work / f"console-{i}", console_probe.random_world(rng, 2 + i % 2))
        console_probes += got.probes
        console_leaks += got.leaks
    log(f"console: {console_probes} probes over {worlds} worlds, {len(console_leaks)} leaks")
    # the store-level property tests (scan, vector, full-text, time travel, export), the CLI matrix and
    # the console's hypothesis test
    existing = _pytest_counts(["tests/core/governance/test_isolation.py", "tests/reliability/test_auth_matrix.py",
                               "tests/reliability/test_console_isolation.py"])
    s = "5 tenant isolation"
    rows: list[Row] = [
        (s, f"read probes (HTTP: every endpoint × {len(KEYS) + 2} keys, plus cross-tenant data probes)",
         str(probes), ""),
        (s, "  leaks (a key got what its tenant/role must not)", str(leaks), "0"),
        (s, "write probes (acme's keys vs globex: shared routing, OTLP trace/span ids, client-chosen trajectory "
            "ids, /metrics; then every chain)", str(writes.probes), ""),
        (s, "  cross-tenant writes (globex's serving or data changed, an event dropped or misplaced)",
         str(writes.cross_writes), "0"),
        (s, "  leaks (an id of globex's readable, or an answer that tells whether globex holds an id)",
         str(writes.leaks), "0"),
        (s, f"console probes (every page and JSON endpoint × admin/reader key of each tenant × the others' "
            f"ids, {worlds} random worlds of 2-3 tenants) — leaks", f"{console_probes:,} — {len(console_leaks)}",
         "0 leaks"),
        (s, "store isolation property tests (scan, vector, full-text, time travel, export) + CLI key matrix + "
            "console property test: passed / failed (xfail counted as failed)",
         f"{existing['passed']} / {existing['failed']}", "all / 0"),
    ]
    return rows, {"probes": probes, "leaks": leaks, "notes": leak_notes, "existing": existing,
                  "writes": {"probes": writes.probes, "cross_writes": writes.cross_writes, "leaks": writes.leaks,
                             "notes": writes.notes[:20]},
                  "console": {"worlds": worlds, "probes": console_probes, "leaks": console_leaks[:20]}}


# ------------------------------------------------------------------------------------------ 6 tamper, erasure


def tamper(work: Path, trajectories: int, mutations: int) -> tuple[list[Row], dict[str, Any]]:
    from dataclasses import replace

    from molt.atdp import Event, EventKind, Generation, ToolCall, UserMessage
    from molt.atdp.chain import verify_chain
    from molt.capture import Recorder
    from molt.store import Store

    store = Store.open(work / "tamper-store", auto_compact=False)
    rec = Recorder(store, spool_dir=work / "tamper-spool")
    tids = [rec.new_trajectory() for _ in range(trajectories)]
    for tid in tids:
        for i in range(8):
            action = [UserMessage(content=f"msg {i}"), Generation(model="m", text=f"answer {i}"),
                      ToolCall(tool_name="lookup", arguments={"i": i})][i % 3]
            kind = [EventKind.USER_MESSAGE, EventKind.MODEL_CALL, EventKind.TOOL_CALL][i % 3]
            rec.record(Event(trajectory_id=tid, kind=kind, action=action, metadata={"tenant_id": "acme"}))
    rec.flush(timeout=60, deliver=True)
    rec.close()
    rng = random.Random(3)
    tried = detected = 0
    by_kind: dict[str, list[int]] = {}
    for _ in range(mutations):
        tid = rng.choice(tids)
        sealed = store.sealed_events(tid)
        kind = rng.choice(["byte", "byte", "byte", "delete", "reorder"])
        mutated = list(sealed)
        if kind == "byte":
            i = rng.randrange(len(mutated))
            field = rng.choice(["envelope", "payload", "digest", "prev_hash", "hash"])
            value = getattr(mutated[i], field)
            if isinstance(value, str):
                pos = rng.randrange(len(value))
                new = value[:pos] + ("0" if value[pos] != "0" else "1") + value[pos + 1:]
            else:
                b = bytearray(value)
                pos = rng.randrange(len(b))
                b[pos] ^= 1 << rng.randrange(8)
                new = bytes(b)
            mutated[i] = replace(mutated[i], **{field: new})
            kind = f"byte:{field}"
        head = None
        if kind == "delete":
            i = rng.randrange(len(mutated))
            if i == len(mutated) - 1:  # a deleted tail shows only against a recorded head (chain.py says so)
                head = (mutated[-1].seq, mutated[-1].hash)
            del mutated[i]
        elif kind == "reorder":  # rewrite the causal positions (seq) of two events, as an attack would
            i, j = rng.sample(range(len(mutated)), 2)
            a, b = mutated[i], mutated[j]
            mutated[i], mutated[j] = replace(a, seq=b.seq), replace(b, seq=a.seq)
        tried += 1
        hit = not verify_chain(tid, mutated, expected_head=head).ok
        detected += hit
        by_kind.setdefault(kind.split(":")[0], [0, 0])
        by_kind[kind.split(":")[0]][0] += 1
        by_kind[kind.split(":")[0]][1] += hit
    store.close()
    existing = _pytest_counts(["tests/core/atdp/test_chain.py", "tests/core/governance/test_erasure.py",
                               "tests/core/governance/test_retention.py"])
    s = "6 tamper, erasure"
    rows: list[Row] = [
        (s, "mutations of stored trajectories (" + ", ".join(f"{k} {v[0]}" for k, v in by_kind.items())
         + "; a deleted tail checked against its recorded head)",
         str(tried), ""),
        (s, "  mutations not detected by verify", str(tried - detected), "0"),
        (s, "existing chain/erasure/retention tests (byte-level erasure, old versions) passed / failed",
         f"{existing['passed']} / {existing['failed']}", "all / 0"),
    ]
    return rows, {"mutations": tried, "detected": detected, "by_kind": by_kind, "existing": existing}


def _pytest_counts(paths: list[str]) -> dict[str, int]:
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *paths],
                       cwd=ROOT, capture_output=True, text=True, timeout=900)
    tail = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
    counts = {"passed": 0, "failed": 0}
    for part in tail.replace(",", " ").split(" in ")[0].split("  "):
        bits = part.split()
        for i in range(0, len(bits) - 1):
            if bits[i].isdigit() and bits[i + 1] in ("passed", "failed", "error", "errors", "xfailed"):
                counts["failed" if bits[i + 1] != "passed" else "passed"] += int(bits[i])
    return counts


# ------------------------------------------------------------------------------------------ 7 load, soak


SESSION_IDLE_S = 60.0
DEDUPE_IDS = 10_000
MAX_SESSIONS = 2_000


def load_soak(work: Path, soak_s: float, concurrency: int, log_path: Path,
              capture_recycle: int | None = None) -> tuple[list[Row], dict[str, Any]]:
    import psutil
    from anon_maps import anon_mappings  # this folder

    from molt.gateway.capture_process import RECYCLE_AFTER
    from molt.gateway.native_heap import MEMSTATS_ENV
    from molt.store import FOLLOWER_CACHES

    recycle_after = RECYCLE_AFTER if capture_recycle is None else capture_recycle
    home = work / "soak-home"
    home.mkdir(parents=True, exist_ok=True)
    keys = home / "keys.toml"
    keys.write_text('[[keys]]\nkey = "sk-load"\ntenant = "acme"\nrole = "agent_writer"\n'
                    '[[keys]]\nkey = "sk-load-reader"\ntenant = "acme"\nrole = "reader"\n')
    port = relharness.free_port()
    # The capture child writes its allocators' counters every MEMSTATS_S (Python's objects, glibc's heap
    # in use and mmapped, Arrow's pool, LanceDB's caches, its threads); its mappings are read from here.
    memstats_path = log_path.parent / "soak-capture-memstats.jsonl"
    env = {**os.environ, "MOLT_HOME": str(home), "HF_HUB_OFFLINE": "1", MEMSTATS_ENV: str(memstats_path),
           MEMSTATS_ENV + "_S": str(MEMSTATS_S)}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    memstats_path.unlink(missing_ok=True)
    logf = open(log_path, "wb")  # noqa: SIM115 -- kept beside the JSON: the server's side of any error
    # Bounded state is sized to fill within the warm-up, so a slope after it is growth, not a cache
    # filling: orphaned runs (the load's sessions are never ended) are forgotten after SESSION_IDLE_S
    # (default 1,800 s: the maps level off at rate × 1,800 s or max_sessions entries, ~350 B each),
    # the capture child remembers DEDUPE_IDS event ids (default 200,000, ~150 B each) and the chain
    # heads of MAX_SESSIONS trajectories (default 200,000, ~350 B each; the load starts ~16 a second),
    # and the control plane runs every SESSION_IDLE_S too (default 300 s), so its cycles are in the
    # measured part.
    proc = subprocess.Popen([sys.executable, "-m", "molt.cli", "serve", "--backend", "stub", "--port", str(port),
                             "--keys", str(keys), "--log-level", "warning",
                             "--session-idle-s", str(min(SESSION_IDLE_S, 0.1 * soak_s)),
                             "--evolve-every", str(min(SESSION_IDLE_S, 0.1 * soak_s)),
                             "--dedupe-ids", str(DEDUPE_IDS), "--max-sessions", str(MAX_SESSIONS),
                             "--capture-recycle", str(recycle_after)],
                            env=env, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    # (seconds, requests so far, serving process MiB, capture child MiB): per process, so a leak in
    # one is not hidden by the other
    rss: list[tuple[float, int, float, float]] = []
    # (seconds, MiB held by the serving process's LanceDB caches), from its /metrics every 10 s on a
    # thread of its own (the answer can take seconds while the capture process is busy)
    caches: list[tuple[float, float]] = []
    done_polling = threading.Event()
    child_pids: set[int] = set()

    # (seconds, the capture children's resident anonymous memory by kind), every MEMSTATS_S
    child_maps: list[tuple[float, dict[str, float]]] = []

    def poll_caches() -> None:
        last_maps = 0.0
        while not done_polling.wait(10.0):
            with contextlib.suppress(Exception):  # a missed sample is a gap, not an error of the soak
                caches.append((time.monotonic(), _server_gauge(url, "molt_store_cache_bytes") / 2**20))
            if time.monotonic() - last_maps >= MEMSTATS_S:
                last_maps = time.monotonic()
                kinds: dict[str, float] = {}
                for pid in list(child_pids):
                    with contextlib.suppress(OSError):
                        for k, v in anon_mappings(pid).items():
                            kinds[k] = kinds.get(k, 0.0) + v
                if kinds:
                    child_maps.append((last_maps, kinds))

    poller = threading.Thread(target=poll_caches, daemon=True)
    try:
        _wait(url, proc, log_path)
        server = psutil.Process(proc.pid)
        poller.start()

        def sample(done: int) -> None:
            own = children = 0
            with contextlib.suppress(psutil.Error):
                own = server.memory_info().rss
            for p in server.children(recursive=True):
                child_pids.add(p.pid)
                with contextlib.suppress(psutil.Error):
                    children += p.memory_info().rss
            rss.append((time.monotonic(), done, own / 2**20, children / 2**20))

        res = asyncio.run(_load(url, soak_s, concurrency, sample))
        server_lag = _server_gauge(url, "molt_gateway_event_loop_lag_max_seconds")
        recycled = int(_server_gauge(url, "molt_capture_recycled"))
    finally:
        done_polling.set()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        logf.close()
    lat = res["lat"]
    n, errors = len(lat), res["errors"]
    stored: int | None = None
    quarantined: int | None = None
    try:
        stored, quarantined = _stored_events(home, child_pids)
    except Exception as exc:  # the memory and latency figures stand without the count
        log(f"counting the stored events failed: {exc!r}")
    # After warm-up (the first 20 % of the soak: caches fill, the store's first compactions) a leak
    # grows linearly with requests: the slope of a least-squares line through the samples, in MiB per
    # 1,000 requests, is the figure to hold flat (a 100-byte-per-request leak is 0.1).
    warm = [r for r in rss if r[0] - rss[0][0] >= 0.2 * soak_s] or rss
    s = "7 load, soak"
    rows: list[Row] = [
        (s, f"requests, {concurrency} connections, {soak_s:.0f} s (molt serve, stub, keys, capture on)",
         f"{n:,}", ""),
        (s, "throughput", f"{n / res['elapsed']:.0f} req/s", ""),
        (s, "latency p50 / p99 / max", f"{pct(lat, 0.5) * 1000:.1f} / {pct(lat, 0.99) * 1000:.1f} / "
         f"{max(lat, default=0) * 1000:.0f} ms", ""),
        (s, "event loop's longest lag: serving process / load generator",
         f"{server_lag * 1000:.0f} / {res['lag_max'] * 1000:.0f} ms", ""),
        (s, "error rate (non-200 or connection errors)", f"{errors / max(1, n + errors):.4%} ({errors})"
         + "".join(f"; {k} × {v}" for k, v in sorted(res["why"].items())), "0"),
    ]
    # Every answered call is one event. What the capture child had not delivered when the gateway
    # stopped is in the spool, and a Recorder opened on it delivers it: an event missing after that
    # was acknowledged and lost.
    counted = ("not counted" if stored is None or quarantined is None else
               f"{stored:,} / {n:,}; {quarantined:,}; {max(0, n - stored - quarantined):,}")
    rows.append((s, "events stored / calls answered; quarantined; lost", counted, "0 lost"))
    for col, who in ((2, "serving process"), (3, "capture child")):
        peak = max(r[col] for r in rss)
        rows.append((s, f"{who} RSS after warm-up → end (peak); growth after warm-up; over its second half",
                     f"{warm[0][col]:.0f} → {warm[-1][col]:.0f} MiB ({peak:.0f}); {_growth(warm, col)}", "flat"))
    # With --capture-recycle N molt serve replaces its capture child every N records; while the old one
    # hands the spool over both are alive, so the children's sum peaks for a few seconds at each one.
    every = f"every {recycle_after:,} records" if recycle_after else "recycling off"
    rows.append((s, f"capture child replaced by a fresh one ({every}); "
                    f"2-minute medians of the children's RSS after warm-up: lowest – highest",
                 f"{recycled} times; {_medians_range(warm, 3, 120.0)}", ""))
    # The serving process's LanceDB caches are bounded (molt.store.FOLLOWER_CACHES): growth that is
    # theirs levels off at the bound. The same figures for its RSS less the caches (the cache sample
    # nearest each RSS sample; they are taken every 10 s and move slowly) show the rest of the process.
    if len(caches) >= 2:
        def cache_at(t: float) -> float:
            return min(caches, key=lambda c: abs(c[0] - t))[1]
        net = [(r[0], r[1], r[2] - cache_at(r[0]), r[3]) for r in warm]
        rows += [
            (s, "serving process's LanceDB caches after warm-up → end (bound)",
             f"{cache_at(warm[0][0]):.1f} → {cache_at(warm[-1][0]):.1f} MiB "
             f"({sum(FOLLOWER_CACHES.values()) / 2**20:.0f})", "≤ bound"),
            (s, "serving process RSS less its LanceDB caches: after warm-up → end; growth; over its second half",
             f"{net[0][2]:.0f} → {net[-1][2]:.0f} MiB; {_growth(net, 2)}", "flat")]
    memstats = _read_jsonl(memstats_path)
    rows += _child_memory_rows(s, child_maps, memstats, rss[0][0] + 0.2 * soak_s if rss else 0.0)
    return rows, {"requests": n, "errors": errors, "error_kinds": res["why"], "elapsed": res["elapsed"],
                  "capture_child_maps": child_maps, "capture_child_memstats": memstats,
                  "server_loop_lag_max": server_lag, "client_loop_lag_max": res["lag_max"],
                  "p50": pct(lat, 0.5), "p99": pct(lat, 0.99), "rss_mb": rss,
                  "serving_cache_mb": caches, "capture_recycled": recycled, "capture_recycle": recycle_after,
                  "events_stored": stored, "events_quarantined": quarantined}


MEMSTATS_S = 30.0


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


def _child_memory_rows(s: str, maps: list[tuple[float, dict[str, float]]], memstats: list[dict[str, Any]],
                       warm_t: float) -> list[Row]:
    """The capture child's memory by kind after warm-up, at the middle and at the end (medians of the
    three samples around each): where growth is, when RSS is not flat."""
    def at(values: list[float], frac: float) -> float:
        i = min(len(values) - 1, round(frac * (len(values) - 1)))
        return statistics.median(values[max(0, i - 1):i + 2])

    def fmt(series: dict[str, list[float]]) -> str:
        return "; ".join(f"{k} {at(v, 0):.1f} → {at(v, 0.5):.1f} → {at(v, 1):.1f}" for k, v in series.items())

    rows: list[Row] = []
    warm_maps = [m for t, m in maps if t >= warm_t]
    if len(warm_maps) >= 3:
        series = {k: [m.get(k, 0.0) for m in warm_maps] for k in warm_maps[-1]}
        rows.append((s, "capture child's resident anonymous MiB by mapping (smaps): after warm-up → middle → end",
                     fmt(series), ""))
    if memstats:
        pid = memstats[-1]["pid"]  # the last child (one, with recycling off)
        mine = [m for m in memstats if m["pid"] == pid]
        warm = [m for m in mine if m["t"] >= 0.2 * mine[-1]["t"]]
        if len(warm) >= 3:
            keys = ("rssanon", "glibc_used", "glibc_free", "glibc_mmapped", "arrow_used", "arrow_peak",
                    "py_blocks", "store_caches", "threads")
            series = {k: [m[k] / (1024 if k == "rssanon" else 1000 if k == "py_blocks" else 1) for m in warm]
                      for k in keys if k in warm[-1]}
            rows.append((s, "capture child's own counters (MiB; py_blocks: Python's objects, thousands; threads): "
                            "after warm-up → middle → end", fmt(series), ""))
    return rows


def _stored_events(home: Path, child_pids: set[int]) -> tuple[int, int]:
    """Events and quarantined records in the soak's store once the capture children have exited and
    what they left in the spool is delivered."""
    import psutil

    from molt.capture import Recorder
    from molt.store import Store

    deadline = time.monotonic() + 120  # a child makes what it was sent durable, then delivers for up to 10 s
    while any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in child_pids):
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    with Store.open(home / "store", auto_compact=False) as store:
        rec = Recorder(store, spool_dir=home / "spool", fsync="never")
        rec.flush(timeout=300, deliver=True)
        rec.close(timeout=60)
        return store.count(), store.count("quarantine")


def _growth(samples: list[tuple[float, int, float, float]], col: int) -> str:
    """Column ``col``'s least-squares slope in MiB per 1,000 requests, and its levelling off: the median
    of the last tenth of the samples against that of the tenth ending at their middle (medians: the
    child's compaction peaks last seconds)."""
    slope = _slope([r[1] for r in samples], [r[col] for r in samples]) * 1000
    mid, end = _window(samples, col, 0.5), _window(samples, col, 1.0)
    return f"{slope:+.2f} MiB per 1k requests; {end - mid:+.1f} MiB ({mid:.0f} → {end:.0f}, medians)"


def _medians_range(samples: list[tuple[float, int, float, float]], col: int, width_s: float) -> str:
    """The lowest and highest median of column ``col`` over consecutive windows of ``width_s`` seconds."""
    windows: dict[int, list[float]] = {}
    for r in samples:
        windows.setdefault(int((r[0] - samples[0][0]) // width_s), []).append(r[col])
    medians = [statistics.median(v) for v in windows.values()]
    return f"{min(medians):.0f} – {max(medians):.0f} MiB"


def _window(samples: list[tuple[float, int, float, float]], col: int, at: float) -> float:
    """Median of column ``col`` over the tenth of ``samples`` that ends at fraction ``at`` of them
    (1.0: the last tenth; 0.5: the tenth ending in the middle)."""
    n = len(samples)
    hi = max(1, round(at * n))
    lo = max(0, hi - max(1, n // 10))
    return statistics.median(r[col] for r in samples[lo:hi])


def _slope(xs: list[int], ys: list[float]) -> float:
    """Least-squares slope of ``ys`` over ``xs`` (0 with fewer than two distinct points)."""
    if len(set(xs)) < 2:
        return 0.0
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def _server_gauge(url: str, name: str) -> float:
    """One unlabelled sample of the gateway's ``/metrics``, e.g. ``molt_gateway_event_loop_lag_max_seconds``
    (the longest it served nothing) or ``molt_store_cache_bytes``."""
    import httpx

    text = httpx.get(url + "/metrics", headers={"authorization": "Bearer sk-load-reader"}, timeout=30).text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise RuntimeError(f"the gateway's /metrics has no {name}")


def _wait(url: str, proc: subprocess.Popen[bytes], log_path: Path) -> None:
    import httpx

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"molt serve exited with {proc.returncode}; see {log_path}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/health", headers={"authorization": "Bearer sk-load"}, timeout=2).status_code == 200:
                return
        time.sleep(0.1)
    raise RuntimeError(f"molt serve did not come up within 120 s; see {log_path}")


async def _load(url: str, seconds: float, concurrency: int, sample: Callable[[int], None]) -> dict[str, Any]:
    import httpx

    lat: list[float] = []
    errors = 0
    why: dict[str, int] = {}  # what the errors were (status codes, exception types)
    stop = time.monotonic() + seconds
    h = {"authorization": "Bearer sk-load"}

    async def worker(k: int, client: httpx.AsyncClient) -> None:
        nonlocal errors
        i = 0
        while time.monotonic() < stop:
            i += 1
            body = {"model": "stub", "messages": [{"role": "user", "content": f"load {k} {i}"}]}
            t0 = time.perf_counter()
            try:
                r = await client.post(url + "/v1/chat/completions", json=body,
                                      headers={**h, "x-molt-session": f"w{k}-{i // 20}"})
                if r.status_code == 200:
                    lat.append(time.perf_counter() - t0)
                else:
                    errors += 1
                    why[str(r.status_code)] = why.get(str(r.status_code), 0) + 1
            except httpx.HTTPError as exc:
                errors += 1
                why[type(exc).__name__] = why.get(type(exc).__name__, 0) + 1

    async def sampler() -> None:
        while time.monotonic() < stop:
            sample(len(lat) + errors)
            await asyncio.sleep(1.0)
        sample(len(lat) + errors)

    lag_max = 0.0

    async def lagger() -> None:
        # The load generator's own stalls: a late client looks like a slow server (and idles its
        # connections past the server's keep-alive), so the two lags are reported side by side.
        nonlocal lag_max
        loop = asyncio.get_running_loop()
        while time.monotonic() < stop:
            t = loop.time()
            await asyncio.sleep(0.1)
            lag_max = max(lag_max, loop.time() - t - 0.1)

    t0 = time.monotonic()
    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=concurrency)) as client:
        await asyncio.gather(sampler(), lagger(), *(worker(k, client) for k in range(concurrency)))
    return {"lat": lat, "errors": errors, "why": why, "elapsed": time.monotonic() - t0, "lag_max": lag_max}


# ------------------------------------------------------------------------------------------ main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a few trials of everything (about 5 minutes)")
    ap.add_argument("--kills", type=int, help="SIGKILL trials (default 200; --quick 8)")
    ap.add_argument("--lives", type=int, default=4, help="kills per trial home (default 4; --quick 2)")
    ap.add_argument("--soak-s", type=float, help="load/soak seconds (default 600; --quick 15)")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--capture-recycle", type=int, default=None,
                    help="soak: molt serve --capture-recycle (records per capture child; 0 never; default molt's)")
    ap.add_argument("--only", default="1234567", help="sections to run, e.g. 17")
    ap.add_argument("--json", type=Path, default=ROOT / "bench" / "out" / "reliability.json")
    args = ap.parse_args()
    q = args.quick
    kills = args.kills or (8 if q else 200)
    lives = 2 if q and args.lives == 4 else args.lives
    soak_s = args.soak_s or (15.0 if q else 600.0)
    rows: list[Row] = []
    detail: dict[str, Any] = {"mode": "quick" if q else "full", "started": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                         time.gmtime())}
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="molt-reliability-", ignore_cleanup_errors=True) as tmp:
        work = Path(tmp)
        steps: list[tuple[str, str, Callable[[], tuple[list[Row], Any]]]] = [
            ("1", "crash", lambda: crash(work, kills, lives)),
            ("2", "exit", lambda: exit_sink_down(work, 1 if q else 5)),
            ("3", "faults", lambda: fault_injection(work, 20 if q else 200)),
            ("4", "fuzz", lambda: fuzz(work, 10 if q else 100, 150 if q else 2000)),
            ("5", "tenants", lambda: tenants(work, 2 if q else 10)),
            ("6", "tamper", lambda: tamper(work, 10 if q else 50, 300 if q else 5000)),
            ("7", "soak", lambda: load_soak(work, soak_s, args.concurrency, args.json.parent / "soak-server.log",
                                                 args.capture_recycle)),
        ]
        for key, name, fn in steps:
            if key not in args.only:
                continue
            log(f"section {key}: {name}")
            t0 = time.monotonic()
            r, d = fn()
            rows += r
            detail[name] = d
            detail[f"{name}_s"] = time.monotonic() - t0
    detail["total_s"] = time.monotonic() - t_start
    _print(rows, detail)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"rows": rows, "detail": detail}, indent=1, default=str))


def _print(rows: list[Row], detail: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"Molt reliability and security ({detail['mode']} mode, {detail['total_s'] / 60:.1f} min)")
    for col in ("section", "figure", "value", "required"):
        t.add_column(col, overflow="fold")
    last = None
    for section, figure, value, required in rows:
        t.add_row(section if section != last else "", figure, value, required)
        last = section
    Console(width=160).print(t)


if __name__ == "__main__":
    main()
