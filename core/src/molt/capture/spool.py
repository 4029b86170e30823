"""Durable local spool: an append-only write-ahead log of framed records in segment files.

Layout of a spool directory::

    00000000000000000001.seg   segment files, appended in order, rolled at ``segment_bytes``
    cursor                     what has been delivered downstream: "<segment> <offset>\\n"

A frame is ``MAGIC (2 B) | type (1 B) | length (u32 LE) | crc32 (u32 LE) | body``. A frame whose
header or CRC does not check is a torn write from a crash; it and anything after it in that segment
are ignored and truncated on open, which is safe because a frame is only acknowledged after its write
(and, with ``fsync="always"``, its fsync) completed.

Durability (the ``fsync`` policy):

- ``"always"`` (default): ``fsync`` after every batch before acknowledging it — group commit, so one
  fsync covers everything that queued up while the previous one ran. Survives power loss.
- ``"interval"``: acknowledge after ``write``; ``fsync`` at most every ``fsync_interval_s``. Survives a
  killed process (the page cache outlives it), loses at most the interval on power loss.
- ``"never"``: leave flushing to the OS. Survives a killed process only.

Delivery is at-least-once: the cursor moves only after the downstream write succeeded, and its file
follows within ``cursor_interval_s`` (50 ms), so a crash re-delivers what was delivered in the last
moments; everything in the spool when it opens is re-delivered as such, and the store deduplicates by
event id (exactly-once in the store).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from molt.errors import CaptureError, SpoolInUse

__all__ = ["FRAME_EVENT", "FRAME_QUARANTINE", "FRAME_REWARD", "FsyncPolicy", "Spool", "SpoolBacklog", "SpoolPosition",
           "spool_backlog"]

MAGIC = b"\x4d\x54"  # "MT"
_HEADER = struct.Struct("<2scII")
HEADER_SIZE = _HEADER.size  # 11 bytes

FRAME_EVENT = b"E"
FRAME_REWARD = b"R"
FRAME_QUARANTINE = b"Q"
_FRAME_TYPES = {FRAME_EVENT, FRAME_REWARD, FRAME_QUARANTINE}

# Frames are at most MAX_RECORD_BYTES (1 MiB) plus a header, so a 16 MiB read always holds one.
_READ_CHUNK = 16 << 20

FsyncPolicy = Literal["always", "interval", "never"]


@dataclass(frozen=True, order=True)
class SpoolPosition:
    """A position in the spool: segment number and byte offset in it."""

    segment: int
    offset: int


def _seg_name(n: int) -> str:
    return f"{n:020d}.seg"


def encode_frame(kind: bytes, body: bytes) -> bytes:
    """One frame: header plus body."""
    return _HEADER.pack(MAGIC, kind, len(body), zlib.crc32(body)) + body


class Spool:
    """An append-only, segmented, checksummed log (one writer thread, one reader thread).

    ``max_bytes`` bounds the undelivered data on disk; :meth:`append` refuses a batch that would
    exceed it so the caller can count drops instead of filling the disk.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        fsync: FsyncPolicy = "always",
        fsync_interval_s: float = 0.05,
        segment_bytes: int = 64 << 20,
        max_bytes: int = 1 << 30,
        cursor_interval_s: float = 0.05,
    ):
        if fsync not in ("always", "interval", "never"):
            raise ValueError(f"fsync must be 'always', 'interval' or 'never', not {fsync!r}.")
        if segment_bytes < 4096 or max_bytes < segment_bytes:
            raise ValueError(
                f"segment_bytes ({segment_bytes}) must be >= 4096 and <= max_bytes ({max_bytes}).")
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock_fh = _lock_directory(self.dir)
        self.fsync = fsync
        self.fsync_interval_s = fsync_interval_s
        self.segment_bytes = segment_bytes
        self.max_bytes = max_bytes
        self._last_fsync = 0.0
        self._cursor = self._read_cursor()
        # What the cursor file says; commit() moves _cursor at once and the file at most every
        # cursor_interval_s (see commit).
        self._durable_cursor = self._cursor
        self.cursor_interval_s = cursor_interval_s
        # never written: the first commit writes the file (monotonic time starts near boot, so 0.0 would
        # read as "just written" on a machine up for less than the interval)
        self._cursor_written = float("-inf")
        self._swept: int | None = None  # segments below this one were deleted by commit() (None: not yet)
        segs = self.segments()
        self._write_seg = segs[-1] if segs else max(1, self._cursor.segment)
        self._recover_tail(self._write_seg)
        path = self.dir / _seg_name(self._write_seg)
        self._fh = open(path, "ab", buffering=0)  # noqa: SIM115 - held open for the spool's life
        self._write_off = self._fh.tell()
        self._end = SpoolPosition(self._write_seg, self._write_off)
        self._dir_fsync()

    # ------------------------------------------------------------------ writer side

    def append(self, frames: list[bytes]) -> SpoolPosition | None:
        """Append encoded frames as one write; return the end position once durable per policy.

        Returns ``None`` (nothing written) when the batch would push the spool past ``max_bytes``.
        """
        data = b"".join(frames)
        if self.pending_bytes() + len(data) > self.max_bytes:
            return None
        if self._write_off > 0 and self._write_off + len(data) > self.segment_bytes:
            self._roll()
        view = memoryview(data)
        start = self._write_off
        try:
            while view:
                n = self._fh.write(view)
                if n is None or n <= 0:
                    raise CaptureError("The spool could not be written (short write); is the disk full?")
                view = view[n:]
            self._write_off += len(data)
            self._sync()
        except BaseException as exc:
            # Undo a partial write (ENOSPC mid-batch): left in place, the torn bytes would sit in the middle
            # of the segment once later appends succeed (the file is opened for append), where the reader
            # stops and recovery truncates, dropping every acknowledged frame written after them.
            self._undo_partial_write(start)
            if isinstance(exc, OSError):
                raise CaptureError(f"The spool {self.dir} could not be written ({exc}); is the disk full? "
                                   f"The batch was not acknowledged.") from exc
            raise
        # One reference assignment, so the reader thread never sees a half-updated position.
        self._end = SpoolPosition(self._write_seg, self._write_off)
        return self._end

    def _undo_partial_write(self, start: int) -> None:
        self._write_off = start
        with contextlib.suppress(OSError):  # cannot even truncate: recovery on the next open cuts the tail
            os.ftruncate(self._fh.fileno(), start)

    def _sync(self, force: bool = False) -> None:
        if self.fsync == "always" or force:
            os.fsync(self._fh.fileno())
        elif self.fsync == "interval":
            now = time.monotonic()
            if now - self._last_fsync >= self.fsync_interval_s:
                os.fsync(self._fh.fileno())
                self._last_fsync = now

    def _roll(self) -> None:
        os.fsync(self._fh.fileno())
        self._fh.close()
        self._write_seg += 1
        self._fh = open(self.dir / _seg_name(self._write_seg), "ab", buffering=0)  # noqa: SIM115
        self._write_off = 0
        self._dir_fsync()

    def end(self) -> SpoolPosition:
        """The position after the last appended (and durable, per policy) frame."""
        return self._end

    def close(self) -> None:
        """Write the cursor, flush and close the current segment, and release the directory lock."""
        if not self._fh.closed:
            with contextlib.suppress(OSError):  # disk full: the next open re-delivers (deduplicated)
                self.sync_cursor()
            os.fsync(self._fh.fileno())
            self._fh.close()
        if not self._lock_fh.closed:
            self._lock_fh.close()  # closing the descriptor releases the flock

    # ------------------------------------------------------------------ reader side

    @property
    def cursor(self) -> SpoolPosition:
        """Everything before this position has been delivered."""
        return self._cursor

    def read(self, start: SpoolPosition, end: SpoolPosition, max_frames: int = 10_000
             ) -> tuple[list[tuple[bytes, bytes]], SpoolPosition]:
        """Frames ``(type, body)`` from ``start`` up to ``end`` (at most ``max_frames``), and the
        position after the last one returned."""
        out: list[tuple[bytes, bytes]] = []
        pos = start
        while len(out) < max_frames and pos < end:
            stop = end.offset if pos.segment == end.segment else None
            frames, new_off = self._read_segment(pos.segment, pos.offset, stop, max_frames - len(out))
            out.extend(frames)
            if pos.segment == end.segment or len(out) >= max_frames or new_off < self._size(pos.segment):
                pos = SpoolPosition(pos.segment, new_off)
                break
            nxt = self._next_segment(pos.segment)  # this closed segment is done: move on
            pos = SpoolPosition(nxt, 0) if nxt is not None else SpoolPosition(pos.segment, new_off)
            if nxt is None:
                break
        return out, pos

    def _size(self, seg: int) -> int:
        if seg == self._write_seg:
            return self._write_off
        path = self.dir / _seg_name(seg)
        return path.stat().st_size if path.exists() else 0

    def _next_segment(self, seg: int) -> int | None:
        later = [s for s in self.segments() if s > seg]
        return later[0] if later else None

    def _read_segment(self, seg: int, offset: int, stop: int | None, max_frames: int
                      ) -> tuple[list[tuple[bytes, bytes]], int]:
        path = self.dir / _seg_name(seg)
        if not path.exists():
            return [], offset
        budget = _READ_CHUNK if stop is None else min(_READ_CHUNK, stop - offset)
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read(budget)
        frames: list[tuple[bytes, bytes]] = []
        pos = 0
        for kind, body, nxt in _iter_frames(data):
            frames.append((kind, body))
            pos = nxt
            if len(frames) >= max_frames:
                break
        return frames, offset + pos

    def commit(self, position: SpoolPosition) -> None:
        """Record that everything before ``position`` was delivered; delete finished segments.

        The reader moves past ``position`` at once; the cursor file (a write, an fsync and a rename:
        several times the CPU of delivering a small batch) follows at most every
        ``cursor_interval_s``, or at once when a segment is finished — :meth:`sync_cursor` writes it,
        and :meth:`close` does. A crash in
        between only re-delivers what the file does not cover yet, and every frame that was in the
        spool when it opens is re-delivered as such (the sink deduplicates by id), so nothing is lost
        or stored twice."""
        before, self._cursor = self._cursor, position
        # a finished segment is deleted as soon as it is delivered, so that the disk bound holds
        if (position.segment != self._durable_cursor.segment
                or time.monotonic() - self._cursor_written >= self.cursor_interval_s):
            try:
                self.sync_cursor()
            except BaseException:  # not recorded: the caller re-delivers this batch (deduplicated)
                self._cursor = before
                raise

    def cursor_due_in(self) -> float | None:
        """Seconds until the cursor file should catch up with :attr:`cursor` (0: now), or None when it
        is up to date. The delivery thread waits no longer than this when it goes idle."""
        if self._durable_cursor == self._cursor:
            return None
        return max(0.0, self._cursor_written + self.cursor_interval_s - time.monotonic())

    def sync_cursor(self) -> None:
        """Write :attr:`cursor` to the cursor file (fsync, then rename) and delete finished segments."""
        position = self._cursor
        if position == self._durable_cursor:
            return
        tmp = self.dir / "cursor.tmp"
        with open(tmp, "w") as fh:
            fh.write(f"{position.segment} {position.offset}\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.dir / "cursor")
        self._durable_cursor = position
        self._cursor_written = time.monotonic()
        # Only the writer makes segments, always above the cursor's: once swept below a segment, a
        # commit within that same segment has nothing to delete (no directory listing per delivery).
        if self._swept != position.segment:
            for s in self.segments():
                if s < position.segment:
                    (self.dir / _seg_name(s)).unlink(missing_ok=True)
            self._swept = position.segment

    def pending_bytes(self) -> int:
        """Bytes appended but not yet delivered."""
        cursor = self._cursor
        if cursor.segment == self._write_seg:  # one segment holds all of it: no directory listing per append
            return max(0, self._write_off - cursor.offset)
        total = 0
        for s in self.segments():
            if s < self._cursor.segment:
                continue
            size = self._write_off if s == self._write_seg else (self.dir / _seg_name(s)).stat().st_size
            total += size - (self._cursor.offset if s == self._cursor.segment else 0)
        return max(0, total)

    def segments(self) -> list[int]:
        """Segment numbers present on disk, ascending."""
        return sorted(int(p.stem) for p in self.dir.glob("*.seg") if p.stem.isdigit())

    def iter_undelivered(self) -> Iterator[tuple[bytes, bytes]]:
        """Every frame after the cursor (used at start-up to rebuild chain heads)."""
        pos = self._cursor
        end = self.end()
        while pos < end:
            frames, nxt = self.read(pos, end)
            yield from frames
            if nxt == pos:
                break
            pos = nxt

    # ------------------------------------------------------------------ recovery

    def _read_cursor(self) -> SpoolPosition:
        path = self.dir / "cursor"
        if not path.exists():
            return SpoolPosition(1, 0)
        try:
            seg, off = path.read_text().split()
            return SpoolPosition(int(seg), int(off))
        except ValueError as exc:
            raise CaptureError(
                f"The spool cursor {path} is corrupt ({exc}); move it aside to re-deliver the spool "
                f"(the store deduplicates by event id).") from None

    def _recover_tail(self, seg: int) -> None:
        """Truncate a torn frame at the end of the last segment (a crash mid-write)."""
        path = self.dir / _seg_name(seg)
        if not path.exists():
            return
        data = path.read_bytes()
        good = 0
        for _, _, nxt in _iter_frames(data):
            good = nxt
        if good < len(data):
            with open(path, "r+b") as fh:
                fh.truncate(good)
                os.fsync(fh.fileno())

    def _dir_fsync(self) -> None:
        fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@dataclass(frozen=True)
class SpoolBacklog:
    """What a spool directory holds that was not delivered yet (see :func:`spool_backlog`)."""

    directory: Path
    events: int = 0
    rewards: int = 0
    quarantined: int = 0
    bytes: int = 0
    #: ``"pid N"`` of the live process whose Recorder holds the spool open, else None
    holder: str | None = None

    @property
    def records(self) -> int:
        return self.events + self.rewards + self.quarantined


def spool_backlog(directory: str | os.PathLike[str]) -> SpoolBacklog:
    """Count the undelivered frames of a spool without opening it for writing.

    Read-only and lock-free (a Recorder may hold the spool meanwhile: a frame it is writing is not
    counted yet), so ``molt`` commands can say what waits to be delivered, and who holds it.
    """
    d = Path(directory).expanduser()
    if not d.is_dir():
        return SpoolBacklog(d)
    cursor = SpoolPosition(1, 0)
    with contextlib.suppress(OSError, ValueError):
        seg_text, off_text = (d / "cursor").read_text().split()
        cursor = SpoolPosition(int(seg_text), int(off_text))
    counts = {FRAME_EVENT: 0, FRAME_REWARD: 0, FRAME_QUARANTINE: 0}
    size = 0
    for path in sorted(p for p in d.glob("*.seg") if p.stem.isdigit()):
        seg = int(path.stem)
        if seg < cursor.segment:
            continue
        try:
            data = path.read_bytes()
        except OSError:  # delivered and deleted meanwhile
            continue
        start = cursor.offset if seg == cursor.segment else 0
        end = 0
        for kind, _body, nxt in _iter_frames(data[start:]):
            counts[kind] = counts.get(kind, 0) + 1
            end = nxt
        size += end
    return SpoolBacklog(d, counts[FRAME_EVENT], counts[FRAME_REWARD], counts[FRAME_QUARANTINE], size,
                        _live_holder(d))


def _live_holder(directory: Path) -> str | None:
    """The ``pid N`` a Recorder wrote into the spool's lock file, if that process is alive."""
    try:
        text = (directory / "lock").read_text().strip()
        pid = int(text.removeprefix("pid "))
    except (OSError, ValueError):
        return None
    if pid == os.getpid():  # this process: is one of its Recorders still holding it? (probe the lock)
        with open(directory / "lock", "a+") as fh:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return text
            return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:  # alive, another user's
        return text
    return text


def _lock_directory(directory: Path) -> Any:
    """Take an exclusive lock on the spool directory: two writers would interleave frames."""
    fh = open(directory / "lock", "a+")  # noqa: SIM115 - held for the spool's life
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.seek(0)
        holder = fh.read().strip() or "another process"
        fh.close()
        raise SpoolInUse(
            f"The spool {directory} is in use by {holder}; give each Recorder its own spool_dir.") from None
    fh.seek(0)
    fh.truncate()
    fh.write(f"pid {os.getpid()}")
    fh.flush()
    return fh


def _iter_frames(data: bytes) -> Iterator[tuple[bytes, bytes, int]]:
    """Valid frames in ``data`` as ``(type, body, offset_after)``; stops at the first bad one."""
    pos = 0
    n = len(data)
    while pos + HEADER_SIZE <= n:
        magic, kind, length, crc = _HEADER.unpack_from(data, pos)
        end = pos + HEADER_SIZE + length
        if magic != MAGIC or kind not in _FRAME_TYPES or end > n:
            return
        body = data[pos + HEADER_SIZE:end]
        if zlib.crc32(body) != crc:
            return
        yield kind, body, end
        pos = end
