"""`MOLT_LANGCHAIN=1` with no recorder: the process says where its events wait and what delivers them,
`molt` counts them, and `molt spool deliver` puts them in the store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

AGENT = """
import molt_langchain  # MOLT_LANGCHAIN=1: every run is captured, with no recorder given
from langchain_core.language_models.fake_chat_models import FakeListChatModel

FakeListChatModel(responses=["A-17 has shipped."]).invoke("Where is order A-17?")
"""


def _run(args: list[str], home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=180,
                          env={**os.environ, "MOLT_HOME": str(home), "COLUMNS": "200", **env})


def test_the_global_hook_without_a_recorder_names_the_spool_and_what_delivers_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    agent = _run([sys.executable, "-c", AGENT], home, MOLT_LANGCHAIN="1")
    assert agent.returncode == 0, agent.stderr
    assert f"events wait in {home / 'spool'}" in agent.stderr and "molt spool deliver" in agent.stderr
    molt = [sys.executable, "-m", "molt.cli"]
    ls = _run([*molt, "trajectories", "ls"], home)
    assert ls.returncode == 2 and "No Molt store at" in ls.stderr
    assert "events wait in the spool" in ls.stderr and "molt spool deliver" in ls.stderr, ls.stderr
    assert _run([*molt, "spool", "deliver"], home).returncode == 0
    rows = [json.loads(x) for x in _run([*molt, "trajectories", "ls", "--json"], home).stdout.splitlines()]
    assert len(rows) == 1 and rows[0]["events"] >= 1
