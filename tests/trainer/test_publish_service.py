"""Publishing (retries, a server that is down, registration) and the service's scheduling."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from molt.store import Store
from molt_trainer.algos import AlgoSettings
from molt_trainer.policy import LoraSettings, PolicyModel
from molt_trainer.publish import Publisher, VLLMTarget, policy_versions
from molt_trainer.service import GatewayLatencyProbe, GovernedSource, OnlineTrainer, StoreSource, TrainerSettings

from .conftest import single


class FakeVLLM:
    """A loopback server answering /v1/load_lora_adapter (200, or 503 when ``down``)."""

    def __init__(self) -> None:
        self.loaded: list[dict[str, Any]] = []
        self.down = False
        outer = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                import json

                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                code = 503 if outer.down else 200
                if not outer.down:
                    outer.loaded.append(body)
                self.send_response(code)
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *a: Any) -> None:
                pass

        self.httpd = HTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.httpd.server_port}/v1"


@pytest.fixture
def fake_vllm() -> Iterator[FakeVLLM]:
    f = FakeVLLM()
    yield f
    f.httpd.shutdown()


class ListSource:
    def __init__(self) -> None:
        self.items: list[Any] = []

    def read(self, since: datetime | None) -> list[Any]:
        return list(self.items)


def _trainer(tiny: Path, tmp: Path, vllm: FakeVLLM, store: Any = None, **kw: Any) -> tuple[OnlineTrainer, ListSource]:
    kw.setdefault("min_samples", 4)
    settings = TrainerSettings(algo=AlgoSettings(), lora=LoraSettings(rank=2), max_batch=8, **kw)
    pub = Publisher(model="m", out_dir=tmp / "ad", targets=[VLLMTarget(vllm.base_url)], store=store, retries=2,
                    backoff_s=0.01)
    src = ListSource()
    return OnlineTrainer(PolicyModel.load(settings.lora, tiny), pub, src, settings, base_version="m@base"), src


def test_trains_when_enough_fresh_samples_publishes_and_registers(tiny_model_dir: Path, tmp_path: Path,
                                                                   fake_vllm: FakeVLLM, store: Store) -> None:
    trainer, src = _trainer(tiny_model_dir, tmp_path, fake_vllm, store)
    src.items = [single([3, 4], [5], 1.0), single([3, 4], [6], 0.0)]
    assert trainer.tick() is None and len(trainer.pending) == 2  # not enough yet
    src.items += [single([3, 4], [7], 1.0), single([3, 4], [8], 0.0)]
    m = trainer.tick()
    assert m is not None and m["publish/ok"] == 1.0 and trainer.step == 1
    assert [x["lora_name"] for x in fake_vllm.loaded] == ["m@lora-1"]
    assert Path(fake_vllm.loaded[0]["lora_path"], "adapter_config.json").exists()
    [v] = policy_versions(store)
    assert v["version_id"] == "m@lora-1" and v["parts"]["watermark"]["samples"] == 4
    assert v["parts"]["config"]["algo"]["advantage"] == "grpo" and "actor/pg_loss" in v["parts"]["metrics"]
    assert trainer.tick() is None  # already-trained trajectories are not read twice
    assert trainer.staleness.versions["m@lora-1"] == 1


def test_vllm_down_is_retried_logged_counted_and_the_previous_adapter_stays(
        tiny_model_dir: Path, tmp_path: Path, fake_vllm: FakeVLLM, caplog: pytest.LogCaptureFixture) -> None:
    trainer, src = _trainer(tiny_model_dir, tmp_path, fake_vllm)
    src.items = [single([3, 4], [t], float(t % 2)) for t in range(5, 9)]
    trainer.tick()
    fake_vllm.down = True
    src.items = [single([3, 4], [t], float(t % 2)) for t in range(9, 13)]
    with caplog.at_level(logging.WARNING, logger="molt.trainer.publish"):
        m = trainer.tick()
    assert m is not None and m["publish/ok"] == 0.0
    assert "publishing m@lora-2 to vllm failed after 2 attempts" in caplog.text
    assert "previous adapter stays live" in caplog.text
    assert trainer.metrics()["trainer/publish_failures"] == 1 and trainer.metrics()["trainer/publish_retries_vllm"] == 2
    assert trainer.publisher.published == ["m@lora-1"]  # the live version did not change
    assert trainer.staleness.current == 1


def test_pauses_when_serving_latency_is_over_the_slo(tiny_model_dir: Path, tmp_path: Path, fake_vllm: FakeVLLM) -> None:
    trainer, src = _trainer(tiny_model_dir, tmp_path, fake_vllm, latency_slo_ms=500.0)
    p99 = [900.0]
    trainer.latency_probe = lambda: p99[0]
    src.items = [single([3, 4], [t], float(t % 2)) for t in range(5, 9)]
    assert trainer.tick() is None and trainer.counters["paused_for_slo"] == 1
    assert trainer.metrics()["serving/p99_ms"] == 900.0 and trainer.step == 0
    p99[0] = 200.0
    assert trainer.tick() is not None and trainer.step == 1
    assert "molt_trainer_trainer_paused_for_slo 1" in trainer.render_metrics()


def test_the_slo_pause_is_on_by_default_with_a_budget_from_the_idle_p99(tiny_model_dir: Path, tmp_path: Path,
                                                                        fake_vllm: FakeVLLM) -> None:
    """No SLO given: the budget is slo_factor × the p99 read while not training, and a step waits while
    serving is over it (before, no SLO meant training never yielded)."""
    trainer, src = _trainer(tiny_model_dir, tmp_path, fake_vllm)
    p99 = [100.0]
    trainer.latency_probe = lambda: p99[0]
    assert trainer.tick() is None and trainer.idle_p99_ms == 100.0      # not ready: an idle reading
    assert trainer.slo_budget_ms() == 200.0
    src.items = [single([3, 4], [t], float(t % 2)) for t in range(5, 9)]
    p99[0] = 450.0
    assert trainer.tick() is None and trainer.counters["paused_for_slo"] == 1 and trainer.step == 0
    state = trainer.fault_status()["state"]
    assert state["trainer.paused_for_slo"] == 1 and state["trainer.serving_p99_ms"] == 450.0
    p99[0] = 150.0
    assert trainer.tick() is not None and trainer.step == 1
    off, src2 = _trainer(tiny_model_dir, tmp_path / "off", fake_vllm, pause_for_serving=False)
    off.latency_probe = lambda: 1e9
    src2.items = [single([3, 4], [t], float(t % 2)) for t in range(5, 9)]
    assert off.tick() is not None


def test_waits_for_data_at_the_rate_it_arrives(tiny_model_dir: Path, tmp_path: Path, fake_vllm: FakeVLLM) -> None:
    """The idle wait follows the inflow: the time until min_samples are pending, within
    [poll_s, max_idle_s]; a queue that stays empty backs off to max_idle_s."""
    trainer, _ = _trainer(tiny_model_dir, tmp_path, fake_vllm, min_samples=10, poll_s=1.0, max_idle_s=20.0)
    assert trainer.idle_wait_s() == 1.0                  # no reading yet: poll
    trainer.inflow_per_s = 2.0
    assert trainer.idle_wait_s() == 5.0                  # 10 missing at 2/s
    trainer.inflow_per_s = 0.01
    assert trainer.idle_wait_s() == 20.0                 # nearly nothing arrives: the longest wait
    trainer.inflow_per_s = 0.0
    assert trainer.idle_wait_s() == 20.0
    assert trainer.metrics()["trainer/inflow_samples_per_s"] == 0.0


def test_bad_batches_are_counted(tiny_model_dir: Path, tmp_path: Path, fake_vllm: FakeVLLM) -> None:
    trainer, src = _trainer(tiny_model_dir, tmp_path, fake_vllm, min_samples=1)
    src.items = [single([3], [4], 1.0, tokens=False), single([9], [4], 1.0)]  # no token ids; a lone sample
    assert trainer.tick() is None
    m = trainer.metrics()
    assert m["data/skipped_no_token_ids"] == 1 and m["trainer/empty_batches"] == 1
    assert m["data/skipped_lone_sample_no_baseline"] == 1


def test_latency_probe_reads_gateway_histogram_deltas(fake_vllm: FakeVLLM) -> None:
    text = {"v": ""}

    class H(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(text["v"].encode())

        def log_message(self, *a: Any) -> None:
            pass

    httpd = HTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    ep = "/v1/chat/completions"

    def hist(counts: dict[str, int]) -> str:
        return "\n".join(f'molt_gateway_request_duration_seconds_bucket{{endpoint="{ep}",le="{le}"}} {c}'
                         for le, c in counts.items())

    probe = GatewayLatencyProbe(f"http://127.0.0.1:{httpd.server_port}")
    text["v"] = hist({"0.1": 100, "1.0": 100, "+Inf": 100})
    assert probe() == 100.0
    text["v"] = hist({"0.1": 100, "1.0": 150, "+Inf": 200})  # the last 100 requests: half over 1 s
    assert probe() == float("inf")
    httpd.shutdown()


def test_store_and_governed_sources(store: Store) -> None:
    from molt.capture import Recorder

    t = single([1, 2], [3], 1.0)
    rec = Recorder(store, fsync="never", spool_dir=Path(store.uri).parent / "spool")
    for e in t.events:
        rec.record(e)
    rec.reward(t.rewards[0])
    assert rec.flush(timeout=30, deliver=True)
    got = StoreSource(store).read(None)
    assert [x.trajectory_id for x in got] == [t.trajectory_id] and got[0].rewards[0].value == 1.0
    assert StoreSource(store, tenant="nobody").read(None) == []
    rec.close()

    class Queue:
        def eligible_trajectories(self, since: datetime | None = None) -> list[Any]:
            return [t]

    assert GovernedSource(Queue()).read(datetime.now(UTC)) == [t]
