"""The reliability harness shared by ``tests/reliability`` (few trials, in CI) and
``bench/reliability/run.py`` (hundreds of trials): SIGKILL trials of ingest and of the gateway, and the
check that runs after each.

A trial runs a child process (``children/ingest_child.py`` or ``children/gateway_child.py``) for a few
"lives": each life is SIGKILLed at a random moment and the next one starts on the same spool and store
and continues the same trajectories. The child logs what was *acknowledged* (durable in the spool) to
``HOME/acked.jsonl``. :func:`check_home` then opens a Recorder on the spool (which delivers what the
dead process left), and counts acknowledged ids missing from the store (lost), ids stored more than once
(duplicated) and trajectories whose hash chain does not verify.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

CHILDREN = Path(__file__).resolve().parent / "children"
PYTHON = sys.executable

#: The governance policy of governed gateway trials: the crash tenant trains on its traffic.
TRAINING_POLICY: dict[str, Any] = {"name": "crash", "tenants": {"crash": {"training": {
    "opt_in": True, "require_consent": False}}}}


@dataclass
class TrialResult:
    """What one crash trial found (all counts; ``ok`` when nothing was lost, duplicated or broken)."""

    kind: str
    kills: int = 0
    acked_events: int = 0
    acked_rewards: int = 0
    stored_events: int = 0
    lost: int = 0
    duplicated: int = 0
    trajectories: int = 0
    chains_bad: int = 0
    requests_ok: int = 0
    requests_failed: int = 0
    training_events: int = 0  # events the training queue handed out (governed trials)
    training_duplicates: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.chains_bad or self.training_duplicates)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def read_acked(path: Path) -> tuple[list[str], list[str]]:
    """Acknowledged event and reward ids from an ``acked.jsonl`` (a torn last line is ignored)."""
    events: list[str] = []
    rewards: list[str] = []
    if not path.exists():
        return events, rewards
    for line in path.read_bytes().splitlines():
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        events.extend(rec["events"])
        rewards.extend(rec["rewards"])
    return events, rewards


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    return env


def _kill(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


# ------------------------------------------------------------------------------------------ ingest


def ingest_life(home: Path, seed: int, kill_after_s: float) -> None:
    """One life of the ingest child, SIGKILLed ``kill_after_s`` after it said it was ready."""
    proc = subprocess.Popen([PYTHON, str(CHILDREN / "ingest_child.py"), str(home), str(seed)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        if first.strip() != b"ready":
            err = proc.stderr.read().decode() if proc.stderr else ""
            raise RuntimeError(f"the ingest child did not start: {first!r} {err[-2000:]}")
        time.sleep(kill_after_s)
    finally:
        _kill(proc)


def ingest_trial(home: Path, seed: int, *, lives: int = 2, window: tuple[float, float] = (0.3, 2.5)) -> TrialResult:
    """SIGKILL the ingest child ``lives`` times at random points, then check the store."""
    rng = random.Random(seed)
    home.mkdir(parents=True, exist_ok=True)
    for life in range(lives):
        ingest_life(home, seed * 100 + life, rng.uniform(*window))
    res = check_home(home, "ingest")
    res.kills = lives
    return res


# ------------------------------------------------------------------------------------------ gateway


def _wait_up(url: str, proc: subprocess.Popen[Any], timeout: float = 60.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode() if proc.stderr else ""
            raise RuntimeError(f"the gateway child exited with {proc.returncode}: {err[-2000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/health", headers={"authorization": "Bearer sk-crash-admin"}, timeout=2).status_code:
                return
        time.sleep(0.05)
    raise RuntimeError("the gateway child did not come up")


def _gateway_load(url: str, tids: list[str], stop: threading.Event, seed: int, counts: Counter[str]) -> None:
    import httpx

    rng = random.Random(seed)
    h = {"authorization": "Bearer sk-crash-writer"}
    with httpx.Client(timeout=10) as client:
        while not stop.is_set():
            tid = rng.choice(tids)
            hdr = {**h, "x-molt-trajectory": tid}
            try:
                k = rng.random()
                if k < 0.6:
                    r = client.post(url + "/v1/chat/completions", headers=hdr, json={
                        "model": "stub", "messages": [{"role": "user", "content": "hello " * rng.randint(1, 50)}]})
                elif k < 0.8:
                    with client.stream("POST", url + "/v1/chat/completions", headers=hdr, json={
                            "model": "stub", "stream": True,
                            "messages": [{"role": "user", "content": "stream please"}]}) as r:
                        for _ in r.iter_bytes():
                            pass
                else:
                    r = client.post(url + "/v1/completions", headers=hdr,
                                    json={"model": "stub", "prompt": "complete " * rng.randint(1, 20)})
                counts["ok" if r.status_code == 200 else f"status {r.status_code}"] += 1
            except httpx.HTTPError:
                counts["failed"] += 1  # the kill: connections drop
                if stop.is_set():
                    return
                time.sleep(0.01)


def gateway_life(home: Path, tids: list[str], seed: int, kill_after_s: float, clients: int = 4,
                 governed: bool = False) -> Counter[str]:
    """One life of the gateway child under ``clients`` concurrent HTTP clients, SIGKILLed after
    ``kill_after_s`` seconds of load."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([PYTHON, str(CHILDREN / "gateway_child.py"), str(home), str(port),
                             *(["governed"] if governed else [])],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_env())
    counts: Counter[str] = Counter()
    stop = threading.Event()
    threads: list[threading.Thread] = []
    try:
        _wait_up(url, proc)
        acked = home / "acked.jsonl"
        before = acked.stat().st_size if acked.exists() else 0
        threads = [threading.Thread(target=_gateway_load, args=(url, tids, stop, seed * 10 + i, counts), daemon=True)
                   for i in range(clients)]
        for t in threads:
            t.start()
        # the kill window starts at this life's first acknowledgement (a cold governance pipeline on a busy
        # machine can take seconds), so every life has something acknowledged to lose
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (acked.stat().st_size if acked.exists() else 0) <= before:
            time.sleep(0.02)
        time.sleep(kill_after_s)
    finally:
        _kill(proc)  # SIGKILL under load
        stop.set()
        for t in threads:
            t.join(timeout=30)
    return counts


def gateway_trial(home: Path, seed: int, *, lives: int = 2, window: tuple[float, float] = (0.3, 2.0),
                  clients: int = 4, governed: bool = False) -> TrialResult:
    """SIGKILL the loaded gateway ``lives`` times (the same trajectories continue in every life)."""
    from molt.atdp.ids import new_id

    rng = random.Random(seed)
    home.mkdir(parents=True, exist_ok=True)
    tids = [new_id() for _ in range(6)]
    total: Counter[str] = Counter()
    for life in range(lives):
        total += gateway_life(home, tids, seed * 100 + life, rng.uniform(*window), clients, governed)
    res = check_home(home, "gateway", governed=governed)
    res.kills = lives
    res.requests_ok = total["ok"]
    res.requests_failed = sum(v for k, v in total.items() if k != "ok")
    return res


def serve_life(home: Path, tids: list[str], seed: int, kill_after_s: float, clients: int = 4
               ) -> tuple[Counter[str], int]:
    """One life of ``molt serve --backend stub`` as users run it (events built and written by its
    capture child process), SIGKILLed under load. Returns the request counts and how many of its child
    processes were still alive 10 s after the kill (an orphan would hold the spool lock)."""
    import psutil

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    keys = home / "keys.toml"
    if not keys.exists():
        keys.write_text('[[keys]]\nkey = "sk-crash-writer"\ntenant = "crash"\nrole = "agent_writer"\n'
                        '[[keys]]\nkey = "sk-crash-admin"\ntenant = "crash"\nrole = "admin"\n')
    env = {**_env(), "MOLT_HOME": str(home)}
    proc = subprocess.Popen([PYTHON, "-m", "molt.cli", "serve", "--backend", "stub", "--port", str(port), "--keys",
                             str(keys), "--log-level", "warning"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    counts: Counter[str] = Counter()
    stop = threading.Event()
    threads: list[threading.Thread] = []
    children: list[Any] = []
    try:
        _wait_up(url, proc, timeout=120)
        with contextlib.suppress(psutil.Error):
            children = psutil.Process(proc.pid).children(recursive=True)
        spooled = _spooled_bytes(home / "spool")
        threads = [threading.Thread(target=_gateway_load, args=(url, tids, stop, seed * 10 + i, counts), daemon=True)
                   for i in range(clients)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60  # the kill window starts once this life's capture child spooled
        while time.monotonic() < deadline and _spooled_bytes(home / "spool") <= spooled:
            time.sleep(0.02)
        time.sleep(kill_after_s)
    finally:
        _kill(proc)
        stop.set()
        for t in threads:
            t.join(timeout=30)
    deadline = time.monotonic() + 10
    alive = children
    while alive and time.monotonic() < deadline:
        alive = [c for c in alive if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.1)
    for c in alive:  # clean up after a failed check
        with contextlib.suppress(psutil.Error):
            c.kill()
    return counts, len(alive)


#: The inference routes an acknowledgement trial can load: path and body of one user turn.
ACK_ROUTES: dict[str, tuple[str, Callable[[str], dict[str, Any]]]] = {
    "chat": ("/v1/chat/completions", lambda text: {"model": "stub", "messages": [{"role": "user", "content": text}]}),
    "responses": ("/v1/responses", lambda text: {"model": "stub", "input": text}),
    "messages": ("/v1/messages", lambda text: {"model": "stub", "max_tokens": 64,
                                               "messages": [{"role": "user", "content": text}]}),
}


def _acked_load(url: str, stop: threading.Event, seed: int, acked: list[str], counts: Counter[str],
                route: str = "chat") -> None:
    """Non-streamed calls of one route; the event id of every answered (200) call is an acknowledgement."""
    import httpx

    rng = random.Random(seed)
    path, body = ACK_ROUTES[route]
    h = {"authorization": "Bearer sk-crash-writer"}
    with httpx.Client(timeout=10) as client:
        while not stop.is_set():
            try:
                r = client.post(url + path, headers={**h, "x-molt-session": f"s{rng.randint(0, 9)}"},
                                json=body("hello " * rng.randint(1, 50)))
                if r.status_code == 200:
                    acked.append(r.headers["x-molt-event-id"])
                counts["ok" if r.status_code == 200 else f"status {r.status_code}"] += 1
            except httpx.HTTPError:
                counts["failed"] += 1
                if stop.is_set():
                    return
                time.sleep(0.01)


def ack_trial(home: Path, seed: int, *, durable: bool, window: tuple[float, float] = (0.3, 1.5),
              clients: int = 4, route: str = "chat") -> TrialResult:
    """``kill -9`` of the whole ``molt serve`` (gateway and capture child, as a container's kill) under
    load, a random time in ``window`` after its capture child first spooled; the clients count an answered call as acknowledged. With
    ``durable`` (``--ack-after-durable``) no acknowledged call may be lost; without it, the calls lost
    are the acknowledgement window. Then the store is checked as after every crash trial."""
    rng = random.Random(seed)
    home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    keys = home / "keys.toml"
    keys.write_text('[[keys]]\nkey = "sk-crash-writer"\ntenant = "crash"\nrole = "agent_writer"\n'
                    '[[keys]]\nkey = "sk-crash-admin"\ntenant = "crash"\nrole = "admin"\n')
    env = {**_env(), "MOLT_HOME": str(home)}
    proc = subprocess.Popen([PYTHON, "-m", "molt.cli", "serve", "--backend", "stub", "--port", str(port), "--keys",
                             str(keys), "--log-level", "warning", "--evolve-every", "0", "--no-console",
                             *(["--ack-after-durable"] if durable else [])],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    acked: list[str] = []
    counts: Counter[str] = Counter()
    stop = threading.Event()
    threads: list[threading.Thread] = []
    try:
        _wait_up(url, proc, timeout=120)
        threads = [threading.Thread(target=_acked_load, args=(url, stop, seed * 10 + i, acked, counts, route),
                                    daemon=True)
                   for i in range(clients)]
        for t in threads:
            t.start()
        # the kill window starts once the capture child spools (a cold governance pipeline on a busy
        # machine takes seconds, during which every answered call of the default mode waits in its pipe)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (acked and _spooled_bytes(home / "spool") > 0):
            time.sleep(0.02)
        time.sleep(rng.uniform(*window))
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # the gateway and its capture child at once
        proc.wait(timeout=30)
        stop.set()
        for t in threads:
            t.join(timeout=30)
    (home / "acked.jsonl").write_bytes(orjson.dumps({"events": list(acked), "rewards": []}) + b"\n")
    deadline = time.monotonic() + 60  # the spool lock goes with the last process of the killed group
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    res = check_home(home, "serve-ack" if durable else "serve-noack")
    res.kills = 1
    res.requests_ok = counts["ok"]
    res.requests_failed = sum(v for k, v in counts.items() if k != "ok")
    return res


def _spooled_bytes(spool: Path) -> int:
    total = 0
    for p in spool.glob("*.seg"):
        with contextlib.suppress(OSError):
            total += p.stat().st_size
    return total


def serve_trial(home: Path, seed: int, *, lives: int = 2, window: tuple[float, float] = (0.5, 2.0)) -> TrialResult:
    """SIGKILL ``molt serve`` (capture child process) ``lives`` times under load; then check the store.
    Acknowledgements happen in the capture child, which this trial cannot observe, so ``lost`` stays 0
    here: it checks duplicates, chains, orphaned children and that every restart comes up."""
    from molt.atdp.ids import new_id

    rng = random.Random(seed)
    home.mkdir(parents=True, exist_ok=True)
    tids = [new_id() for _ in range(6)]
    total: Counter[str] = Counter()
    orphans = 0
    for life in range(lives):
        counts, left = serve_life(home, tids, seed * 100 + life, rng.uniform(*window))
        total += counts
        orphans += left
    res = check_home(home, "serve")
    res.kills = lives
    res.requests_ok = total["ok"]
    res.requests_failed = sum(v for k, v in total.items() if k != "ok")
    if orphans:
        res.problems.append(f"{orphans} capture child process(es) outlived a SIGKILLed gateway by 10 s")
    return res


# ------------------------------------------------------------------------------------------ the check


def check_home(home: Path, kind: str, governed: bool = False) -> TrialResult:
    """Restart on ``home`` (a Recorder drains the dead process's spool into the store), then count lost
    and duplicated acknowledged records and verify every chain, also after one more event per
    trajectory (the chain must continue where the dead process left it)."""
    import pyarrow.compute as pc

    from molt.atdp import Event, EventKind, UserMessage
    from molt.capture import Recorder
    from molt.store import Store

    acked, acked_rewards = read_acked(home / "acked.jsonl")
    res = TrialResult(kind=kind, acked_events=len(acked), acked_rewards=len(acked_rewards))
    store = Store.open(home / "store", auto_compact=False)
    kw: dict[str, Any] = {}
    sink: Any = store
    if governed:
        from molt.governance import GovernancePipeline, GovernancePolicy, GovernedSink

        kw["pipeline"] = GovernancePipeline(GovernancePolicy.model_validate(TRAINING_POLICY))
        sink = GovernedSink(store)
    rec = Recorder(sink, spool_dir=home / "spool", **kw)
    try:
        if not rec.flush(timeout=120, deliver=True):
            res.problems.append("the restarted Recorder did not drain the spool in 120 s")
        ev = store._where("events", None, ["event_id", "trajectory_id"])
        stored = ev.column("event_id").to_pylist()
        res.stored_events = len(stored)
        dup = [i for i, n in Counter(stored).items() if n > 1]
        rw = store._where("rewards", None, ["annotation_id"]).column("annotation_id").to_pylist()
        dup += [i for i, n in Counter(rw).items() if n > 1]
        res.duplicated = len(dup)
        lost = (set(acked) - set(stored)) | (set(acked_rewards) - set(rw))
        res.lost = len(lost)
        if lost:
            res.problems.append(f"lost e.g. {sorted(lost)[:3]}")
        if dup:
            res.problems.append(f"duplicated e.g. {dup[:3]}")
        tids = pc.unique(ev.column("trajectory_id")).to_pylist() if ev.num_rows else []
        res.trajectories = len(tids)
        for tid in tids:  # the next life continues every chain
            rec.record(Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE, action=UserMessage(content="again"),
                             metadata={"tenant_id": "crash"}))
        if not rec.flush(timeout=120, deliver=True):
            res.problems.append("the continuation events were not delivered in 120 s")
        for tid in tids:
            report = store.verify(tid)
            if not report.ok:
                res.chains_bad += 1
                res.problems.append(f"chain {tid}: {report.problems[:2]}")
        if governed:
            _check_training_queue(store, res)
    finally:
        rec.close()
        store.close()
    return res


def _check_training_queue(store: Any, res: TrialResult) -> None:
    """Every eligible trajectory the training queue hands a trainer holds each event once."""
    from molt.governance import GovernancePolicy, TrainingQueue
    from molt.governance.access import Principal, Role

    queue = TrainingQueue(store, GovernancePolicy.model_validate(TRAINING_POLICY), Principal("crash", Role.TRAINER))
    trajs = list(queue.eligible_trajectories())
    if not trajs:
        res.problems.append("the training queue handed out no trajectory")
    for traj in trajs:
        ids = [e.event_id for e in traj.events]
        res.training_events += len(ids)
        res.training_duplicates += len(ids) - len(set(ids))
    if res.training_duplicates:
        res.problems.append(f"{res.training_duplicates} duplicate events in the training queue")


# ------------------------------------------------------------------------------------------ exit, sink down


class Blackhole:
    """A loopback listener that accepts connections and never answers (an unreachable remote sink)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = int(self.sock.getsockname()[1])
        self.conns: list[socket.socket] = []
        self._stop = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
                self.conns.append(conn)  # held open, never read or answered
            except OSError:
                continue

    def close(self) -> None:
        self._stop = True
        self.thread.join(timeout=5)
        for c in self.conns:
            c.close()
        self.sock.close()


@dataclass
class ExitResult:
    """One exit-with-the-sink-down run."""

    mode: str
    returncode: int | None
    exit_s: float  # from the child's last line to its exit (interpreter shutdown, atexit included)
    molt_exit_s: float  # of which Molt's exit handlers (drain adapters, spool flush, bounded delivery)
    acked: int
    expected: int  # records that must be delivered on the next start
    delivered: int
    missing: int


def exit_trial(home: Path, mode: str, n: int = 50, timeout: float = 60.0) -> ExitResult:
    """Run ``children/exit_child.py`` with a blackholed sink, then deliver its spool from a new Recorder."""
    home.mkdir(parents=True, exist_ok=True)
    hole = Blackhole()
    try:
        proc = subprocess.Popen([PYTHON, str(CHILDREN / "exit_child.py"), str(home), mode, str(n), str(hole.port)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill(proc)
            out, err = proc.communicate()
        t_exit = time.time()
    finally:
        hole.close()
    lines = out.decode().splitlines()
    acked: list[str] = []
    t_last = t_exit
    t_molt = t_exit
    for line in lines:
        if line.startswith("acked "):
            acked = orjson.loads(line[6:])
        elif line.startswith("exiting "):
            t_last = float(line.split()[1])
        elif line.startswith("atexit-done "):
            t_molt = float(line.split()[1])
    if proc.returncode != 0:
        raise RuntimeError(f"exit child failed ({proc.returncode}): {err.decode()[-2000:]}")
    texts = _deliver_and_read(home)
    if mode == "recorder":
        want = {f"acked {i}" for i in range(n)} | {f"unflushed {i}" for i in range(n)}
    else:
        want = {f"marker-{i}" for i in range(n)}
    found = {w for w in want if w in texts}
    return ExitResult(mode=mode, returncode=proc.returncode, exit_s=t_exit - t_last, molt_exit_s=t_molt - t_last,
                      acked=len(acked),
                      expected=len(want), delivered=len(found), missing=len(want) - len(found))


def _deliver_and_read(home: Path) -> str:
    """Open a Recorder into a real store on the spool the child left, deliver, and return every stored
    event's JSON concatenated (to look for the markers)."""
    from molt.capture import Recorder
    from molt.store import Store

    store = Store.open(home / "store", auto_compact=False)
    rec = Recorder(store, spool_dir=home / "spool")
    try:
        if not rec.flush(timeout=60, deliver=True):
            raise RuntimeError("the spool was not delivered on the next start")
        parts = []
        for tid in store.trajectory_ids():
            parts.extend(e.model_dump_json() for e in store.trajectory(tid).events)
        return "\n".join(parts)
    finally:
        rec.close()
        store.close()
