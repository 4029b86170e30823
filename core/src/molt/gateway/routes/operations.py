"""Operations routes: ``GET /health`` (liveness, backend health, the recorder's counters) and
``GET /metrics`` (Prometheus text; platform state only for the operator)."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from molt.gateway.admin_scope import AdminScope
from molt.gateway.routes.context import RouteContext, json_response
from molt.gateway.service import Gateway
from molt.governance.access import Permission

__all__ = ["install"]


async def _recorder_stats(gw: Gateway) -> Any:
    """The recorder's counters, or None. A capture process answers behind the records queued
    before the question (seconds when it is busy): asked on a worker thread, so the event loop
    keeps serving (``stats`` is a property: even ``hasattr`` on the instance would ask)."""
    if gw.recorder is None or not hasattr(type(gw.recorder), "stats"):
        return None
    return await run_in_threadpool(lambda: gw.recorder.stats)


def install(ctx: RouteContext) -> None:
    gw = ctx.gateway

    @ctx.route("/health", "GET")
    async def health(request: Request) -> Response:
        ctx.auth(request)
        backends = gw.router.health()
        ok = any(backends.values())
        s = await _recorder_stats(gw)
        capture = gw.capture_state(s)
        degraded = not ok or capture["status"] != "ok"
        out: dict[str, Any] = {"status": "degraded" if degraded else "ok", "backends": backends,
                               "capture": capture}
        if s is not None:
            out["recorder"] = {"enqueued": s.enqueued, "acknowledged": s.acknowledged, "delivered": s.delivered,
                               "dropped": s.dropped, "dropped_queue_full": s.dropped_queue_full,
                               "dropped_spool_full": s.dropped_spool_full,
                               "dropped_write_failed": s.dropped_write_failed, "writer_errors": s.writer_errors,
                               "pending_in_queue": s.pending_in_queue}
        # no backend: nothing can be served (503); capture degraded: the gateway still serves, 503 only
        # when the operator asked for strict health (a probe that should take it out of rotation)
        code = 503 if not ok or (degraded and gw.config.strict_health) else 200
        return json_response(out, code)

    @ctx.route("/metrics", "GET")
    async def metrics(request: Request) -> Response:
        reader = AdminScope(ctx.auth(request, Permission.READ))
        gauges: list[tuple[str, str, dict[str, str], float]] = [
            ("molt_gateway_backend_up", "Whether a backend passes its health check.", {"backend": b}, float(ok))
            for b, ok in gw.router.health().items()]
        if (s := await _recorder_stats(gw)) is not None:
            for k, v in s.as_dict().items():
                if isinstance(v, int):
                    gauges.append(("molt_recorder_" + k, f"Recorder counter {k}.", {}, float(v)))
            capture = gw.capture_state(s)
            gauges.append(("molt_recorder_dropped_records", "Records lost before they were durable (queue full, "
                           "spool full, spool write failed, events not built).", {}, float(capture["dropped"])))
            gauges.append(("molt_gateway_capture_degraded", "1 while /health says capture is degraded.", {},
                           float(capture["status"] != "ok")))
        if isinstance(recycled := getattr(gw.recorder, "recycled", None), int):  # a CaptureProcess
            gauges.append(("molt_capture_recycled", "Capture processes replaced by a fresh one (after "
                           "recycle_after records).", {}, float(recycled)))
        if gw.capture is not None:
            gauges.append(("molt_gateway_capture_failures", "Calls whose events could not be built.", {},
                           float(gw.capture.failed)))
        if gw.store is not None and hasattr(gw.store, "cache_bytes"):  # LanceDB caches of this process
            # asked on a worker thread like the recorder's counters: a call into LanceDB, which weighs
            # its caches' entries (the loop must not wait on it)
            held = await run_in_threadpool(gw.store.cache_bytes)
            gauges.append(("molt_store_cache_bytes", "Bytes held by the gateway process's LanceDB caches "
                           "(index + metadata; bounded).", {}, float(held)))
        if reader.operator:  # platform state (training runs, pauses for serving): the operator's to see
            for source in gw.status_sources:
                for part in source().values():
                    for k, v in part.items():
                        if isinstance(v, int | float) and not isinstance(v, bool):
                            gauges.append(("molt_" + k.replace(".", "_"), f"molt serve status {k}.", {}, float(v)))
        versions = gw.router.table.versions
        text = gw.metrics.render(gauges, version_visible=lambda v: reader.sees_version(versions.get(v)))
        return Response(text, media_type="text/plain; version=0.0.4; charset=utf-8")
