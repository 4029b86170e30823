"""The steps of ``scripts/gpu_check.sh`` (a script beside it, not in ``molt_trainer``: it drives a Molt
gateway, which the trainer package never imports): verl on Ray, end to end, from recorded traffic to a served adapter.

::

    python scripts/gpu_check_steps.py record  --model DIR --store S --n 64   # traffic through a Molt gateway
    python scripts/gpu_check_steps.py config  --model DIR --data D.parquet --out OUT --gpus N  # overrides, validated
    python scripts/gpu_check_steps.py replay  --data D.parquet               # the agent loop on the first rows
    python scripts/gpu_check_steps.py publish --model DIR --adapter A --vllm-url URL   # load + serve via the gateway

``record`` drives a Molt gateway (the local backend: the model on this machine's GPU, or its CPU) with
arithmetic questions that a verifier rewards for putting the number first, so the rows carry the served
token ids, log-probs and rewards exactly as production traffic does. ``config`` composes verl's
``ppo_trainer`` with :func:`molt_trainer.ray.config.main_ppo_overrides` and runs verl's
``validate_config`` on it (:func:`molt_trainer.ray.config.validate`). ``replay`` runs the ``molt_replay``
agent loop's output step on the exported rows. ``publish`` loads the trained adapter into a running vLLM
through the gateway's admin API and asks one question of it, timing the load.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from pathlib import Path

__all__ = ["main"]

MODEL = "policy"
KEYS = {"sk-check-writer": ("check", "agent_writer"), "sk-check-operator": ("platform", "operator")}


def _verify(text: str) -> float:
    return 1.0 if re.match(r"^\s*-?\d", text or "") else 0.0


def record(model: str, store_dir: str, n: int, seed: int = 0) -> dict[str, float]:
    """``n`` rewarded chat calls through a gateway serving ``model`` with the local backend."""
    import httpx
    import torch

    from molt.backends import LocalBackend
    from molt.capture import Recorder
    from molt.gateway.app import create_app
    from molt.gateway.loopback import ServerThread
    from molt.gateway.router import RoutingTable, VersionSpec
    from molt.gateway.service import Gateway, GatewayConfig
    from molt.governance.access import KeyRing
    from molt.store import Store

    # One CPU thread on a machine without a GPU: serving and its client share the cores (more oversubscribes).
    backend = LocalBackend("local-0", model_path=model, model=MODEL, max_new_tokens=4,
                           threads=None if torch.cuda.is_available() else 1)
    store = Store.open(store_dir, auto_compact=False)
    # Recorded as served (no redaction: the token traces are the model's own); the export below reads it
    # with --train-on-ungoverned-data, as a development store.
    rec = Recorder(store, spool_dir=Path(store_dir).parent / "spool", fsync="never", pipeline=None)
    table = RoutingTable.single(MODEL, VersionSpec(version=f"{MODEL}@base", backends=("local-0",)))
    gw = Gateway([backend], table, recorder=rec, store=store, keyring=KeyRing.from_mapping(KEYS),
                 config=GatewayConfig(health_interval_s=0, backend_timeout_s=300))
    rng = random.Random(seed)
    rewards = []
    t0 = time.perf_counter()
    with ServerThread(create_app(gw)) as srv:
        h = {"authorization": "Bearer sk-check-writer"}
        for i in range(n):
            q = f"What is {rng.randint(1, 20)} + {rng.randint(1, 20)}?"
            r = httpx.post(srv.url + "/v1/chat/completions", headers={**h, "x-molt-session": f"s-{i}"}, timeout=300,
                           json={"model": MODEL, "messages": [{"role": "user", "content": q}], "max_tokens": 4,
                                 "temperature": 1.0, "logprobs": True})
            r.raise_for_status()
            reward = _verify(r.json()["choices"][0]["message"]["content"])
            httpx.post(srv.url + "/v1/molt/rewards/trajectory", headers=h, timeout=30,
                       json={"trajectory_id": r.headers["x-molt-trajectory"], "value": reward,
                             "source": "verifier"}).raise_for_status()
            rewards.append(reward)
        rec.flush(timeout=60, deliver=True)
    rec.close()
    store.close()
    return {"calls": n, "reward_mean": sum(rewards) / max(1, n), "seconds": round(time.perf_counter() - t0, 1)}


def config(model: str, data: str, out: str, gpus: int, batch: int) -> list[str]:
    """The validated ``main_ppo`` overrides (written one a line to ``out``/overrides.txt)."""
    from molt_trainer.ray.config import compose, main_ppo_overrides, validate

    overrides = main_ppo_overrides(data, model, n_gpus=gpus, batch_size=batch, response_length=8, prompt_length=128,
                                   out_dir=str(Path(out) / "checkpoints"))
    validate(compose(overrides))
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / "overrides.txt").write_text("\n".join(overrides) + "\n")
    return overrides


def replay(data: str, rows: int = 4) -> dict[str, float]:
    """The ``molt_replay`` agent loop's output for the first ``rows`` exported rows (what verl trains on)."""
    import pyarrow.parquet as pq

    from molt_trainer.ray.agent_loop import replay_output

    got = pq.read_table(data).to_pylist()[:rows]
    outs = [replay_output(r["extra_info"], response_length=8) for r in got]
    for r, o in zip(got, outs, strict=True):
        if o.prompt_ids != list(r["extra_info"]["prompt_ids"]):
            raise SystemExit("the agent loop changed the recorded prompt ids")
    return {"rows": len(outs), "reward_mean": sum(o.reward_score for o in outs) / max(1, len(outs))}


def publish(model: str, adapter: str, vllm_url: str) -> dict[str, float | str]:
    """Load ``adapter`` into the vLLM at ``vllm_url`` through a Molt gateway; one answer from it."""
    import httpx

    from molt.backends import create_backend
    from molt.gateway.app import create_app
    from molt.gateway.loopback import ServerThread
    from molt.gateway.router import RoutingTable, VersionSpec
    from molt.gateway.service import Gateway, GatewayConfig
    from molt.governance.access import KeyRing

    be = create_backend("vllm", "vllm-0", base_url=vllm_url, model=MODEL, tokenizer_path=model, timeout_s=300)
    table = RoutingTable.single(MODEL, VersionSpec(version=f"{MODEL}@base", backends=("vllm-0",)))
    gw = Gateway([be], table, keyring=KeyRing.from_mapping(KEYS), config=GatewayConfig(health_interval_s=0))
    with ServerThread(create_app(gw)) as srv:
        t0 = time.perf_counter()
        r = httpx.post(srv.url + "/v1/molt/admin/adapters", headers={"authorization": "Bearer sk-check-operator"},
                       json={"model": MODEL, "version": "verl-lora", "path": adapter, "weight": 1.0,
                             "weights": {f"{MODEL}@base": 0.0}}, timeout=300)
        load_s = time.perf_counter() - t0
        r.raise_for_status()
        a = httpx.post(srv.url + "/v1/chat/completions", headers={"authorization": "Bearer sk-check-writer"},
                       json={"model": MODEL, "messages": [{"role": "user", "content": "What is 3 + 4?"}],
                             "max_tokens": 8}, timeout=300)
        a.raise_for_status()
        return {"adapter_load_s": round(load_s, 3), "served_version": a.headers.get("x-molt-policy-version", ""),
                "answer": a.json()["choices"][0]["message"]["content"] or ""}


def main(argv: list[str] | None = None) -> None:
    """Entry point (one JSON line per step on stdout)."""
    p = argparse.ArgumentParser(prog="python scripts/gpu_check_steps.py")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--model", required=True)
    r.add_argument("--store", required=True)
    r.add_argument("--n", type=int, default=64)
    c = sub.add_parser("config")
    c.add_argument("--model", required=True)
    c.add_argument("--data", required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--gpus", type=int, default=1)
    c.add_argument("--batch", type=int, default=16)
    q = sub.add_parser("replay")
    q.add_argument("--data", required=True)
    u = sub.add_parser("publish")
    u.add_argument("--model", required=True)
    u.add_argument("--adapter", required=True)
    u.add_argument("--vllm-url", required=True)
    args = p.parse_args(argv)
    if args.cmd == "record":
        out: object = record(args.model, args.store, args.n)
    elif args.cmd == "config":
        out = {"overrides": len(config(args.model, args.data, args.out, args.gpus, args.batch)), "validated": True}
    elif args.cmd == "replay":
        out = replay(args.data)
    else:
        out = publish(args.model, args.adapter, args.vllm_url)
    print(json.dumps({"step": args.cmd, **out}), flush=True)  # type: ignore[dict-item]
    sys.stdout.flush()


if __name__ == "__main__":
    main()
