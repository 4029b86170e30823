"""scripts/gpu_check.sh's CPU-side dry run: traffic recorded through a Molt gateway (SmolLM2 on the local
backend), exported as verl parquet rows, main_ppo's config composed and passed through verl's
validate_config, and the molt_replay agent loop's output on the rows. The GPU half (main_ppo, vLLM, publish)
runs where a GPU machine is lent."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_gpu_check_dry_run_passes_on_cpu(policy_model_dir: Path, tmp_path: Path) -> None:
    env = {**os.environ, "MOLT_GPU_CHECK_DIR": str(tmp_path), "MOLT_GPU_CHECK_CALLS": "4"}
    proc = subprocess.run([str(ROOT / "scripts" / "gpu_check.sh"), "--dry-run", str(policy_model_dir)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=880)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    steps = {d["step"]: d for d in (json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{"))}
    assert steps["record"]["calls"] == 4
    assert steps["config"]["validated"] is True and steps["replay"]["rows"] >= 1
    assert steps["done"]["dry_run"] == 1
    rows = pq.read_table(tmp_path / "data.parquet").to_pylist()
    assert len(rows) == 4 and all(r["extra_info"]["response_ids"] for r in rows)   # the served tokens, as recorded
    overrides = (tmp_path / "overrides.txt").read_text().split("\n")
    assert f"actor_rollout_ref.model.path={policy_model_dir}" in overrides
    assert "actor_rollout_ref.rollout.agent.default_agent_loop=molt_replay" in overrides
