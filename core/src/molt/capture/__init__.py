"""Capture: the Recorder that adapters and the gateway call, its durable spool, and sinks."""

from molt.capture.hooks import CaptureHook, HookResult
from molt.capture.recorder import Recorder, RecorderStats, index_fields
from molt.capture.sinks import MemorySink, SealedRow, Sink, SinkBatch
from molt.capture.spool import Spool, SpoolPosition

__all__ = [
    "CaptureHook",
    "HookResult",
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
