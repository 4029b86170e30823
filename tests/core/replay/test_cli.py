"""`molt replay <trajectory>` and `molt replay window`."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from molt.cli import run
from molt.replay import ReplayAgent, load_results
from molt.store import Store

from .conftest import ORDER_QUESTIONS, REFUND_QUESTIONS, FactStub, record_window


def _recorded(tmp_path: Path, questions: list[str]) -> tuple[str, list[str]]:
    uri = str(tmp_path / "cli-store")
    with Store(uri, auto_compact=False) as st:
        ids = asyncio.run(record_window(st, ReplayAgent(FactStub()), questions))
    return uri, ids


def test_replay_shows_side_by_side_steps(tmp_path: Path, capsys: Any) -> None:
    uri, ids = _recorded(tmp_path, [ORDER_QUESTIONS[0]])
    assert run(["replay", ids[0], "--store", uri]) == 0
    out = capsys.readouterr().out
    assert "recorded" in out and "replayed" in out and "2/2 model calls re-decided identically" in out

    assert run(["replay", ids[0], "--store", uri, "--agent", "test-support",
                "--override", "tool.search_kb.parameters={\"type\": \"object\", \"properties\": {\"q\": "
                "{\"type\": \"string\"}}, \"required\": [\"q\"]}"]) == 0
    out = capsys.readouterr().out
    assert "cache miss" in out and "left the recording" in out and "unknown" in out


def test_replay_window_summarises(tmp_path: Path, capsys: Any) -> None:
    uri, _ = _recorded(tmp_path, REFUND_QUESTIONS[:3] + ORDER_QUESTIONS[:1])
    assert run(["replay", "window", "--store", uri, "--agent", "test-support", "--candidate", "cli-cand",
                "--override", "temperature=0"]) == 0
    out = capsys.readouterr().out
    assert "cli-cand" in out and "success delta" in out and "4 / 4 / 4" in out
    with Store(uri, auto_compact=False) as st:
        assert len(load_results(st, candidate_id="cli-cand")) == 5


def test_replay_window_without_an_agent_replays_from_the_recordings(tmp_path: Path, capsys: Any) -> None:
    uri, _ = _recorded(tmp_path, REFUND_QUESTIONS[:2] + ORDER_QUESTIONS[:1])
    assert run(["replay", "window", "--store", uri, "--candidate", "cli-generic"]) == 0
    out = capsys.readouterr().out
    assert "cli-generic" in out and "3 / 3 / 3" in out and "0 / 0 / 0" in out  # scored; none unknown or invalid
    with Store(uri, auto_compact=False) as st:
        rows = [r for r in load_results(st, candidate_id="cli-generic") if r["kind"] == "trajectory"]
    assert {r["record"]["mode"] for r in rows} == {"episode"}


def test_replay_of_a_missing_trajectory_is_one_clear_line(tmp_path: Path, capsys: Any) -> None:
    uri, _ = _recorded(tmp_path, [ORDER_QUESTIONS[0]])
    assert run(["replay", "nope", "--store", uri]) == 2
    assert "not in the store" in capsys.readouterr().err
