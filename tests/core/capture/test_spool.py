"""The spool: framing, torn-write recovery, segment rolling, cursor, bounds."""

from __future__ import annotations

from pathlib import Path

import pytest

from molt.capture.spool import FRAME_EVENT, FRAME_REWARD, Spool, SpoolPosition, encode_frame


def _frames(n: int, size: int = 100) -> list[bytes]:
    return [encode_frame(FRAME_EVENT, (f"{i:06d}".encode() * size)[:size]) for i in range(n)]


def _all(sp: Spool) -> list[tuple[bytes, bytes]]:
    return list(sp.iter_undelivered())


def test_append_read_commit(tmp_path: Path) -> None:
    sp = Spool(tmp_path, segment_bytes=4096)
    for _ in range(10):
        assert sp.append(_frames(10)) is not None
    got = _all(sp)
    assert len(got) == 100 and got[0][0] == FRAME_EVENT
    assert len(sp.segments()) > 2  # rolled
    frames, pos = sp.read(sp.cursor, sp.end(), max_frames=35)
    assert len(frames) == 35
    sp.commit(pos)
    assert len(_all(sp)) == 65
    sp.commit(sp.end())
    assert _all(sp) == [] and sp.pending_bytes() == 0
    assert len(sp.segments()) == 1  # delivered segments are deleted
    sp.close()


def test_torn_tail_is_truncated_on_open(tmp_path: Path) -> None:
    sp = Spool(tmp_path)
    sp.append(_frames(5))
    sp.close()
    seg = tmp_path / f"{1:020d}.seg"
    good = seg.stat().st_size
    with open(seg, "ab") as fh:  # a crash in the middle of writing a frame
        fh.write(encode_frame(FRAME_REWARD, b"x" * 50)[:30])
    sp = Spool(tmp_path)
    assert seg.stat().st_size == good
    assert len(_all(sp)) == 5
    sp.append(_frames(1))
    assert len(_all(sp)) == 6
    sp.close()


def test_corrupt_frame_stops_reading_at_the_corruption(tmp_path: Path) -> None:
    sp = Spool(tmp_path)
    sp.append(_frames(5))
    sp.close()
    seg = tmp_path / f"{1:020d}.seg"
    data = bytearray(seg.read_bytes())
    data[-10] ^= 0xFF  # flip a bit in the last frame's body: its CRC no longer matches
    seg.write_bytes(bytes(data))
    sp = Spool(tmp_path)
    assert len(_all(sp)) == 4
    sp.close()


def test_cursor_survives_reopen(tmp_path: Path) -> None:
    sp = Spool(tmp_path)
    sp.append(_frames(10))
    _got, pos = sp.read(sp.cursor, sp.end(), max_frames=4)
    sp.commit(pos)
    sp.close()
    sp = Spool(tmp_path)
    assert sp.cursor == pos and len(_all(sp)) == 6
    sp.close()


def test_spool_refuses_to_grow_past_its_bound(tmp_path: Path) -> None:
    sp = Spool(tmp_path, segment_bytes=4096, max_bytes=8192)
    accepted = sum(sp.append(_frames(10)) is not None for _ in range(20))
    assert 0 < accepted < 20
    assert sp.pending_bytes() <= 8192
    sp.close()


def test_bad_configuration_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="fsync"):
        Spool(tmp_path, fsync="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="segment_bytes"):
        Spool(tmp_path, segment_bytes=10)
    assert SpoolPosition(1, 5) < SpoolPosition(2, 0)


def test_a_sealed_rows_frame_body_decodes_to_the_same_row() -> None:
    """``SealedRow.encode`` (the capture writer's frame body) and ``decode`` (the deliverer's and
    recovery's read) are inverses, with a payload and with an erased one (no payload, no salt)."""
    from molt.atdp import GENESIS, Event, EventKind, UserMessage, seal
    from molt.capture.recorder import index_fields
    from molt.capture.sinks import SealedRow

    ev = Event(trajectory_id="t", kind=EventKind.USER_MESSAGE, action=UserMessage(content="hi"))
    s = seal(ev, 0, GENESIS)
    row = SealedRow(index_fields(ev, 0), s.envelope, s.payload, s.salt, s.digest, s.prev_hash, s.hash)
    assert SealedRow.decode(row.encode()) == row
    assert row.sealed().hash == s.hash
    erased = row._replace(payload=None, salt=None)
    assert SealedRow.decode(erased.encode()) == erased


def test_the_cursor_file_follows_commits_within_its_interval(tmp_path: Path) -> None:
    """commit() moves the reader at once and the cursor file at most every cursor_interval_s (a crash
    in between re-delivers, deduplicated); sync_cursor() and close() bring the file up to date, and an
    idle Recorder's delivery thread does within the interval."""
    import time

    from molt.atdp import Event, EventKind, UserMessage
    from molt.capture import MemorySink, Recorder

    def on_disk(d: Path) -> SpoolPosition:
        seg, off = (d / "cursor").read_text().split()
        return SpoolPosition(int(seg), int(off))

    sp = Spool(tmp_path / "a", cursor_interval_s=3600)
    sp.append(_frames(10))
    _got, first = sp.read(sp.cursor, sp.end(), max_frames=4)
    sp.commit(first)  # the first commit writes the file
    sp.commit(sp.end())  # within the interval: the reader moves, the file does not yet
    assert sp.cursor == sp.end() and _all(sp) == [] and on_disk(tmp_path / "a") == first
    assert sp.cursor_due_in() is not None
    sp.sync_cursor()
    assert on_disk(tmp_path / "a") == sp.end() and sp.cursor_due_in() is None
    sp.append(_frames(2))
    sp.commit(sp.end())
    end = sp.end()
    sp.close()
    assert on_disk(tmp_path / "a") == end

    sink = MemorySink()
    with Recorder(sink, spool_dir=tmp_path / "b", hook=None) as rec:
        tid = rec.new_trajectory()
        for i in range(3):  # three deliveries in quick succession, then idle
            rec.record(Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE, action=UserMessage(content=f"{i}")))
            assert rec.flush(deliver=True)
        deadline = time.monotonic() + 5
        while on_disk(tmp_path / "b") != rec._spool.end() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert on_disk(tmp_path / "b") == rec._spool.end()
    assert len(sink.events) == 3
