"""Capture: the Recorder that adapters and the gateway call, its durable spool, and sinks."""

from molt.capture.recorder import Recorder, RecorderStats, index_fields
from molt.capture.sinks import MemorySink, SealedRow, Sink, SinkBatch
from molt.capture.spool import Spool, SpoolPosition

__all__ = [
    "MemorySink",
    "Recorder",
    "RecorderStats",
    "SealedRow",
    "Sink",
    "SinkBatch",
    "Spool",
    "SpoolPosition",
    "index_fields",
]
