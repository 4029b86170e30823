"""Gateway metrics in the Prometheus text exposition format (no client library: a few dicts), and
the status file a running process leaves for ``molt doctor``.

Counters and histograms are updated on the event loop's thread only, so plain ints suffice.

:class:`StatusReporter` writes a process's fault counters and backlog every few seconds to
``$MOLT_HOME/status/<component>-<pid>.json`` (written aside, then renamed over the old one, so a
reader never sees half a file); ``molt doctor`` reads every such file, says whether its process is
still running, and shows each non-zero fault counter. A file rather than a scrape of ``/metrics``:
doctor needs no URL or key, sees processes that serve no HTTP, and still shows what a process that
stopped or died last counted (its spool backlog, say). Example::

    reporter = StatusReporter(home, "molt-serve", {"gateway": lambda: gateway_status(gw)})
    reporter.start()       # writes now and every interval_s
    ...
    reporter.close()       # a last write, marked stopped
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

__all__ = ["Metrics", "StatusReporter", "gateway_status", "read_status"]

log = logging.getLogger("molt.gateway.metrics")

#: A status source: ``{"faults": {name: count}, "state": {name: value}}`` (either part optional).
StatusSource = Callable[[], Mapping[str, Mapping[str, Any]]]
#: Backend call outcomes that are failures (``ok`` is not).
_BACKEND_FAILURES = ("error", "timeout", "unavailable", "stream_error")

#: Request latency buckets, seconds.
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def _labels(**kv: str) -> str:
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in kv.items())
    return "{" + inner + "}" if inner else ""


def _escape(v: str) -> str:
    return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class _Histogram:
    __slots__ = ("counts", "sum", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)
        self.sum = 0.0
        self.total = 0

    def observe(self, v: float) -> None:
        self.counts[bisect.bisect_left(BUCKETS, v)] += 1
        self.sum += v
        self.total += 1


class Metrics:
    """The gateway's counters; :meth:`render` writes them out."""

    def __init__(self) -> None:
        self.requests: defaultdict[tuple[str, str], int] = defaultdict(int)
        self.latency: defaultdict[str, _Histogram] = defaultdict(_Histogram)
        self.backend_requests: defaultdict[tuple[str, str, str], int] = defaultdict(int)
        self.tokens: defaultdict[tuple[str, str], int] = defaultdict(int)
        self.failovers = 0
        self.stream_errors = 0
        self.inflight = 0

    def observe(self, endpoint: str, status: int, seconds: float) -> None:
        """Count a finished request and its latency."""
        self.requests[(endpoint, str(status))] += 1
        self.latency[endpoint].observe(seconds)

    def backend(self, backend: str, version: str, outcome: str) -> None:
        """Count a backend call by outcome (``ok``, ``error``, ``timeout``, ``unavailable``, ``stream_error``)."""
        self.backend_requests[(backend, version, outcome)] += 1

    def add_tokens(self, version: str, prompt: int, completion: int) -> None:
        """Count tokens served by a policy version."""
        self.tokens[(version, "prompt")] += prompt
        self.tokens[(version, "completion")] += completion

    def render(self, gauges: Iterable[tuple[str, str, dict[str, str], float]] = ()) -> str:
        """The exposition text. ``gauges`` adds ``(name, help, labels, value)`` samples."""
        out: list[str] = []
        out += ["# HELP molt_gateway_requests_total Requests served, by endpoint and HTTP status.",
                "# TYPE molt_gateway_requests_total counter"]
        for (ep, st), n in sorted(self.requests.items()):
            out.append(f"molt_gateway_requests_total{_labels(endpoint=ep, status=st)} {n}")
        out += ["# HELP molt_gateway_request_duration_seconds Request latency inside the gateway.",
                "# TYPE molt_gateway_request_duration_seconds histogram"]
        for ep, h in sorted(self.latency.items()):
            acc = 0
            for le, c in zip(BUCKETS, h.counts, strict=False):
                acc += c
                out.append(f'molt_gateway_request_duration_seconds_bucket{{endpoint="{_escape(ep)}",le="{le}"}} {acc}')
            out.append(f'molt_gateway_request_duration_seconds_bucket{{endpoint="{_escape(ep)}",le="+Inf"}} {h.total}')
            out.append(f"molt_gateway_request_duration_seconds_sum{_labels(endpoint=ep)} {h.sum:.6f}")
            out.append(f"molt_gateway_request_duration_seconds_count{_labels(endpoint=ep)} {h.total}")
        out += ["# HELP molt_gateway_backend_requests_total Backend calls, by backend, policy version and outcome.",
                "# TYPE molt_gateway_backend_requests_total counter"]
        for (b, v, o), n in sorted(self.backend_requests.items()):
            out.append(f"molt_gateway_backend_requests_total{_labels(backend=b, version=v, outcome=o)} {n}")
        out += ["# HELP molt_gateway_tokens_total Tokens served, by policy version and kind.",
                "# TYPE molt_gateway_tokens_total counter"]
        for (v, kind), n in sorted(self.tokens.items()):
            out.append(f"molt_gateway_tokens_total{_labels(version=v, kind=kind)} {n}")
        out += ["# HELP molt_gateway_failovers_total Requests routed away from their first choice.",
                "# TYPE molt_gateway_failovers_total counter", f"molt_gateway_failovers_total {self.failovers}",
                "# HELP molt_gateway_stream_errors_total Streams cut short by a backend failure.",
                "# TYPE molt_gateway_stream_errors_total counter",
                f"molt_gateway_stream_errors_total {self.stream_errors}",
                "# HELP molt_gateway_inflight_requests Requests being served now.",
                "# TYPE molt_gateway_inflight_requests gauge", f"molt_gateway_inflight_requests {self.inflight}"]
        seen: set[str] = set()
        for name, help_, labels, value in gauges:
            if name not in seen:
                out += [f"# HELP {name} {help_}", f"# TYPE {name} gauge"]
                seen.add(name)
            out.append(f"{name}{_labels(**labels)} {value:g}")
        return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------- status file


def gateway_status(gw: Any) -> dict[str, dict[str, Any]]:
    """The fault counters and backlog of a :class:`~molt.gateway.service.Gateway` and its recorder."""
    m = gw.metrics
    faults: dict[str, Any] = {
        "gateway.backend_failures": sum(n for (_, _, o), n in m.backend_requests.items() if o in _BACKEND_FAILURES),
        "gateway.failovers": m.failovers, "gateway.stream_errors": m.stream_errors}
    state: dict[str, Any] = {"gateway.requests": sum(m.requests.values())}
    if gw.capture is not None:
        faults["gateway.capture_failures"] = gw.capture.failed
    if gw.recorder is not None and hasattr(gw.recorder, "stats"):
        s = gw.recorder.stats
        faults.update({"recorder.sink_errors": s.sink_errors, "recorder.writer_errors": s.writer_errors,
                       "recorder.dropped": s.dropped_queue_full + s.dropped_spool_full,
                       "recorder.quarantined": s.quarantined})
        state.update({"recorder.spool_pending_bytes": s.spool_pending_bytes,
                      "recorder.pending_in_queue": s.pending_in_queue, "recorder.delivered": s.delivered,
                      "recorder.last_error": s.last_error})
    return {"faults": faults, "state": state}


class StatusReporter:
    """Writes the fault counters of this process to ``home/status/<component>-<pid>.json`` every
    ``interval_s`` seconds (see the module docstring). ``sources`` maps a name to a
    :data:`StatusSource`; a source that raises is reported as ``<name>.status_error`` and the others
    are still written. Files of the same component whose process is gone are removed at start."""

    def __init__(self, home: str | os.PathLike[str], component: str, sources: Mapping[str, StatusSource] | None = None,
                 *, interval_s: float = 5.0):
        self.dir = Path(home) / "status"
        self.component = component
        self.sources: dict[str, StatusSource] = dict(sources or {})
        self.interval_s = interval_s
        self.path = self.dir / f"{component}-{os.getpid()}.json"
        self.started_at = datetime.now(UTC)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def snapshot(self, *, stopped: bool = False) -> dict[str, Any]:
        """What :meth:`write` writes."""
        faults: dict[str, Any] = {}
        state: dict[str, Any] = {}
        for name, source in list(self.sources.items()):
            try:
                got = source()
            except Exception as exc:  # one broken source must not hide the others
                faults[f"{name}.status_error"] = 1
                state[f"{name}.status_error"] = f"{type(exc).__name__}: {exc}"
                continue
            faults.update(got.get("faults") or {})
            state.update(got.get("state") or {})
        return {"component": self.component, "pid": os.getpid(), "started_at": self.started_at.isoformat(),
                "updated_at": datetime.now(UTC).isoformat(), "interval_s": self.interval_s, "stopped": stopped,
                "faults": faults, "state": state}

    def write(self, *, stopped: bool = False) -> Path:
        """Write the status file now (atomically) and return its path."""
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_bytes(orjson.dumps(self.snapshot(stopped=stopped), default=str, option=orjson.OPT_INDENT_2))
        os.replace(tmp, self.path)
        return self.path

    def start(self) -> StatusReporter:
        """Remove stale files of this component, write once, then every ``interval_s`` on a thread."""
        for old in self.dir.glob(f"{self.component}-*.json"):
            pid = old.stem.rsplit("-", 1)[-1]
            if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
                with contextlib.suppress(OSError):
                    old.unlink()
        self.write()

        def loop() -> None:
            while not self._stop.wait(self.interval_s):
                try:
                    self.write()
                except OSError as exc:  # a full disk must not take the reporter down for good
                    log.warning("Writing the status file %s failed (%s); retrying.", self.path, exc)

        self._thread = threading.Thread(target=loop, name=f"molt-status-{self.component}", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop the thread and write a last status, marked ``stopped``."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10.0)
        with contextlib.suppress(OSError):
            self.write(stopped=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_status(home: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every status file under ``home/status`` (newest first), each with ``running`` (its process is
    alive and wrote within three intervals) and ``age_s``; an unreadable file comes back with ``error``."""
    out: list[dict[str, Any]] = []
    now = time.time()
    for path in sorted(Path(home, "status").glob("*.json")):
        try:
            st = orjson.loads(path.read_bytes())
            age = now - datetime.fromisoformat(st["updated_at"]).timestamp()
        except (OSError, ValueError, KeyError, TypeError) as exc:
            out.append({"component": path.stem, "path": str(path), "error": f"{type(exc).__name__}: {exc}"})
            continue
        fresh = age <= 3 * float(st.get("interval_s") or 5.0) + 5.0
        pid = int(st.get("pid") or 0)
        st.update(path=str(path), age_s=age, running=not st.get("stopped") and fresh and pid > 0 and _alive(pid))
        out.append(st)
    out.sort(key=lambda s: ("error" in s, float(s.get("age_s") or 0.0)))
    return out
