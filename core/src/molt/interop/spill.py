"""Where an import keeps its checked rows until the whole file is read: a temporary SQLite file.

An all-or-nothing import may store nothing before every row is checked, and some checks (cycles,
duplicates with other content, the tenant a file names) need a whole trajectory or the whole file.
Holding the rows in memory cost ~23 KB a span (a 100k-span file: gigabytes), so the rows go to disk
as they are read, grouped by their source trajectory, and come back one trajectory at a time: the
import's memory is bounded by its largest trajectory and its write batches, not by the file.

SQLite (the standard library's) rather than a flat file: it groups rows by trajectory on disk (an
index built once the file is read) with a bounded page cache, and it is gone with the import.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["Spill"]

#: Rows buffered before one ``executemany`` (inserting one at a time costs ~10x more).
_BUFFER = 1024
#: Page cache of the spill database, in KiB (SQLite's default is 2 MiB).
_CACHE_KIB = 8192


class Spill:
    """Events and rewards of an import as JSON text, keyed by source trajectory, in arrival order.

    Use as a context manager: the file is removed on exit.
    """

    def __init__(self, directory: str | Path | None = None) -> None:
        fd, name = tempfile.mkstemp(prefix="molt-import-", suffix=".sqlite", dir=directory)
        os.close(fd)
        self.path = Path(name)
        self.db = sqlite3.connect(name, isolation_level=None)
        self.db.executescript(
            f"PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-{_CACHE_KIB};"
            "PRAGMA temp_store=FILE;"
            "CREATE TABLE traj(tkey TEXT PRIMARY KEY);"  # rowid: order of first appearance
            "CREATE TABLE ev(tkey TEXT NOT NULL, src TEXT NOT NULL, data TEXT NOT NULL);"
            "CREATE TABLE rw(tkey TEXT NOT NULL, src TEXT NOT NULL, data TEXT NOT NULL);")
        self._ev: list[tuple[str, str, str]] = []
        self._rw: list[tuple[str, str, str]] = []
        self._sealed = False

    def __enter__(self) -> Spill:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.db.close()
        self.path.unlink(missing_ok=True)

    # ------------------------------------------------------------------ writing (while reading the file)

    def event(self, tkey: str, where: str, data: str) -> None:
        self._ev.append((tkey, where, data))
        if len(self._ev) >= _BUFFER:
            self._flush()

    def reward(self, tkey: str, where: str, data: str) -> None:
        self._rw.append((tkey, where, data))
        if len(self._rw) >= _BUFFER:
            self._flush()

    def _flush(self) -> None:
        self.db.execute("BEGIN")
        if self._ev:
            self.db.executemany("INSERT OR IGNORE INTO traj(tkey) VALUES (?)", ((t,) for t, _, _ in self._ev))
            self.db.executemany("INSERT INTO ev VALUES (?, ?, ?)", self._ev)
        if self._rw:
            self.db.executemany("INSERT INTO rw VALUES (?, ?, ?)", self._rw)
        self.db.execute("COMMIT")
        self._ev, self._rw = [], []

    def seal(self) -> None:
        """The file is read: index the rows by trajectory."""
        if not self._sealed:
            self._flush()
            self.db.executescript("CREATE INDEX ev_t ON ev(tkey); CREATE INDEX rw_t ON rw(tkey);")
            self._sealed = True

    # ------------------------------------------------------------------ reading (once sealed)

    def trajectories(self, page: int = 256) -> Iterator[list[str]]:
        """Source trajectory ids with events, in order of first appearance, ``page`` at a time."""
        self.seal()
        last = 0
        while True:
            got = self.db.execute("SELECT rowid, tkey FROM traj WHERE rowid > ? ORDER BY rowid LIMIT ?",
                                  (last, page)).fetchall()
            if not got:
                return
            last = got[-1][0]
            yield [t for _, t in got]

    def events(self, tkey: str) -> list[tuple[str, str]]:
        """``(where, event JSON)`` of a trajectory, in file order."""
        self.seal()
        return self.db.execute("SELECT src, data FROM ev WHERE tkey = ? ORDER BY rowid", (tkey,)).fetchall()

    def rewards(self, tkey: str) -> list[tuple[str, str]]:
        """``(where, annotation JSON)`` naming trajectory ``tkey``, in file order."""
        self.seal()
        return self.db.execute("SELECT src, data FROM rw WHERE tkey = ? ORDER BY rowid", (tkey,)).fetchall()

    def orphan_rewards(self) -> int:
        """Rewards naming a trajectory with no event in the file."""
        self.seal()
        return int(self.db.execute("SELECT COUNT(*) FROM rw WHERE tkey NOT IN (SELECT tkey FROM traj)").fetchone()[0])
