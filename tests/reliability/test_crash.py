"""Crash safety: ingest (Recorder → spool → LanceDB) and the loaded gateway are SIGKILLed at random
points, twice per trial, each life continuing the same trajectories. After a restart every acknowledged
event and reward is in the store exactly once (and, for the governed gateway, in the training queue
exactly once), and every chain verifies (and continues).

CI runs a few trials; ``bench/reliability/run.py`` runs hundreds (``--quick``: a dozen).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import relharness


@pytest.mark.slow
@pytest.mark.parametrize("seed", [11])
def test_sigkilled_ingest_loses_and_duplicates_nothing(tmp_path: Path, seed: int) -> None:
    res = relharness.ingest_trial(tmp_path / "home", seed, lives=2, window=(1.0, 2.5))
    assert res.acked_events > 50, f"too little was acknowledged before the kills to test anything: {res}"
    assert res.lost == 0 and res.duplicated == 0, res.problems
    assert res.chains_bad == 0, res.problems
    assert not res.problems


@pytest.mark.slow
@pytest.mark.parametrize("seed", [21])
def test_sigkilled_gateway_under_load_loses_and_duplicates_nothing(tmp_path: Path, seed: int) -> None:
    """With the governance pipeline on, so the training queue is checked too (each event once)."""
    res = relharness.gateway_trial(tmp_path / "home", seed, lives=2, window=(0.3, 2.0), governed=True)
    assert res.requests_ok > 10 and res.acked_events > 10, f"too little traffic before the kills: {res}"
    assert res.lost == 0 and res.duplicated == 0, res.problems
    assert res.training_events >= res.acked_events and res.training_duplicates == 0, res.problems
    assert res.chains_bad == 0, res.problems
    assert not res.problems


@pytest.mark.slow
def test_sigkilled_molt_serve_leaves_no_orphan_restarts_and_stores_each_event_once(tmp_path: Path) -> None:
    """``molt serve`` as shipped: events are built and spooled by its capture child process."""
    res = relharness.serve_trial(tmp_path / "home", 31, lives=2)
    assert res.requests_ok > 10 and res.stored_events > 0, f"too little traffic before the kills: {res}"
    assert res.duplicated == 0 and res.chains_bad == 0, res.problems
    assert not res.problems
