"""The status file a running Molt process leaves for ``molt doctor``: its fault counters and backlog.

:class:`StatusReporter` writes them every few seconds to ``$MOLT_HOME/status/<component>-<pid>.json``
(written aside, then renamed over the old one, so a reader never sees half a file); ``molt doctor``
reads every such file (:func:`read_status`), says whether its process is still running, and shows each
non-zero fault counter. A file rather than a scrape of ``/metrics``: doctor needs no URL or key, sees
processes that serve no HTTP (``molt-trainer``), and still shows what a process that stopped or died
last counted (its spool backlog, say). Example::

    reporter = StatusReporter(home, "molt-serve", {"gateway": lambda: gateway_status(gw)})
    reporter.start()       # writes now and every interval_s
    ...
    reporter.close()       # a last write, marked stopped
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

__all__ = ["StatusReporter", "StatusSource", "read_status"]

log = logging.getLogger("molt.status")

#: A status source: ``{"faults": {name: count}, "state": {name: value}}`` (either part optional).
StatusSource = Callable[[], Mapping[str, Mapping[str, Any]]]


class StatusReporter:
    """Writes the fault counters of this process to ``home/status/<component>-<pid>.json`` every
    ``interval_s`` seconds (see the module docstring). ``sources`` maps a name to a
    :data:`StatusSource`; a source that raises is reported as ``<name>.status_error`` and the others
    are still written. Files of the same component whose process is gone are removed at start."""

    def __init__(self, home: str | os.PathLike[str], component: str, sources: Mapping[str, StatusSource] | None = None,
                 *, interval_s: float = 5.0):
        self.dir = Path(home) / "status"
        self.component = component
        self.sources: dict[str, StatusSource] = dict(sources or {})
        self.interval_s = interval_s
        self.path = self.dir / f"{component}-{os.getpid()}.json"
        self.started_at = datetime.now(UTC)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # The thread and a caller's write() share one aside file: one write at a time, and the later
        # snapshot is the one left in place.
        self._write_lock = threading.Lock()

    def snapshot(self, *, stopped: bool = False) -> dict[str, Any]:
        """What :meth:`write` writes."""
        faults: dict[str, Any] = {}
        state: dict[str, Any] = {}
        for name, source in list(self.sources.items()):
            try:
                got = source()
            except Exception as exc:  # one broken source must not hide the others
                faults[f"{name}.status_error"] = 1
                state[f"{name}.status_error"] = f"{type(exc).__name__}: {exc}"
                continue
            faults.update(got.get("faults") or {})
            state.update(got.get("state") or {})
        return {"component": self.component, "pid": os.getpid(), "started_at": self.started_at.isoformat(),
                "updated_at": datetime.now(UTC).isoformat(), "interval_s": self.interval_s, "stopped": stopped,
                "faults": faults, "state": state}

    def write(self, *, stopped: bool = False) -> Path:
        """Write the status file now (atomically) and return its path."""
        with self._write_lock:
            self.dir.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_bytes(orjson.dumps(self.snapshot(stopped=stopped), default=str, option=orjson.OPT_INDENT_2))
            os.replace(tmp, self.path)
        return self.path

    def start(self) -> StatusReporter:
        """Remove stale files of this component, write once, then every ``interval_s`` on a thread."""
        for old in self.dir.glob(f"{self.component}-*.json"):
            pid = old.stem.rsplit("-", 1)[-1]
            if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
                with contextlib.suppress(OSError):
                    old.unlink()
        self.write()

        def loop() -> None:
            while not self._stop.wait(self.interval_s):
                try:
                    self.write()
                except OSError as exc:  # a full disk must not take the reporter down for good
                    log.warning("Writing the status file %s failed (%s); retrying.", self.path, exc)

        self._thread = threading.Thread(target=loop, name=f"molt-status-{self.component}", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop the thread and write a last status, marked ``stopped``."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10.0)
        with contextlib.suppress(OSError):
            self.write(stopped=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_status(home: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every status file under ``home/status`` (newest first), each with ``running`` (its process is
    alive and wrote within three intervals) and ``age_s``; an unreadable file comes back with ``error``."""
    out: list[dict[str, Any]] = []
    now = time.time()
    for path in sorted(Path(home, "status").glob("*.json")):
        try:
            st = orjson.loads(path.read_bytes())
            age = now - datetime.fromisoformat(st["updated_at"]).timestamp()
        except (OSError, ValueError, KeyError, TypeError) as exc:
            out.append({"component": path.stem, "path": str(path), "error": f"{type(exc).__name__}: {exc}"})
            continue
        fresh = age <= 3 * float(st.get("interval_s") or 5.0) + 5.0
        pid = int(st.get("pid") or 0)
        st.update(path=str(path), age_s=age, running=not st.get("stopped") and fresh and pid > 0 and _alive(pid))
        out.append(st)
    out.sort(key=lambda s: ("error" in s, float(s.get("age_s") or 0.0)))
    return out
