"""What every `molt demo` run must tell truthfully, checked against the demo's store (not its report)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from molt.control.log import DecisionLog
from molt.control.signals import episodes
from molt.control.versions import VersionRegistry
from molt.gateway.loopback import wait_healthy
from molt.store import Store
from molt_desk.world import AGENT, LEGACY_AGENT


@contextlib.contextmanager
def serving(proc: subprocess.Popen[bytes], url: str, log: Path, *, start_timeout_s: float) -> Iterator[None]:
    """Wait until the ``molt serve`` process ``proc`` answers ``url/health`` (failing with its log if it exits
    or takes longer than ``start_timeout_s``); on exit, stop it as a user would (SIGINT, then kill)."""
    try:
        wait_healthy(url, proc, timeout_s=start_timeout_s, detail=lambda: log.read_text(errors="replace")[-3000:])
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()


#: The support agents' missing facts (refund window, warranty period) are asked as this task.
FACT_TASK = "kb_question"


def _served(store: Store, tenant: str, agent: str, version: str | None, task: str) -> list[bool]:
    if version is None:
        return []
    return [bool(e.success) for e in episodes(store, tenant, agent, limit=1_000_000)
            if e.policy_version == version and e.task == task and e.success is not None]


def check_demo_truth(res: dict[str, Any], home: Path) -> None:
    """No missing-fact cluster of the support agents is answered with a weight update (in the demo's
    decisions and in the plane's own decision log), and every row of the fixes table is backed by the
    traffic served under the version it names (and under that version's parent)."""
    desk = (AGENT, LEGACY_AGENT)
    trained_facts = [(d["round"] + 1, d["tenant"], d["cluster"]) for d in res["decisions"]
                     if d["agent"] in desk and d["choice"] == "weight_update"
                     and (d["cluster"] or "").startswith(FACT_TASK + "|")]
    assert not trained_facts, trained_facts
    with Store.open(home / "store", auto_compact=False) as store:
        log = DecisionLog(store)
        for tenant in ("acme", "globex"):
            for d in log.list(tenant, limit=None, choice="weight_update"):
                asked = [c["cluster"] for c in d.candidates if c.get("kind") == "weight_update"]
                assert d.agent_id not in desk or not any(c.startswith(FACT_TASK + "|") for c in asked), d.reason
        registry = VersionRegistry(store)
        backed = 0
        for f in res["fixes"]:
            if f["version"] is None or f["intervention"] == "rollback":
                assert f["after"] is None and f["n_after"] == 0, f   # served nothing: credited with nothing
                continue
            assert registry.get(f["version"]).parent_id == f["parent"], f
            sides = ((f["version"], f["after"], f["n_after"]), (f["parent"], f["before"], f["n_before"]))
            for version, rate, n in sides:
                runs = _served(store, f["tenant"], f["agent"], version, f["task"])
                assert len(runs) == n, (f, version, len(runs))
                assert rate == (pytest.approx(sum(runs) / len(runs)) if runs else None), (f, version)
            backed += f["n_after"] > 0
            # Served together with an earlier intervention on the same task (in the version's lineage): said.
            lineage, v = [], f["parent"]
            while v is not None:
                if any(o["version"] == v and o["task"] == f["task"] and o["intervention"] != "rollback"
                       for o in res["fixes"]):
                    lineage.append(v)
                v = registry.get(v).parent_id
            assert len(f["overlaps"]) == len(lineage) and all(any(v in o for o in f["overlaps"]) for v in lineage), f
        assert backed, res["fixes"]


@pytest.fixture
def demo_truth() -> Callable[[dict[str, Any], Path], None]:
    return check_demo_truth


@pytest.fixture
def molt_serving() -> Callable[..., contextlib.AbstractContextManager[None]]:
    """:func:`serving`, for the tests that start ``molt serve`` in their own process."""
    return serving


@pytest.fixture(scope="module")
def model_dir() -> Path:
    """The converted SmolLM2, shared with the backend and trainer tests (``.molt/test-models``, or
    ``$MOLT_TEST_MODEL_HOME``): the conversion runs once."""
    import os

    from molt.backends.model import ensure_policy_model

    root = Path(__file__).resolve().parents[2]
    return ensure_policy_model(Path(os.environ.get("MOLT_TEST_MODEL_HOME", root / ".molt" / "test-models")))
