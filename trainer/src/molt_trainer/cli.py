"""`molt-trainer` command (skeleton until the trainer issue lands)."""

from __future__ import annotations

import sys


def main() -> None:
    """Entry point: explain that the service is not built yet, and exit non-zero."""
    print("molt-trainer: the online RL service is not built yet (see the trainer issue).", file=sys.stderr)
    raise SystemExit(2)
