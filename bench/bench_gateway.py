"""Gateway overhead: Molt's gateway vs LiteLLM's proxy, both in front of the same stub upstream.

    python bench/bench_gateway.py [--seconds 5] [--requests 600] [--no-litellm] [--compare-tree DIR]

What runs (all on loopback, each server one process / one worker):

- ``stub``: the stub OpenAI-compatible server (:func:`molt.backends.stub.stub_asgi_app`, uvicorn),
  answering at once — the "backend directly" baseline.
- ``molt → stub``: the gateway as ``molt serve`` runs it, with the ``openai`` backend pointed at the
  stub server: tenant API keys checked on every request, every call recorded — the capture process
  builds the events, runs the default governance pipeline (redaction, classification, eligibility,
  retention) and writes them through the Recorder's spool (fsync) into the LanceDB store. The same
  path as LiteLLM's: one more HTTP hop.
- ``molt <rev> → stub`` (with ``--compare-tree DIR``): the same, served from another checkout of this
  repo (a ``git worktree`` of an older commit) in this environment: a regression check in one rotation.
- ``molt → stub --ack-after-durable``: the same as ``molt → stub`` with ``molt serve --ack-after-durable``
  (each answer waits until the capture child holds its record in the fsynced spool): the latency cost of
  acknowledging only durable calls, beside the default in the same rotation.
- ``molt (in-process stub)``: the gateway serving the stub backend itself (no upstream hop), i.e.
  the gateway's own cost over the stub served directly.
- ``molt → stub /v1/responses``, ``molt → stub /v1/messages``: the same ``molt → stub`` server asked the
  same question in the Responses API's and Anthropic Messages API's wire formats (the same chat path
  behind them): what each translation costs beside Chat Completions, in the same rotation.
- ``molt (in-process stub) /v1/responses``, ``… /v1/messages``, and ``passthrough molt → molt /v1/…``:
  a gateway passing each API through (``molt serve --backend anthropic``, ``--backend openai --passthrough
  responses``; recording on) to that in-process-stub gateway as its upstream, beside the upstream asked
  directly in the same rotation: what passing through costs, as a ratio; beside ``molt → molt (chat)``, the
  same two-gateway chain on Chat Completions through the ordinary ``openai`` backend.
- ``litellm → stub``: LiteLLM's proxy (``litellm[proxy]`` from PyPI, in its own venv
  ``.venv-bench-litellm`` made by :func:`ensure_litellm`, telemetry off, a master key checked on
  every request, no database) routing model ``stub`` to the stub server.

Each target answers the same non-streamed question from a load generator (a minimal keep-alive
HTTP/1.1 client on uvloop, in this process): sequentially (concurrency 1, round-robin over the
targets, one request each in turn) and with 16 connections in a closed loop (four alternating slices
per target). Interleaving makes a busy neighbour on a shared machine slow every target alike. "Added"
latency is the target's percentile minus the stub's at the same concurrency; requests/s is what one
worker completes at concurrency 16.

Last, the upstream client alone: the gateway's ``molt.backends.http.HTTPPool`` (llhttp framing, through
httptools) beside httpx's ``AsyncClient``, one request each in turn to the stub server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LITELLM_VENV = ROOT / ".venv-bench-litellm"
LITELLM_SPEC = "litellm[proxy]==1.106.12"  # the newest whose proxy extras all resolve from the registry
KEY = "sk-bench-writer"
LITELLM_KEY = "sk-litellm-bench-0123456789abcdef0123456789abcdef"
QUESTION = "What is the status of order A-17?"
BODY = json.dumps({"model": "stub", "messages": [{"role": "user", "content": QUESTION}]}).encode()
#: The same question on the gateway's other wire formats, served by the same chat path (target name
#: suffix → path and body); every other target answers Chat Completions.
ROUTES = {
    " /v1/responses": ("/v1/responses", json.dumps({"model": "stub", "input": QUESTION}).encode()),
    " /v1/messages": ("/v1/messages", json.dumps({"model": "stub", "max_tokens": 256,
                                                  "messages": [{"role": "user", "content": QUESTION}]}).encode()),
}


ACK_DURABLE = "molt → stub --ack-after-durable"
INPROC = "molt (in-process stub)"
#: A passthrough target's name for each route (its upstream, asked directly, is ``INPROC + route``).
PASSTHROUGH = {" /v1/messages": "passthrough molt → molt /v1/messages",
               " /v1/responses": "passthrough molt → molt /v1/responses"}
#: The same two-gateway chain on Chat Completions (the openai backend, no passthrough): the peer of the
#: passthrough rows' added latency.
CHAIN = "molt → molt (chat)"


def route_of(name: str) -> tuple[str, bytes]:
    """The path and body a target is measured with."""
    return next((r for suffix, r in ROUTES.items() if name.endswith(suffix)), ("/v1/chat/completions", BODY))


# ------------------------------------------------------------------------------------------ setup


def ensure_litellm() -> Path | None:
    """The ``litellm`` executable of ``.venv-bench-litellm``, creating the venv on first use (its
    pins conflict with the main environment's). Returns None if it cannot be installed."""
    exe = LITELLM_VENV / "bin" / "litellm"
    if exe.exists():
        return exe
    print(f"setting up {LITELLM_VENV} ({LITELLM_SPEC}); this happens once ...", file=sys.stderr, flush=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", str(LITELLM_VENV)], check=True)
        subprocess.run([str(LITELLM_VENV / "bin" / "python"), "-m", "pip", "install", "-q",
                        "--disable-pip-version-check", "-c", str(ROOT / "requirements" / "constraints.txt"),
                        LITELLM_SPEC], check=True)
    except subprocess.CalledProcessError as exc:
        print(f"could not install LiteLLM ({exc}); its rows are left out", file=sys.stderr)
        return None
    return exe if exe.exists() else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def process(cmd: list[str], port: int, *, env: dict[str, str] | None = None, timeout: float = 120.0,
            health: str = "/health", headers: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """Run a server process until its health URL answers; stop it (process group) afterwards."""
    import httpx

    log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in the finally below
    proc = subprocess.Popen(cmd, env={**os.environ, **(env or {})}, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"{cmd[0]} exited while starting:\n{log.read().decode(errors='replace')[-3000:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}{health}", headers=headers, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{cmd[0]} did not become healthy in {timeout:g} s")
            time.sleep(0.2)
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
        log.close()


# ------------------------------------------------------------------------------------------ servers


def serve_molt(port: int, upstream: str | None, home: str) -> None:
    """The gateway process, as ``molt serve`` runs it: openai backend → ``upstream`` (or the
    in-process stub), tenant keys, every call recorded by the capture process (with the default
    governance pipeline when this build has one)."""
    import uvicorn

    from molt.backends import OpenAIBackend, StubBackend
    from molt.gateway import RoutingTable, VersionSpec, create_app
    from molt.gateway.cli import build_gateway, tune_process
    from molt.governance.access import KeyRing

    passthrough = os.environ.get("MOLT_BENCH_PASSTHROUGH")
    if passthrough == "messages" and upstream:  # the upstream is another Molt gateway, keys on
        from molt.backends import AnthropicBackend

        backend: Any = AnthropicBackend("molt-upstream", base_url=upstream, api_key=KEY, model="stub")
    elif passthrough == "responses" and upstream:
        backend = OpenAIBackend("molt-upstream", base_url=upstream, api_key=KEY, model="stub",
                                passthrough=("responses",))
    else:
        # the key is the one an upstream Molt gateway checks (the stub server ignores it)
        backend = (OpenAIBackend("stub-upstream", base_url=upstream, api_key=KEY, model="stub") if upstream
                   else StubBackend("stub-inproc"))
    record = os.environ.get("MOLT_BENCH_RECORD", "1") == "1"
    governance = "default" if governance_available() and os.environ.get("MOLT_BENCH_GOVERNANCE", "1") == "1" else None
    in_process = os.environ.get("MOLT_BENCH_CAPTURE_PROCESS", "1") != "1"
    config = None
    if os.environ.get("MOLT_BENCH_ACK_DURABLE") == "1":
        from molt.gateway import GatewayConfig

        config = GatewayConfig(ack_after_durable=True)
    gw, recorder, store = build_gateway(backend, model="stub", record=record, home=Path(home),
                                        capture_process=not in_process, governance=governance, config=config)
    gw.keyring = KeyRing.from_mapping({KEY: ("bench", "agent_writer")})
    gw.router.replace(RoutingTable.single("stub", VersionSpec(version="stub@base", backends=(backend.name,))))
    tune_process()
    from molt.gateway.http import HeaderTimeoutProtocol  # the protocol `molt serve` runs

    try:
        uvicorn.run(create_app(gw), host="127.0.0.1", port=port, log_level="warning", access_log=False,
                    loop="uvloop", http=HeaderTimeoutProtocol)
    finally:
        if recorder is not None:
            recorder.close()
        if store is not None:
            store.close()


def governance_available() -> bool:
    """Whether this build of molt has the governance pipeline (validate, authenticate, redact,
    classify, eligibility, retention) to run on recorded events."""
    try:
        from molt.governance import GovernancePipeline, GovernedSink  # noqa: F401
    except ImportError:
        return False
    return True


def litellm_config(upstream: str, path: Path) -> Path:
    path.write_text(
        "model_list:\n"
        "  - model_name: stub\n"
        "    litellm_params:\n"
        "      model: openai/stub\n"
        f"      api_base: {upstream}\n"
        "      api_key: unused\n"
        "litellm_settings:\n"
        "  telemetry: false\n"
        "  drop_params: true\n"
        "  set_verbose: false\n"
    )
    return path


# ------------------------------------------------------------------------------------------ load


class Conn:
    """One keep-alive HTTP/1.1 connection (the load generator's client: small and predictable)."""

    def __init__(self, port: int, path: str, body: bytes, key: str | None):
        self.port = port
        auth = f"Authorization: Bearer {key}\r\n" if key else ""
        self.request = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
                        f"{auth}Content-Length: {len(body)}\r\n\r\n").encode() + body
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self) -> int:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        assert self.reader is not None
        self.writer.write(self.request)
        status = int((await self.reader.readline()).split()[1])
        length, chunked = 0, False
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            name = name.strip().lower()
            if name == "content-length":
                length = int(value)
            elif name == "transfer-encoding" and "chunked" in value:
                chunked = True
        if chunked:
            while True:
                size = int((await self.reader.readline()).strip(), 16)
                await self.reader.readexactly(size + 2)
                if size == 0:
                    break
        else:
            await self.reader.readexactly(length)
        return status

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def load(port: int, path: str, key: str | None, *, concurrency: int, requests: int | None,
               seconds: float, body: bytes = BODY) -> tuple[list[float], float]:
    """Closed-loop load; returns (latencies in ms, wall seconds)."""
    lat: list[float] = []
    stop = time.perf_counter() + seconds
    count = 0
    errors = 0

    async def worker() -> None:
        nonlocal count, errors
        c = Conn(port, path, body, key)
        try:
            while time.perf_counter() < stop and (requests is None or count < requests):
                count += 1
                t0 = time.perf_counter()
                status = await c.post()
                lat.append((time.perf_counter() - t0) * 1000.0)
                if status != 200:
                    errors += 1
        finally:
            c.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{errors} requests to port {port} failed")
    return lat, wall


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(q / 100 * (len(s) - 1)))]


def measure(targets: list[tuple[str, int, str | None]], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Measure every target interleaved, so a busy neighbour on a shared machine slows them alike:
    concurrency 1 goes round-robin one request at a time; concurrency 16 alternates short slices."""
    import uvloop

    async def run() -> list[dict[str, Any]]:
        for name, port, key in targets:  # warm-up
            path, body = route_of(name)
            await load(port, path, key, concurrency=4, requests=200, seconds=5, body=body)
        conns = [Conn(port, *route_of(name), key) for name, port, key in targets]
        seq: list[list[float]] = [[] for _ in targets]
        stop = time.perf_counter() + args.seconds * len(targets)
        for _ in range(args.requests):
            if time.perf_counter() > stop:
                break
            for i, c in enumerate(conns):
                t0 = time.perf_counter()
                if await c.post() != 200:
                    raise RuntimeError(f"{targets[i][0]} answered an error")
                seq[i].append((time.perf_counter() - t0) * 1000.0)
        for c in conns:
            c.close()
        conc: list[list[float]] = [[] for _ in targets]
        wall = [0.0] * len(targets)
        slices = 4
        for _ in range(slices):
            for i, (name, port, key) in enumerate(targets):
                path, body = route_of(name)
                lat, w = await load(port, path, key, concurrency=16, requests=None, seconds=args.seconds / slices,
                                    body=body)
                conc[i] += lat
                wall[i] += w
        out = []
        for i, (name, _, _) in enumerate(targets):
            out.append({"name": name, "n1": len(seq[i]), "p50_1": pct(seq[i], 50), "p99_1": pct(seq[i], 99),
                        "mean_1": statistics.fmean(seq[i]), "n16": len(conc[i]), "p50_16": pct(conc[i], 50),
                        "p99_16": pct(conc[i], 99), "rps_16": len(conc[i]) / wall[i]})
            r = out[-1]
            print(f"  {name:<26} c=1 p50 {r['p50_1']:.3f} ms p99 {r['p99_1']:.3f} ms | c=16 p50 {r['p50_16']:.3f} ms "
                  f"p99 {r['p99_16']:.3f} ms | {r['rps_16']:.0f} req/s", file=sys.stderr, flush=True)
        return out

    return uvloop.run(run())


def measure_client(upstream: str, requests: int) -> list[dict[str, Any]]:
    """The upstream client's own cost: the gateway's :class:`molt.backends.http.HTTPPool` (llhttp framing)
    and httpx's ``AsyncClient`` (a general-purpose peer) posting the same request to the stub server,
    one request each in turn on a keep-alive connection; p50 / p99 per request."""
    import httpx
    import uvloop

    from molt.backends.http import HTTPPool

    async def run() -> list[dict[str, Any]]:
        pool = HTTPPool(upstream)
        client = httpx.AsyncClient(base_url=upstream)

        async def via_pool() -> int:
            return (await pool.request("POST", "/chat/completions", BODY)).status

        async def via_httpx() -> int:
            return (await client.post("/chat/completions", content=BODY,
                                      headers={"content-type": "application/json"})).status_code

        clients = [("molt.backends.http (httptools)", via_pool), ("httpx.AsyncClient", via_httpx)]
        lat: list[list[float]] = [[] for _ in clients]
        try:
            for k in range(requests + 100):
                for i, (name, post) in enumerate(clients):
                    t0 = time.perf_counter()
                    if await post() != 200:
                        raise RuntimeError(f"{name} got an error from the stub")
                    if k >= 100:  # after a warm-up
                        lat[i].append((time.perf_counter() - t0) * 1000.0)
        finally:
            await pool.aclose()
            await client.aclose()
        return [{"name": name, "n": len(xs), "p50": pct(xs, 50), "p99": pct(xs, 99)}
                for (name, _), xs in zip(clients, lat, strict=True)]

    return uvloop.run(run())


# ------------------------------------------------------------------------------------------ main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0,
                    help="seconds per target of each phase (default 5)")
    ap.add_argument("--requests", type=int, default=800, help="most sequential requests per target (default 800)")
    ap.add_argument("--no-litellm", action="store_true", help="leave LiteLLM out")
    ap.add_argument("--compare-tree", type=Path, default=None, metavar="DIR",
                    help="also run the gateway of another checkout of this repo (e.g. a `git worktree` of an older "
                         "commit) in front of the same stub, in the same rotation: a regression check in one run")
    ap.add_argument("--json", type=Path, default=ROOT / "bench" / "out" / "bench_gateway.json")
    ap.add_argument("--serve-molt", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--upstream", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--home", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_molt:
        serve_molt(args.serve_molt, args.upstream, args.home)
        return

    t_start = time.perf_counter()
    litellm = None if args.no_litellm else ensure_litellm()
    py = sys.executable
    quiet = {"PYTHONWARNINGS": "ignore"}
    governance = governance_available()
    with tempfile.TemporaryDirectory(prefix="molt-bench-gw-") as tmp:
        stub_port = free_port()
        stub_cmd = [py, "-c", f"import uvicorn; from molt.backends.stub import stub_asgi_app; uvicorn.run("
                              f"stub_asgi_app(), host='127.0.0.1', port={stub_port}, log_level='warning', "
                              f"access_log=False, loop='uvloop', http='httptools')"]
        upstream = f"http://127.0.0.1:{stub_port}/v1"
        auth = {"authorization": f"Bearer {KEY}"}
        with contextlib.ExitStack() as stack:
            stack.enter_context(process(stub_cmd, stub_port, env=quiet))
            targets: list[tuple[str, int, str | None]] = [("stub (direct)", stub_port, None)]
            port = free_port()
            cmd = [py, __file__, "--serve-molt", str(port), "--upstream", upstream, "--home", tmp + "/a"]
            stack.enter_context(process(cmd, port, env=quiet, headers=auth))
            targets.append(("molt → stub", port, KEY))
            # the same server on its Responses and Messages routes, beside its Chat Completions
            targets += [("molt → stub" + suffix, port, KEY) for suffix in ROUTES]
            port = free_port()
            cmd = [py, __file__, "--serve-molt", str(port), "--upstream", upstream, "--home", tmp + "/d"]
            stack.enter_context(process(cmd, port, env={**quiet, "MOLT_BENCH_ACK_DURABLE": "1"}, headers=auth))
            targets.append((ACK_DURABLE, port, KEY))
            if args.compare_tree is not None:
                tree = args.compare_tree.resolve()
                if not (tree / "core" / "src" / "molt").is_dir():
                    raise SystemExit(f"--compare-tree {tree}: not a checkout of this repo (no core/src/molt)")
                port = free_port()
                rev = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True,
                                     text=True).stdout.strip() or tree.name
                # That checkout's own bench file and sources, in this environment (its dependencies).
                cmd = [py, str(tree / "bench" / "bench_gateway.py"), "--serve-molt", str(port), "--upstream", upstream,
                       "--home", tmp + "/c"]
                env = {**quiet, "PYTHONPATH": str(tree / "core" / "src")}
                stack.enter_context(process(cmd, port, env=env, headers=auth))
                targets.append((f"molt {rev} → stub", port, KEY))
            port = free_port()
            cmd = [py, __file__, "--serve-molt", str(port), "--home", tmp + "/b"]
            stack.enter_context(process(cmd, port, env=quiet, headers=auth))
            targets.append((INPROC, port, KEY))
            # passthrough: a gateway relaying each API to that gateway, beside it asked directly
            inproc = f"http://127.0.0.1:{port}/v1"
            pport = free_port()
            cmd = [py, __file__, "--serve-molt", str(pport), "--upstream", inproc, "--home", tmp + "/p-chat"]
            stack.enter_context(process(cmd, pport, env=quiet, headers=auth))
            targets.append((CHAIN, pport, KEY))
            for suffix, name in PASSTHROUGH.items():
                targets.append((INPROC + suffix, port, KEY))
                pport = free_port()
                api = suffix.removeprefix(" /v1/")
                cmd = [py, __file__, "--serve-molt", str(pport), "--upstream", inproc, "--home", tmp + "/p-" + api]
                env = {**quiet, "MOLT_BENCH_PASSTHROUGH": api}
                stack.enter_context(process(cmd, pport, env=env, headers=auth))
                targets.append((name, pport, KEY))
            if litellm is not None:
                port = free_port()
                cfg = litellm_config(upstream, Path(tmp) / "litellm.yaml")
                # LiteLLM checks its master key on every request: the same work as Molt's tenant keys.
                env = {**quiet, "LITELLM_MASTER_KEY": LITELLM_KEY, "LITELLM_TELEMETRY": "False",
                       "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR", "LITELLM_MODE": "PRODUCTION",
                       "DISABLE_SCHEMA_UPDATE": "true"}
                lite_cmd = [str(litellm), "--config", str(cfg), "--host", "127.0.0.1", "--port", str(port),
                            "--num_workers", "1"]
                stack.enter_context(process(lite_cmd, port, env=env, timeout=240, health="/health/liveliness"))
                targets.append(("litellm → stub", port, LITELLM_KEY))
            print("measuring, interleaved (each server: one process, one worker) ...", file=sys.stderr, flush=True)
            results = measure(targets, args)
            clients = measure_client(upstream, args.requests)

    base = results[0]
    rows = []
    for r in results:
        rows.append({**r, "add_p50_1": r["p50_1"] - base["p50_1"], "add_p99_1": r["p99_1"] - base["p99_1"],
                     "add_p50_16": r["p50_16"] - base["p50_16"], "add_p99_16": r["p99_16"] - base["p99_16"]})
    print()
    print(f"Gateway overhead over a stub upstream — recording on, API keys on, governance "
          f"{'on' if governance else 'not built yet (keys only)'}; one worker each; 2-core machine")
    print()
    hdr = ("| path | c=1 p50 ms | c=1 p99 ms | added p50 (c=1) | added p99 (c=1) | c=16 p50 ms | c=16 p99 ms "
           "| added p50 (c=16) | added p99 (c=16) | req/s (c=16) |")
    print(hdr)
    print("|" + "---|" * 10)
    for r in rows:
        same = r is rows[0]
        add = (lambda v: "—") if same else (lambda v: f"{v:+.2f}")
        print(f"| {r['name']} | {r['p50_1']:.2f} | {r['p99_1']:.2f} | {add(r['add_p50_1'])} | {add(r['add_p99_1'])} "
              f"| {r['p50_16']:.2f} | {r['p99_16']:.2f} | {add(r['add_p50_16'])} | {add(r['add_p99_16'])} "
              f"| {r['rps_16']:.0f} |")
    by = {r["name"]: r for r in rows}
    molt, lite = by.get("molt → stub"), by.get("litellm → stub")
    print()
    if molt:
        print(f"molt → stub adds {molt['add_p50_1']:.2f} ms p50 / {molt['add_p99_1']:.2f} ms p99 at concurrency 1 "
              f"(goal ≤ 1 ms / ≤ 5 ms)")
        for suffix in ROUTES:
            if (r := by.get("molt → stub" + suffix)) is not None:
                print(f"molt → stub{suffix} adds {r['add_p50_1']:.2f} ms p50 / {r['add_p99_1']:.2f} ms p99 at "
                      f"concurrency 1 beside Chat Completions' {molt['add_p50_1']:.2f} / {molt['add_p99_1']:.2f} "
                      f"(the same server, same rotation); {r['rps_16']:.0f} vs {molt['rps_16']:.0f} req/s at c=16")
    chain, inproc = by.get(CHAIN), by.get(INPROC)
    if chain and inproc:
        print(f"{CHAIN} (the openai backend, recorded by both gateways) adds {chain['p50_1'] - inproc['p50_1']:.2f} ms "
              f"p50 / {chain['p99_1'] - inproc['p99_1']:.2f} ms p99 at concurrency 1 over its upstream asked directly")
    for suffix, name in PASSTHROUGH.items():
        pt, direct = by.get(name), by.get(INPROC + suffix)
        if pt and direct and direct["p50_1"] > 0:
            peer = (f"; the chat chain adds {chain['p50_1'] - inproc['p50_1']:.2f} ms" if chain and inproc else "")
            print(f"{name} (recorded by both gateways) adds {pt['p50_1'] - direct['p50_1']:.2f} ms p50 / "
                  f"{pt['p99_1'] - direct['p99_1']:.2f} ms p99 at concurrency 1 over its upstream asked directly "
                  f"(same rotation): {pt['p50_1'] / direct['p50_1']:.2f}× its p50{peer}; "
                  f"{pt['rps_16']:.0f} vs {direct['rps_16']:.0f} req/s at c=16")
    if molt and (d := by.get(ACK_DURABLE)) is not None:
        ratio = (f"{d['p50_1'] / molt['p50_1']:.2f}× the default's p50" if molt["p50_1"] > 0 else "")
        print(f"{ACK_DURABLE} adds {d['add_p50_1']:.2f} ms p50 / {d['add_p99_1']:.2f} ms p99 at concurrency 1 "
              f"beside the default's {molt['add_p50_1']:.2f} / {molt['add_p99_1']:.2f} (same rotation; {ratio}); "
              f"{d['rps_16']:.0f} vs {molt['rps_16']:.0f} req/s at c=16 = {d['rps_16'] / molt['rps_16']:.2f}×")
    other = next((r for r in rows if r["name"].startswith("molt ") and r["name"].endswith(" → stub")
                  and r["name"] != "molt → stub"), None)
    if molt and other:
        ratio = (f"{molt['add_p50_1'] / other['add_p50_1']:.2f}× that tree's" if other["add_p50_1"] > 0
                 else "not a ratio (that tree added nothing measurable)")
        print(f"{other['name']} adds {other['add_p50_1']:.2f} ms p50 / {other['add_p99_1']:.2f} ms p99 at "
              f"concurrency 1 in the same rotation: this tree's added p50 = {ratio}; "
              f"{molt['rps_16']:.0f} vs {other['rps_16']:.0f} req/s at c=16")
    if molt and lite:
        print(f"throughput: molt {molt['rps_16']:.0f} req/s vs LiteLLM {lite['rps_16']:.0f} req/s = "
              f"{molt['rps_16'] / lite['rps_16']:.1f}× (goal ≥ 10×)")
    print()
    print("The upstream client alone, to the stub server, sequential (round trip per request):")
    print()
    print("| client | p50 ms | p99 ms |")
    print("|---|---|---|")
    for c in clients:
        print(f"| {c['name']} | {c['p50']:.3f} | {c['p99']:.3f} |")
    pool_c, httpx_c = clients
    print(f"\n{pool_c['name']} p50 = {pool_c['p50'] / httpx_c['p50']:.2f}× httpx's")
    print(f"(whole run {time.perf_counter() - t_start:.0f} s; python bench/bench_gateway.py)")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"governance": governance, "rows": rows, "clients": clients}, indent=2))


if __name__ == "__main__":
    main()
