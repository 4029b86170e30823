"""``molt-trainer serve`` leaves a status file, so ``molt doctor`` shows the trainer and its faults."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson


def test_trainer_service_reports_to_molt_doctor(tmp_path: Path, tiny_model_dir: Path, capsys: Any) -> None:
    home = tmp_path / "home"
    env = {**os.environ, "MOLT_HOME": str(home)}
    # zero steps: it starts, reports, and stops (the gateway is never called)
    trainer = str(Path(sys.executable).parent / "molt-trainer")
    proc = subprocess.run([trainer, "serve", "--train-on-ungoverned-data", "--max-steps", "0",
                           "--gateway", "http://127.0.0.1:9", "--model", "m", "--model-path", str(tiny_model_dir),
                           "--out", str(tmp_path / "adapters")], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    files = list((home / "status").glob("molt-trainer-*.json"))
    assert len(files) == 1
    status = orjson.loads(files[0].read_bytes())
    assert status["stopped"] is True
    assert set(status["faults"]) == {"trainer.crashes", "trainer.step_failures", "trainer.publish_failures"}
    assert status["state"]["governance"] == "OFF (--train-on-ungoverned-data)"
    from molt.cli import run

    os.environ["MOLT_HOME"] = str(home)  # the autouse fixture restores it
    assert run(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "process molt-trainer" in out and "stopped" in out and "none counted" in out
    assert "OFF (--train-on-ungoverned-data)" in out  # in red: it trains on ungoverned data
