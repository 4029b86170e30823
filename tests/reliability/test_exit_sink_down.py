"""Exit with the sink down: a process using the Recorder (or molt-langchain) whose remote sink accepts
connections and never answers still exits on its own — no ``close()``, no flush — with every
acknowledged event durable in its spool, delivered in full when a Recorder next opens that spool.

The time to exit is measured in ``bench/reliability/run.py`` (≤ 1 s there); here the timeout only
catches a hang.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import relharness


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["recorder", "langchain"])
def test_process_exits_with_an_unreachable_sink_and_the_next_start_delivers(tmp_path: Path, mode: str) -> None:
    if mode == "langchain":
        pytest.importorskip("molt_langchain")
    res = relharness.exit_trial(tmp_path / mode, mode, n=40, timeout=60)
    assert res.returncode == 0, "the process did not exit by itself (it was killed after 60 s)"
    if mode == "recorder":
        assert res.acked == 40
    assert res.missing == 0, f"{res.missing} of {res.expected} records were not in the spool"
    assert res.delivered == res.expected
