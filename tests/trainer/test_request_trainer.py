"""molt_trainer.requests: one plane weight-update request → one trained, registered adapter that the weight
loop's checks accept; the serving budget gates each step; bad input fails the run before anything is saved."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from molt.control.versions import ModelPart
from molt.control.weights import check_adapter, training_run
from molt.store import Store
from molt_trainer.policy import LoraSettings
from molt_trainer.publish import Publisher
from molt_trainer.requests import RequestTrainer, RunSettings, SloGate

from .conftest import single


def _request(trajectories: list[Any], anchors: list[Any] | None = None, adapter_path: str | None = None) -> Any:
    return SimpleNamespace(request_id="wu-1", tenant_id="acme", agent_id="math", task="add", cluster="add|answer",
                           model=ModelPart(base="m", adapter="m@lora-0" if adapter_path else None,
                                           adapter_path=adapter_path),
                           trajectories=trajectories, anchors=anchors or [])


def _traffic() -> list[Any]:
    return [single([3, 4, 5], [6 + i % 3, 7], float(i % 2), task="add") for i in range(8)]


def test_a_request_trains_an_adapter_the_loop_accepts_and_registers_its_run(tiny_model_dir: Path, tmp_path: Path,
                                                                            store: Store) -> None:
    pub = Publisher(model="m", out_dir=tmp_path / "ad", store=store, tenant_id=None, agent_id=None)
    trainer = RequestTrainer(pub, RunSettings(lora=LoraSettings(rank=2, lr=1e-2), steps=2), model_path=tiny_model_dir)
    anchors = [single([9, 10], [11], 1.0, task="other")]
    out = trainer(_request(_traffic(), anchors))
    check_adapter(out.path)                      # what the weight loop checks before loading it
    assert out.steps == 2 and out.samples == 9 and out.run_id == "wu-1"
    run = training_run(store, out.version)
    assert run is not None and run["parts"]["watermark"]["request"] == "wu-1"
    assert len(run["parts"]["watermark"]["trajectories"]) == 9 and run["parts"]["config"]["steps"] == 2
    # A second request starts from the adapter the agent serves now (the first), not from scratch.
    second = trainer(_request(_traffic(), adapter_path=str(out.path)))
    assert second.version != out.version and training_run(store, second.version)["parts"]["config"]["from"] == \
        str(out.path)
    assert trainer.status()["state"]["trainer.runs"] == 2 and not trainer.busy()


def test_a_request_without_contrast_fails_before_anything_is_saved(tiny_model_dir: Path, tmp_path: Path) -> None:
    pub = Publisher(model="m", out_dir=tmp_path / "ad")
    trainer = RequestTrainer(pub, RunSettings(lora=LoraSettings(rank=2)), model_path=tiny_model_dir)
    with pytest.raises(ValueError, match="no contrast"):
        trainer(_request([single([3, 4], [5], 0.0, task="add") for _ in range(4)]))
    assert not (tmp_path / "ad").exists() and trainer.status()["faults"]["trainer.failed_runs"] == 1


def test_the_slo_gate_waits_while_serving_is_over_budget() -> None:
    readings = iter([100.0, 100.0, 900.0, 900.0, 150.0])
    gate = SloGate(probe=lambda: next(readings), check_s=0.0)
    gate.observe_idle()
    gate.observe_idle()
    assert gate.budget_ms() == 200.0             # 2 × the p99 read while not training
    gate.wait()
    assert gate.counters["paused"] == 2 and gate.last_p99_ms == 150.0
    fixed = SloGate(probe=lambda: 5000.0, slo_ms=1000.0, check_s=0.01, max_wait_s=0.05)
    fixed.wait(threading.Event())                 # over budget past max_wait_s: the step runs, counted
    assert fixed.counters["pause_timeouts"] == 1


def test_closing_the_trainer_abandons_the_run_in_flight_before_its_next_step(tiny_model_dir: Path,
                                                                            tmp_path: Path) -> None:
    pub = Publisher(model="m", out_dir=tmp_path / "ad")
    holder: list[RequestTrainer] = []

    def probe() -> float | None:   # the server stops while the run's first step waits for the serving budget
        holder[0].close()
        return None

    trainer = RequestTrainer(pub, RunSettings(lora=LoraSettings(rank=2), steps=50), model_path=tiny_model_dir,
                             gate=SloGate(probe=probe))
    holder.append(trainer)
    with pytest.raises(RuntimeError, match="closed"):
        trainer(_request(_traffic()))
    assert not (tmp_path / "ad").exists() and trainer.counters["steps"] == 0 and not trainer.busy()
    with pytest.raises(RuntimeError, match="closed"):   # and every later request fails at once
        trainer(_request(_traffic()))


def test_the_service_trains_on_the_threads_it_is_given(store: Store, tmp_path: Path) -> None:
    """``molt-trainer serve --threads N`` reaches the policy's settings (Policy.load sets torch's thread count
    from them) in both modes; a count below 1 is refused by the parser."""
    from molt_trainer.cli import _parser
    from molt_trainer.requests import gateway_trainer

    args = _parser().parse_args(["serve", "--gateway", "http://127.0.0.1:9", "--model", "m", "--threads", "1"])
    assert args.threads == 1
    trainer = gateway_trainer(store, gateway_url=args.gateway, admin_key=None, model="m", model_path=None,
                              out_dir=tmp_path / "ad", slo_ms=None, threads=args.threads)
    assert trainer.settings.lora.threads == 1
    assert trainer.settings.lora.lr == RunSettings().lora.lr  # the rest of the run's defaults are kept
    default = gateway_trainer(store, gateway_url=args.gateway, admin_key=None, model="m", model_path=None,
                              out_dir=tmp_path / "ad2", slo_ms=None)
    assert default.settings.lora.threads is None
    with pytest.raises(SystemExit):
        _parser().parse_args(["serve", "--gateway", "http://127.0.0.1:9", "--model", "m", "--threads", "0"])
