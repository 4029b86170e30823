"""Gateway metrics in the Prometheus text exposition format (no client library: a few dicts), and the
gateway's part of the status file ``molt doctor`` reads (:func:`gateway_status`; the file itself is
:class:`molt.status.StatusReporter`).

Counters and histograms are updated on the event loop's thread only, so plain ints suffice.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["Metrics", "gateway_status"]

#: Backend call outcomes that are failures (``ok`` is not).
_BACKEND_FAILURES = ("error", "timeout", "unavailable", "stream_error")

#: Distinct ``endpoint`` labels kept; any further one counts as ``other``. Endpoints are route
#: templates (``/v1/molt/trajectories/{trajectory_id}/end``), a few dozen, never raw paths: a raw path
#: carries ids (one series per id, unbounded, and another tenant's ids readable by any key).
MAX_ENDPOINTS = 64

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

    def lines(self, name: str, **labels: str) -> list[str]:
        """The exposition lines of this histogram (cumulative buckets, sum, count)."""
        inner = "".join(f'{k}="{_escape(v)}",' for k, v in labels.items())
        out, acc = [], 0
        for le, c in zip(BUCKETS, self.counts, strict=False):
            acc += c
            out.append(f'{name}_bucket{{{inner}le="{le}"}} {acc}')
        out.append(f'{name}_bucket{{{inner}le="+Inf"}} {self.total}')
        out.append(f"{name}_sum{_labels(**labels)} {self.sum:.6f}")
        out.append(f"{name}_count{_labels(**labels)} {self.total}")
        return out


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
        #: How late the event loop ran a timer (:meth:`Gateway.start`'s lag monitor): while it is
        #: late, no request is served. The largest since start, and its histogram.
        self.loop_lag = _Histogram()
        self.loop_lag_max = 0.0

    def observe_loop_lag(self, seconds: float) -> None:
        """Record one measurement of the event loop's lag."""
        self.loop_lag.observe(seconds)
        self.loop_lag_max = max(self.loop_lag_max, seconds)

    def observe(self, endpoint: str, status: int, seconds: float) -> None:
        """Count a finished request and its latency (``endpoint``: the route template)."""
        if endpoint not in self.latency and len(self.latency) >= MAX_ENDPOINTS:
            endpoint = "other"
        self.requests[(endpoint, str(status))] += 1
        self.latency[endpoint].observe(seconds)

    def backend(self, backend: str, version: str, outcome: str) -> None:
        """Count a backend call by outcome (``ok``, ``error``, ``timeout``, ``unavailable``, ``stream_error``)."""
        self.backend_requests[(backend, version, outcome)] += 1

    def add_tokens(self, version: str, prompt: int, completion: int) -> None:
        """Count tokens served by a policy version."""
        self.tokens[(version, "prompt")] += prompt
        self.tokens[(version, "completion")] += completion

    def render(self, gauges: Iterable[tuple[str, str, dict[str, str], float]] = (),
               version_visible: Callable[[str], bool] | None = None) -> str:
        """The exposition text. ``gauges`` adds ``(name, help, labels, value)`` samples;
        ``version_visible`` (the reader's: a tenant sees shared versions and its own) filters the
        series labelled by policy version."""
        seen_v = version_visible or (lambda v: True)
        out: list[str] = []
        out += ["# HELP molt_gateway_requests_total Requests served, by endpoint and HTTP status.",
                "# TYPE molt_gateway_requests_total counter"]
        for (ep, st), n in sorted(self.requests.items()):
            out.append(f"molt_gateway_requests_total{_labels(endpoint=ep, status=st)} {n}")
        out += ["# HELP molt_gateway_request_duration_seconds Request latency inside the gateway.",
                "# TYPE molt_gateway_request_duration_seconds histogram"]
        for ep, h in sorted(self.latency.items()):
            out += h.lines("molt_gateway_request_duration_seconds", endpoint=ep)
        out += ["# HELP molt_gateway_event_loop_lag_seconds How late the event loop ran a 0.1 s timer.",
                "# TYPE molt_gateway_event_loop_lag_seconds histogram", *self.loop_lag.lines(
                    "molt_gateway_event_loop_lag_seconds")]
        out += ["# HELP molt_gateway_backend_requests_total Backend calls, by backend, policy version and outcome.",
                "# TYPE molt_gateway_backend_requests_total counter"]
        for (b, v, o), n in sorted(self.backend_requests.items()):
            if seen_v(v):
                out.append(f"molt_gateway_backend_requests_total{_labels(backend=b, version=v, outcome=o)} {n}")
        out += ["# HELP molt_gateway_tokens_total Tokens served, by policy version and kind.",
                "# TYPE molt_gateway_tokens_total counter"]
        for (v, kind), n in sorted(self.tokens.items()):
            if seen_v(v):
                out.append(f"molt_gateway_tokens_total{_labels(version=v, kind=kind)} {n}")
        out += ["# HELP molt_gateway_failovers_total Requests routed away from their first choice.",
                "# TYPE molt_gateway_failovers_total counter", f"molt_gateway_failovers_total {self.failovers}",
                "# HELP molt_gateway_stream_errors_total Streams cut short by a backend failure.",
                "# TYPE molt_gateway_stream_errors_total counter",
                f"molt_gateway_stream_errors_total {self.stream_errors}",
                "# HELP molt_gateway_event_loop_lag_max_seconds The longest the event loop was late (serving nothing).",
                "# TYPE molt_gateway_event_loop_lag_max_seconds gauge",
                f"molt_gateway_event_loop_lag_max_seconds {self.loop_lag_max:.6f}",
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
        "gateway.failovers": m.failovers, "gateway.stream_errors": m.stream_errors,
        "gateway.harness_fallbacks": getattr(gw, "harness_fallbacks", 0)}
    state: dict[str, Any] = {"gateway.requests": sum(m.requests.values()),
                             "gateway.event_loop_lag_max_s": round(m.loop_lag_max, 4)}
    if gw.capture is not None:
        faults["gateway.capture_failures"] = gw.capture.failed
    s = None
    if gw.recorder is not None and hasattr(type(gw.recorder), "stats"):
        s = gw.recorder.stats
        faults.update({"recorder.sink_errors": s.sink_errors, "recorder.writer_errors": s.writer_errors,
                       "recorder.dropped": s.dropped, "recorder.quarantined": s.quarantined})
        state.update({"recorder.spool_pending_bytes": s.spool_pending_bytes,
                      "recorder.pending_in_queue": s.pending_in_queue, "recorder.delivered": s.delivered,
                      "recorder.last_error": s.last_error})
    if hasattr(gw, "capture_state"):  # what /health says now, in the words of the serve banner
        capture = gw.capture_state(s)
        state["gateway.health"] = ("ok" if capture["status"] == "ok"
                                   else "degraded: " + "; ".join(capture["reasons"]))
        state["gateway.health_rule"] = gw.capture_health.describe(gw.config.strict_health)
    return {"faults": faults, "state": state}
