"""Scrub erased data out of a Recorder's spool, in place.

The spool deletes a segment only once every frame in it was delivered and a newer segment exists, so
the current segment keeps delivered events (payloads included) until it rolls at 64 MiB — possibly
for a long time. Erasure and retention therefore rewrite matching frames in place, each to a frame of
the *same length* with a valid CRC, so offsets, the cursor and the frames around it are untouched:

- an event frame keeps its envelope and chain link but loses its payload and salt (the row is padded
  with zero bytes, which :meth:`SealedRow.decode` ignores) — if it is (re)delivered, it arrives as an
  erased event and the chain still verifies;
- a whole record (tenant erasure, a quarantined or reward record) becomes a quarantine tombstone
  ``{"stage": "erasure", "reason": "erased"}`` padded with spaces.

This is safe while a Recorder runs: it appends at the end (append mode), reads only after its cursor,
and a reader that catches a frame mid-rewrite sees a CRC mismatch and re-reads it later. A frame the
Recorder read *before* the rewrite may still be delivered after it; :mod:`molt.governance.erasure`
scrubs before and after erasing the store for that reason.
"""

from __future__ import annotations

import fcntl
import os
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

from molt.capture.sinks import SealedRow
from molt.capture.spool import FRAME_EVENT, FRAME_QUARANTINE, FRAME_REWARD, MAGIC

__all__ = ["SpoolScrubReport", "Verdict", "scrub_spool", "spool_trajectories"]

_HEADER = struct.Struct("<2scII")  # the spool's frame header: magic, type, length, crc32
_TOMBSTONE = b'{"stage":"erasure","reason":"erased"}'

#: What to do with a frame: leave it, drop its payload (events), or replace it with a tombstone.
Verdict = Literal["keep", "null_payload", "tombstone"]


@dataclass
class SpoolScrubReport:
    """What :func:`scrub_spool` changed in one spool directory."""

    directory: str
    frames_seen: int = 0
    nulled: int = 0
    tombstoned: int = 0
    live: bool = False

    @property
    def scrubbed(self) -> int:
        """Frames rewritten."""
        return self.nulled + self.tombstoned


def scrub_spool(directory: str | os.PathLike[str],
                decide: Callable[[bytes, dict[str, Any], SealedRow | None], Verdict]) -> SpoolScrubReport:
    """Rewrite the frames of every segment in ``directory`` that ``decide(kind, fields, row)`` marks.

    ``fields`` is the event's index columns (``x``) for event frames, the record's JSON for reward
    and quarantine frames; ``row`` is the decoded :class:`SealedRow` of an event frame.
    """
    d = Path(directory).expanduser()
    report = SpoolScrubReport(directory=str(d))
    if not d.is_dir():
        return report
    lock = _try_lock(d)
    report.live = lock is None
    try:
        for seg in sorted(p for p in d.glob("*.seg") if p.stem.isdigit()):
            _scrub_segment(seg, decide, report)
    finally:
        if lock is not None:
            lock.close()
    return report


def _try_lock(d: Path) -> Any:
    """The spool's lock if no Recorder holds it (held while scrubbing, so none starts), else None."""
    fh = open(d / "lock", "a+")  # noqa: SIM115 - closed by the caller
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        return None
    return fh


def _scrub_segment(path: Path, decide: Callable[[bytes, dict[str, Any], SealedRow | None], Verdict],
                   report: SpoolScrubReport) -> None:
    data = path.read_bytes()
    edits: list[tuple[int, bytes]] = []
    pos, n = 0, len(data)
    while pos + _HEADER.size <= n:
        magic, kind, length, crc = _HEADER.unpack_from(data, pos)
        end = pos + _HEADER.size + length
        if magic != MAGIC or end > n:
            break  # a torn tail (or a frame still being appended): nothing after it is readable
        body = data[pos + _HEADER.size:end]
        if zlib.crc32(body) != crc:
            break
        report.frames_seen += 1
        new = _rewrite(kind, body, decide, report)
        if new is not None:
            edits.append((pos, new))
        pos = end
    if not edits:
        return
    with open(path, "r+b") as fh:
        for offset, frame in edits:
            fh.seek(offset)
            fh.write(frame)
        fh.flush()
        os.fsync(fh.fileno())


def _rewrite(kind: bytes, body: bytes, decide: Callable[[bytes, dict[str, Any], SealedRow | None], Verdict],
             report: SpoolScrubReport) -> bytes | None:
    row = None
    try:
        if kind == FRAME_EVENT:
            row = SealedRow.decode(body)
            fields = row.x
        elif kind in (FRAME_REWARD, FRAME_QUARANTINE):
            fields = orjson.loads(body)
            if fields.get("stage") == "erasure" and "trajectory_id" not in fields:
                return None  # already a tombstone
        else:
            return None
    except Exception:  # an unreadable body is not ours to judge; leave it
        return None
    verdict = decide(kind, fields, row)
    if verdict == "null_payload" and row is not None:
        if row.payload is None:
            return None
        new = row._replace(payload=None, salt=None).encode()
        report.nulled += 1
        return _frame(FRAME_EVENT, new.ljust(len(body), b"\x00"))
    if verdict == "tombstone" or verdict == "null_payload":
        report.tombstoned += 1
        return _frame(FRAME_QUARANTINE, _TOMBSTONE.ljust(len(body), b" ") if len(body) >= len(_TOMBSTONE)
                      else b"{}".ljust(len(body), b" "))
    return None


def _frame(kind: bytes, body: bytes) -> bytes:
    return _HEADER.pack(MAGIC, kind, len(body), zlib.crc32(body)) + body


def spool_trajectories(directory: str | os.PathLike[str], subject_id: str,
                       tenant_id: str | None = None) -> set[tuple[str, str | None]]:
    """``(trajectory_id, tenant_id)`` of the spooled events that name ``subject_id`` (read only)."""
    found: set[tuple[str, str | None]] = set()

    def look(kind: bytes, f: dict[str, Any], row: SealedRow | None) -> Verdict:
        if row is not None and f.get("subject_id") == subject_id and tenant_id in (None, f.get("tenant_id")):
            found.add((f["trajectory_id"], f.get("tenant_id")))
        return "keep"

    d = Path(directory).expanduser()
    if d.is_dir():
        report = SpoolScrubReport(directory=str(d))
        for seg in sorted(p for p in d.glob("*.seg") if p.stem.isdigit()):
            _scrub_segment(seg, look, report)
    return found
