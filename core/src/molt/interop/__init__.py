"""Traces users already have, in and out: Langfuse, LangSmith and OpenTelemetry imports; OTLP, Parquet
and Hugging Face ``datasets`` exports.

One module per format, one governed write path (:mod:`molt.interop.ingest`): an import is redacted,
tenant-checked and eligibility-marked like live capture, all or nothing by default, and idempotent
(ids derive from the source's ids). Example::

    from molt.interop import import_file
    report = import_file(store, "traces.json", "langfuse", tenant_id="acme")
    report.imported, report.duplicates, report.refused

What each format carries, and what it cannot, is in its module's docstring.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from molt.capture.recorder import DEFAULT_PIPELINE
from molt.errors import MoltError
from molt.interop.ingest import ImportMode, ImportRefused, ImportReport, Row, import_rows

__all__ = ["FORMATS", "ImportMode", "ImportRefused", "ImportReport", "Row", "import_file", "read_rows"]

#: The foreign formats :func:`import_file` reads (Molt's own Parquet export has its own importer,
#: :func:`molt.interop.parquet.import_parquet_export`).
FORMATS = ("otlp", "langfuse", "langsmith")


def read_rows(path: str | Path, fmt: str, **options: Any) -> Any:
    """The :class:`Row` iterator of a file in format ``fmt``."""
    if fmt == "otlp":
        from molt.interop.otlp import read_otlp

        return read_otlp(path, **options)
    if fmt == "langfuse":
        from molt.interop.langfuse import read_langfuse

        return read_langfuse(path, **options)
    if fmt == "langsmith":
        from molt.interop.langsmith import read_langsmith

        return read_langsmith(path, **options)
    raise MoltError(f"Unknown import format {fmt!r}; use one of {', '.join(FORMATS)} (or parquet).")


def import_file(store: Any, path: str | Path, fmt: str, *, tenant_id: str | None = None, namespace: Any = None,
                pipeline: Any = DEFAULT_PIPELINE, mode: ImportMode = "all-or-nothing",
                progress: Any = None) -> ImportReport:
    """Import a Langfuse, LangSmith or OTLP file into ``store`` (see :func:`molt.interop.ingest.import_rows`)."""
    p = Path(path)
    if not p.is_file():
        raise MoltError(f"{p} is not a file.")
    return import_rows(store, read_rows(p, fmt), source=p.name, tenant_id=tenant_id, namespace=namespace,
                       pipeline=pipeline, mode=mode, progress=progress)
