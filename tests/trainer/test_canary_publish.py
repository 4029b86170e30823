"""``molt-trainer serve --agent``'s publishing: each adapter the standalone trainer publishes becomes a canary
composite version of that agent (molt.control.weights.CanaryTarget), loaded at weight 0 on the plain model
key first; a newer adapter supersedes the trainer's unjudged canary, a canary of the plane's is left alone,
and an adapter that fails its check or its load is named by no version."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from molt.control.versions import AgentConfig, ModelPart, VersionRegistry
from molt.control.weights import CanaryTarget
from molt.store import Store
from molt_trainer.algos import AlgoSettings
from molt_trainer.policy import LoraSettings, PolicyModel
from molt_trainer.publish import Publisher, policy_versions
from molt_trainer.service import AgentSource, OnlineTrainer, TrainerSettings

from .conftest import call, traj

T, A = "acme", "bot"


class ListSource:
    def __init__(self) -> None:
        self.items: list[Any] = []

    def read(self, since: datetime | None) -> list[Any]:
        return list(self.items)


def _one(agent: str, completion: int, reward: float) -> Any:
    from molt.atdp.ids import new_id

    tid = new_id()
    e = call(tid, [3, 4], [completion], reward=None)
    e = e.model_copy(update={"metadata": e.metadata.model_copy(update={"agent_id": agent, "tenant_id": T})})
    return traj([e], final=reward)


def _setup(tiny: Path, tmp: Path, store: Store, loader: Any) -> tuple[OnlineTrainer, ListSource, CanaryTarget]:
    settings = TrainerSettings(algo=AlgoSettings(), lora=LoraSettings(rank=2), max_batch=8, min_samples=4,
                               pause_for_serving=False)
    target = CanaryTarget(store, T, A, base="m", loader=loader, weight=0.3)
    pub = Publisher(model="m", out_dir=tmp / "ad", targets=[target], store=store, retries=1, tenant_id=T, agent_id=A)
    src = ListSource()
    return (OnlineTrainer(PolicyModel.load(settings.lora, tiny), pub, AgentSource(src, A), settings, base_version="m@base"),
            src, target)


def test_each_adapter_is_a_canary_version_of_the_agent(tiny_model_dir: Path, tmp_path: Path, store: Store) -> None:
    loaded: list[tuple[str, str]] = []

    def load(name: str, path: str, tenants: Any) -> None:
        assert list(tenants) == [T]  # served to the agent's tenant only
        loaded.append((name, path))

    trainer, src, target = _setup(tiny_model_dir, tmp_path, store, load)
    # another agent's traffic is not trained on
    src.items = [_one(A, t, float(t % 2)) for t in range(5, 9)] + [_one("other", t, 1.0) for t in range(9, 13)]
    assert trainer.tick() is not None and trainer.step == 1
    reg = VersionRegistry(store)
    [c] = reg.canaries(T, A)
    assert c.parts.model == ModelPart(base="m", adapter="m@lora-1", adapter_path=loaded[0][1])
    assert c.canary_weight == pytest.approx(0.3) and c.created_by == "molt-trainer"
    assert c.parent_id == reg.live(T, A).version_id  # the agent's base version, made for it
    assert loaded[0][0] == "m@lora-1" and Path(loaded[0][1], "adapter_config.json").exists()
    [row] = policy_versions(store)
    assert row["agent_id"] == A and row["parts"]["watermark"]["samples"] == 4 and row["parts"]["live_on"] == ["canary"]

    # a newer adapter supersedes the trainer's canary the plane has not judged yet
    src.items = [_one(A, t, float(t % 2)) for t in range(13, 17)]
    assert trainer.tick() is not None
    [c2] = reg.canaries(T, A)
    assert c2.parts.model.adapter == "m@lora-2" and reg.get(c.version_id).status == "candidate"
    assert [h["action"] for h in reg.history(T, A)][-2:] == ["abort", "canary"]

    # the plane's own canary (a context fix under judgement) is left alone: the adapter waits, not routed
    reg.abort(c2.version_id, actor="test")
    fix = reg.create(T, A, reg.live(T, A).parts.with_system_prompt("Answer with the number first."),
                     parent=reg.live(T, A).version_id, created_by="control-plane")
    reg.canary(fix.version_id, 0.2, actor="control-plane")
    src.items = [_one(A, t, float(t % 2)) for t in range(17, 21)]
    assert trainer.tick() is not None
    assert [v.version_id for v in reg.canaries(T, A)] == [fix.version_id]
    assert target.versions == [c.version_id, c2.version_id]


def test_an_adapter_the_engine_refuses_is_named_by_no_version(tiny_model_dir: Path, tmp_path: Path,
                                                              store: Store) -> None:
    def refuse(name: str, path: str) -> None:
        raise RuntimeError("vLLM refused the adapter")

    trainer, src, _ = _setup(tiny_model_dir, tmp_path, store, refuse)
    src.items = [_one(A, t, float(t % 2)) for t in range(5, 9)]
    m = trainer.tick()
    assert m is not None and m["publish/ok"] == 0.0 and trainer.publisher.counters["publish_failures"] == 1
    reg = VersionRegistry(store)
    assert reg.canaries(T, A) == [] and all(v.parts.model.adapter is None for v in reg.list(T, A))


def test_a_corrupt_adapter_is_not_loaded_or_canaried(tmp_path: Path, store: Store) -> None:
    loaded: list[str] = []
    target = CanaryTarget(store, T, A, base="m", loader=lambda n, p, t: loaded.append(n))
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "adapter_config.json").write_text("{not json")
    (bad / "adapter_model.safetensors").write_bytes(b"\0" * 8)
    from molt.errors import InterventionError

    with pytest.raises(InterventionError, match="not JSON"):
        target.load("m@lora-9", bad, [])
    assert loaded == [] and VersionRegistry(store).list(T, A) == []
    VersionRegistry(store).ensure_base(T, A, AgentConfig(model=ModelPart(base="m")))  # the registry still works
