"""The gateway's routes, one module per idea, each installed on the app by :func:`molt.gateway.app.create_app`
through a :class:`~molt.gateway.routes.context.RouteContext`: :mod:`.inference` (chat and text completions,
models), :mod:`.operations` (health, metrics), :mod:`.feedback` (rewards, trajectory and session ends),
:mod:`.admin` (routing table, versions, adapters) and :mod:`.otlp` (OpenTelemetry trace ingest)."""
