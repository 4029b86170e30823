"""Issue 41, finding 5: acknowledged means durable with ``molt serve --ack-after-durable``.

``kill -9`` of the whole ``molt serve`` (gateway and capture child) under load: with the flag, every
call that was answered is in the store after the restart (each trial here; ≥ 20 trials with the same
harness: ``python bench/reliability/ack_window.py``, figures in the gateway README). Without the flag,
calls answered in the last milliseconds before the kill are lost — the acknowledgement window that
script measures.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from relharness import ack_trial


@pytest.mark.slow
def test_kill_9_loses_no_acknowledged_call_with_ack_after_durable(tmp_path: Path) -> None:
    results = [ack_trial(tmp_path / f"t{seed}", seed, durable=True) for seed in range(1)]
    for res in results:
        assert res.acked_events > 0 and res.requests_ok == res.acked_events, res
        assert res.lost == 0 and res.ok, res


@pytest.mark.slow
@pytest.mark.parametrize("route", ["responses", "messages"])
def test_the_other_wire_formats_acknowledge_only_durable_calls(tmp_path: Path, route: str) -> None:
    res = ack_trial(tmp_path / route, 1, durable=True, route=route)
    assert res.acked_events > 0 and res.requests_ok == res.acked_events, res
    assert res.lost == 0 and res.ok, res
