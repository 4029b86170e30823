"""Fault-injecting sinks and a small tmpfs, shared by ``test_faults.py`` and the benchmark.

A :class:`FaultySink` wraps a real sink (the LanceDB store): while ``down`` it raises
``ConnectionError`` (store unavailable); ``delay_s`` makes every write slow; ``fail_every`` fails one
write in N, starting with the first (a flaky store). The Recorder must keep the agent's path
untouched, count the faults and drain its spool once the store is back.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class FaultySink:
    """A sink that fails or slows down on demand (see the module docstring)."""

    def __init__(self, inner: Any, *, down: bool = False, delay_s: float = 0.0, fail_every: int = 0):
        self.inner = inner
        self.down = down
        self.delay_s = delay_s
        self.fail_every = fail_every
        self.writes = 0
        self.faults = 0
        self._lock = threading.Lock()

    def _fault(self) -> None:
        with self._lock:
            self.writes += 1
            fail = self.down or (self.fail_every and (self.writes - 1) % self.fail_every == 0)  # 1st fails
            if fail:
                self.faults += 1
        if self.delay_s:
            time.sleep(self.delay_s)
        if fail:
            raise ConnectionError("injected fault: the store is unreachable")

    def write_batch(self, batch: Any) -> None:
        self._fault()
        self.inner.write_batch(batch)

    def chain_head(self, trajectory_id: str) -> tuple[int, str] | None:
        self._fault()
        return self.inner.chain_head(trajectory_id)  # type: ignore[no-any-return]

    def chain_heads(self, ids: list[str]) -> dict[str, tuple[int, str]]:
        self._fault()
        return self.inner.chain_heads(ids)  # type: ignore[no-any-return]


@contextlib.contextmanager
def small_tmpfs(size: str = "256k") -> Iterator[Path | None]:
    """A tmpfs of ``size`` (a full disk on demand), or None where mounting is not allowed."""
    d = Path(tempfile.mkdtemp(prefix="molt-tmpfs-"))
    mounted = False
    try:
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)],
                                     capture_output=True).returncode == 0
        yield d if mounted else None
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(d)], capture_output=True)
        with contextlib.suppress(OSError):
            d.rmdir()


def fill(directory: Path, name: str = "filler") -> Path:
    """Fill the file system of ``directory`` to the last byte; returns the filler file."""
    path = directory / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for size in (65536, 4096, 1):  # then whatever the last blocks hold
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
    return path
