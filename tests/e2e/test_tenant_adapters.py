"""Two tenants, one SmolLM2-135M base, one adapter each (issue 47): each tenant's adapter is trained on its own
governed data only, served to its own requests only, and lifts that tenant's success, while the other
tenant's traffic is unchanged.

acme's consumers read the leading number of each reply to a sum; globex's read whether a reply to a yes/no
question opens with "Yes" or "No". SmolLM2 opens most replies with prose: two different capability gaps.
Both tenants' agents call one gateway (over loopback HTTP, each with its own key) in front of one local
backend; each call is recorded through governance (both tenants opted in) and rewarded by the tenant's
consumer. Then, as the weight loop of ``molt serve --train`` does for a weight-update decision:

1. acme's adapter is trained (:class:`molt.control.weights.WeightLoop` + ``molt_trainer``'s
   ``gateway_trainer``) on what the governance training queue hands acme's trainer, loaded through the
   gateway's admin API for acme only, and made acme's live version;
2. fresh windows — prompts never trained on, sampled with fixed seeds so that the same weights give the
   same tokens — are served before and after: acme's success rises; globex's replies are token for token
   the ones it got before acme's adapter existed, and still come from globex's base version;
3. the same for globex's adapter; acme's replies under its adapter are unchanged by globex's.

Each adapter's manifest and training run name only its tenant's trajectories.

    pytest tests/e2e/test_tenant_adapters.py -s
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from molt.control.clusters import fisher_greater

MODEL = "smollm2-135m-instruct"
AGENT = "desk"
OPERATOR = "sk-operator"
KEYS = {"acme": "sk-acme-agent", "globex": "sk-globex-agent"}


def _sum(i: int) -> str:
    return f"What is {i % 9 + 1} + {(i * 5 + 3) % 9 + 1}?"


def _bigger(i: int) -> str:
    return f"Is {i % 9 + 1} bigger than {(i * 7 + 2) % 9 + 1}?"


#: tenant → (task, question i, the consumer's check of a reply)
TENANTS: dict[str, tuple[str, Callable[[int], str], Callable[[str], bool]]] = {
    "acme": ("sums", _sum, lambda a: bool(re.match(r"^\s*-?\d+", a))),
    "globex": ("yes-no", _bigger, lambda a: bool(re.match(r"^\s*(yes|no)\b", a, re.I))),
}
TRAIN, FRESH = 24, 12  # requests per tenant to train on; per fresh window (held-out questions, fixed seeds)


class Agent:
    """One tenant's agent (a chat call per question) and its consumer, who checks and rewards each reply."""

    def __init__(self, url: str, tenant: str):
        self.tenant = tenant
        self.task, self.question, self.check = TENANTS[tenant]
        self.http = httpx.Client(base_url=url, timeout=600,
                                 headers={"authorization": f"Bearer {KEYS[tenant]}", "x-molt-agent": AGENT})

    def ask(self, i: int, *, reward: bool) -> tuple[bool, list[int], str, str]:
        r = self.http.post("/v1/chat/completions", headers={"x-molt-task": self.task}, json={
            "model": MODEL, "messages": [{"role": "user", "content": self.question(i)}], "temperature": 1.0,
            "max_tokens": 4, "seed": i, "logprobs": True})
        r.raise_for_status()
        answer = r.json()["choices"][0]["message"]["content"] or ""
        tokens = [t["token"] for t in r.json()["choices"][0]["logprobs"]["content"]]
        ok = self.check(answer)
        if reward:
            self.http.post("/v1/molt/rewards/trajectory", json={
                "trajectory_id": r.headers["x-molt-trajectory"], "value": float(ok), "source": "verifier",
                "reason": None if ok else f"the consumer could not read the reply ({self.task})"}).raise_for_status()
        return ok, tokens, r.headers["x-molt-policy-version"], r.headers["x-molt-trajectory"]

    def window(self, start: int, n: int, *, reward: bool = False) -> list[tuple[bool, list[int], str, str]]:
        return [self.ask(i, reward=reward) for i in range(start, start + n)]


@pytest.fixture
def stack(tmp_path: Path, model_dir: Path) -> Iterator[dict[str, Any]]:
    """One gateway (loopback HTTP) over one local backend, governed, two tenants' keys and the operator's; the
    version registry bound to the gateway; the weight loop of ``molt serve --train``."""
    from molt.backends import LocalBackend
    from molt.control.versions import AgentConfig, ModelPart, VersionRegistry
    from molt.control.weights import WeightLoop, gateway_loader, training_reader
    from molt.gateway import create_app
    from molt.gateway.binding import GatewayBinding
    from molt.gateway.cli import build_gateway
    from molt.gateway.loopback import ServerThread
    from molt_trainer.requests import gateway_trainer

    home = tmp_path / "home"
    home.mkdir()
    policy = tmp_path / "governance.json"  # both tenants opt in; neither shares with the other
    policy.write_text(orjson.dumps({"name": "two-tenants", "unknown_tenants": "quarantine", "tenants": {
        t: {"training": {"opt_in": True, "require_consent": False}} for t in TENANTS}}).decode())
    keys = tmp_path / "keys.toml"
    keys.write_text("".join(f'[[keys]]\nkey = "{k}"\ntenant = "{t}"\nrole = "agent_writer"\n\n'
                            for t, k in KEYS.items())
                    + f'[[keys]]\nkey = "{OPERATOR}"\ntenant = "platform"\nrole = "operator"\n')
    backend = LocalBackend(model_path=model_dir, model=MODEL)
    gw, recorder, store = build_gateway(backend, home=home, keys=str(keys), governance=str(policy),
                                        capture_process=False)
    registry = VersionRegistry(store)
    for t in TENANTS:
        registry.ensure_base(t, AGENT, AgentConfig(model=ModelPart(base=MODEL)))
    GatewayBinding(gw, registry, model=MODEL).sync()
    with ServerThread(create_app(gw)) as srv:
        trainer = gateway_trainer(store, gateway_url=srv.url, admin_key=OPERATOR, model=MODEL, model_path=model_dir,
                                  out_dir=home / "adapters", slo_ms=None)
        loop = WeightLoop(store, trainer, read=training_reader(store, str(policy)),
                          load=gateway_loader(srv.url, OPERATOR, MODEL))
        yield {"url": srv.url, "store": store, "registry": registry, "loop": loop, "gw": gw, "backend": backend,
               "recorder": recorder}
        loop.close()
    recorder.close()
    store.close()


def _train_and_serve(s: dict[str, Any], tenant: str, window: list[tuple[bool, list[int], str, str]]) -> Any:
    """The weight loop's answer to a weight-update decision for ``tenant``'s failing task, made live."""
    from molt.control.diagnose import Candidate

    s["recorder"].flush()
    registry = s["registry"]
    live = registry.live(tenant, AGENT)
    failed = [tid for ok, _, _, tid in window if not ok]
    cand = Candidate(candidate_id=f"c-{tenant}", kind="weight_update", cluster=f"{TENANTS[tenant][0]}|gap",
                     description="capability gap", cost=100.0, source_trajectories=failed,
                     payload={"task": TENANTS[tenant][0], "model": live.parts.model.model_dump(mode="json")})
    part = s["loop"](tenant, AGENT, cand)
    v = registry.create(tenant, AGENT, live.parts.with_model(part), parent=live.version_id, note="weight update")
    registry.promote(v.version_id, actor="test")  # the binding listens: the gateway serves it from now on
    return v


def _rate(window: list[tuple[bool, list[int], str, str]]) -> float:
    return sum(ok for ok, *_ in window) / len(window)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_each_tenants_adapter_lifts_its_own_success_and_leaves_the_other_tenant_unchanged(
        stack: dict[str, Any]) -> None:
    s = stack
    agents = {t: Agent(s["url"], t) for t in TENANTS}
    base = {t: s["registry"].live(t, AGENT).version_id for t in TENANTS}
    traffic = {t: a.window(0, TRAIN, reward=True) for t, a in agents.items()}  # what the trainers may read
    for t, w in traffic.items():  # the gap, and the contrast GRPO learns from
        assert 0 < _rate(w) < 0.5, (t, [ok for ok, *_ in w])
    fresh = {t: a.window(1000, FRESH) for t, a in agents.items()}  # held-out questions, both on the base model
    assert {v for w in fresh.values() for *_, v, _ in w} == set(base.values())

    acme_v = _train_and_serve(s, "acme", traffic["acme"])
    acme_after = agents["acme"].window(1000, FRESH)
    globex_mid = agents["globex"].window(1000, FRESH)
    assert {v for *_, v, _ in acme_after} == {acme_v.version_id}
    assert {v for *_, v, _ in globex_mid} == {base["globex"]}  # globex is still served its base version…
    assert [tok for _, tok, _, _ in globex_mid] == [tok for _, tok, _, _ in fresh["globex"]]  # …token for token

    globex_v = _train_and_serve(s, "globex", traffic["globex"])
    globex_after = agents["globex"].window(1000, FRESH)
    acme_again = agents["acme"].window(1000, FRESH)
    assert {v for *_, v, _ in globex_after} == {globex_v.version_id}
    assert [tok for _, tok, _, _ in acme_again] == [tok for _, tok, _, _ in acme_after]  # globex's changed nothing

    rates = {"acme": (_rate(fresh["acme"]), _rate(acme_after)), "globex": (_rate(fresh["globex"]), _rate(globex_after))}
    print("fresh-window success before → after its own adapter:", rates)
    for t, after in (("acme", acme_after), ("globex", globex_after)):
        before_fail = sum(not ok for ok, *_ in fresh[t])
        after_fail = sum(not ok for ok, *_ in after)
        assert after_fail < before_fail and fisher_greater(before_fail, FRESH, after_fail, FRESH) < 0.05, (t, rates)

    # each adapter: trained on its tenant's trajectories only (its manifest says so, and its files match it),
    # loaded for its tenant only, and refused for the other
    from molt.control.weights import training_run
    from molt.errors import LineageError
    from molt.lineage import load_manifest

    own = {t: {tid for *_, tid in traffic[t]} for t in TENANTS}
    for t, v in (("acme", acme_v), ("globex", globex_v)):
        m = load_manifest(v.parts.model.adapter_path, tenant=t, store=s["store"])
        learned = {tid for lin in m.lineage for tid in lin.trajectories}
        assert m.tenant_id == t and not m.share_with and {lin.tenant_id for lin in m.lineage} == {t}, m
        assert learned and learned <= own[t], (t, learned - own[t])
        run = training_run(s["store"], v.parts.model.adapter)
        assert run is not None and set(run["parts"]["watermark"]["trajectories"]) == learned
        assert s["gw"].adapter_tenants[v.parts.model.adapter] == frozenset({t})
        other = "globex" if t == "acme" else "acme"
        with pytest.raises(LineageError, match="not shared"):
            load_manifest(v.parts.model.adapter_path, tenant=other, store=s["store"])
