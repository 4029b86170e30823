"""A process's resident anonymous memory by kind, from ``/proc/<pid>/smaps`` (Linux).

- ``heap``: glibc's main heap (``[heap]``, the main thread's ``malloc``);
- ``arenas``: glibc's other arenas (64 MiB-aligned reservations of 64 MiB; every other thread's
  ``malloc`` under ``MALLOC_ARENA_MAX=2``);
- ``stacks``: thread stacks (an 8 MiB mapping right behind a guard page);
- ``other_anon``: every other anonymous mapping — Python's 1 MiB pymalloc arenas, blocks glibc
  serves with ``mmap`` (over its mmap threshold), the segments of mimalloc under Arrow's memory pool.
  The kernel merges neighbouring anonymous mappings, so their sizes do not tell these apart: the
  capture child's own counters do (``MOLT_CAPTURE_MEMSTATS``, :mod:`molt.gateway.capture_process`).
"""

from __future__ import annotations

import re
from pathlib import Path

_HEAD = re.compile(r"([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \S+\s*(.*)$")
_ARENA = 64 << 20


def anon_mappings(pid: int | str = "self") -> dict[str, float]:
    """Resident MiB by kind (see the module docstring)."""
    maps: list[list] = []  # start, end, perms, path, rss kB
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = _HEAD.match(line)
        if head:
            maps.append([int(head[1], 16), int(head[2], 16), head[3], head[4], 0])
        elif line.startswith("Rss:") and maps:
            maps[-1][4] = int(line.split()[1])
    out = {"heap": 0.0, "arenas": 0.0, "stacks": 0.0, "other_anon": 0.0}
    for i, (a, b, perms, path, rss) in enumerate(maps):
        nxt = maps[i + 1] if i + 1 < len(maps) else None
        if path == "[heap]":
            out["heap"] += rss
        elif path:
            continue
        elif a % _ARENA == 0 and (b - a == _ARENA or (nxt is not None and nxt[3] == "" and nxt[2] == "---p"
                                                       and nxt[0] == b and nxt[1] - a == _ARENA)):
            out["arenas"] += rss
        elif b - a == 8 << 20 and i > 0 and maps[i - 1][2] == "---p" and maps[i - 1][1] == a:
            out["stacks"] += rss
        elif perms != "---p":
            out["other_anon"] += rss
    return {k: round(v / 1024, 1) for k, v in out.items()}
