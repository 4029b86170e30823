"""Trained tokens/s per step: Molt's trainer vs TRL's GRPOTrainer, same model, LoRA, batch and lengths.

TRL generates its own completions every step; Molt trains on the tokens production already sampled
(recorded by the gateway), so its end-to-end step is: read recorded trajectories from the store →
samples → verl advantages/loss → LoRA step → adapter published. Both sides are timed per step:

- end-to-end tokens/s: (prompt + completion tokens of the batch) / wall time of the whole step;
- optimisation-only tokens/s: the same tokens / the time of the forward+backward+optimiser part
  (TRL: step time minus its generation-and-scoring time).

Also: time from "step done" to "adapter served" (publish into an in-process local backend), and
serving p99 latency of the local backend with and without training running beside it; and the
*gateway's* p99 over HTTP (a real gateway over the local backend, as ``molt serve`` runs it) not
training, training beside it ungated, and training behind the SLO gate of ``molt serve --train``
(:class:`molt_trainer.requests.SloGate`, budget 2 × the idle p99 read from the gateway's /metrics; a
step waits while serving is over it, but one that has started runs to its end). With few requests the
"p99" is the slowest of them. The load average is printed beside the figures: on a shared machine
they are only comparable within one run.

    python bench/bench_trainer.py [--steps 3] [--batch 8] [--completion 16] [--no-trl] \
        [--json bench/out/bench_trainer.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch

PROMPTS = [f"What is {a} + {b}? Answer briefly." for a, b in [(3, 4), (12, 9), (7, 21), (30, 5), (6, 6), (18, 27),
                                                               (2, 40), (11, 13)]]


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch", type=int, default=8, help="sequences per step (TRL: 2 prompts × batch/2 generations)")
    p.add_argument("--completion", type=int, default=16, help="completion tokens per sequence")
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--no-trl", action="store_true")
    p.add_argument("--no-serving", action="store_true")
    p.add_argument("--gateway-requests", type=int, default=12, help="requests per gateway latency phase (0: skip)")
    p.add_argument("--json", default=None)
    return p.parse_args()


# ------------------------------------------------------------------------------------------ Molt


def record_trajectories(store_dir: Path, model_dir: Path, batch: int, completion: int, steps: int) -> None:
    """Recorded production calls: chat prompts templated by the policy tokenizer, ``completion`` sampled
    tokens with log-probs, rewards — written through the Recorder into a store, as the gateway does."""
    from molt.atdp import Event, EventKind, Generation, Metadata, RewardAnnotation, RewardSource, TokenTrace
    from molt.atdp.ids import new_id
    from molt.backends.tokenizer import ModelTokenizer
    from molt.capture import Recorder
    from molt.store import Store

    tk = ModelTokenizer(model_dir, name="smollm2")
    g = torch.Generator().manual_seed(0)
    store = Store.open(store_dir, auto_compact=False)
    rec = Recorder(store, spool_dir=store_dir.parent / "spool", fsync="never")
    for step in range(steps):
        for i in range(batch):
            prompt = PROMPTS[(2 * step + i // (batch // 2)) % len(PROMPTS)]
            ids = tk.chat_prompt_ids([{"role": "user", "content": prompt}], None)
            comp = torch.randint(100, 40000, (completion,), generator=g).tolist()
            tid = new_id()
            rec.record(Event(trajectory_id=tid, kind=EventKind.MODEL_CALL, metadata=Metadata(tenant_id="bench"),
                             action=Generation(text="x", tokens=TokenTrace(
                                 prompt_ids=ids, completion_ids=comp, completion_logprobs=[-2.0] * completion,
                                 policy_version="smollm2@base"))))
            rec.reward(RewardAnnotation(trajectory_id=tid, value=float(i % 2), source=RewardSource.VERIFIER))
    assert rec.flush(timeout=60, deliver=True)
    rec.close()
    store.close()


def bench_molt(model_dir: Path, args: argparse.Namespace, work: Path) -> dict[str, float]:
    from molt.backends import LocalBackend
    from molt.store import Store
    from molt_trainer.algos import AlgoSettings
    from molt_trainer.data import assign_groups, build_samples, collate
    from molt_trainer.policy import LoraSettings, PolicyModel
    from molt_trainer.publish import BackendTarget, Publisher
    from molt_trainer.service import StoreSource
    from molt_trainer.step import train_step

    store_dir = work / "store"
    record_trajectories(store_dir, model_dir, args.batch, args.completion, args.steps + 1)
    store = Store.open(store_dir, auto_compact=False)
    policy = PolicyModel.load(LoraSettings(rank=args.rank, micro_batch=args.batch), model_dir)
    backend = LocalBackend("local-0", model_path=model_dir, threads=args.threads)
    asyncio.run(backend.start())
    publisher = Publisher(model="smollm2", out_dir=work / "adapters", targets=[BackendTarget(backend)])
    settings = AlgoSettings(advantage="grpo", policy_loss="vanilla")
    trajs = StoreSource(store).read(None)
    e2e, opt, serve = [], [], []
    for step in range(args.steps + 1):  # step 0 warms up
        t0 = time.perf_counter()
        chunk = trajs[step * args.batch:(step + 1) * args.batch]
        fresh = [store.trajectory(t.trajectory_id) for t in chunk]  # read back from the store, as the service does
        samples, _ = build_samples(fresh)
        kept, index, rewards = assign_groups(samples)
        batch = collate(kept, rewards, index, pad_id=policy.pad_id)
        t1 = time.perf_counter()
        train_step(policy, batch, settings)
        t2 = time.perf_counter()
        result = publisher.publish(policy, step=step + 1)
        t3 = time.perf_counter()
        if step:
            e2e.append(batch.num_tokens / (t3 - t0))
            opt.append(batch.num_tokens / (t2 - t1))
            serve.append(result.serve_s)
        print(f"  molt step {step}: {batch.num_tokens} tokens, read+build {t1 - t0:.2f}s, train {t2 - t1:.2f}s, "
              f"publish {t3 - t2:.2f}s (live: {result.live})", file=sys.stderr, flush=True)
    store.close()
    out = {"e2e_tok_s": statistics.mean(e2e), "opt_tok_s": statistics.mean(opt), "served_s": statistics.mean(serve)}
    if not args.no_serving:
        out.update(serving_latency(backend, policy, settings, batch))
    if args.gateway_requests:
        out.update(gateway_latency(model_dir, policy, settings, batch, args))
    return out


def gateway_latency(model_dir: Path, policy: object, settings: object, batch: object,
                    args: argparse.Namespace) -> dict[str, float]:
    """The gateway's p99 (slowest of ``--gateway-requests``) over HTTP: not training, training ungated,
    training behind the SLO gate."""
    import socket

    import httpx
    import uvicorn

    from molt.backends import LocalBackend
    from molt.gateway.app import create_app
    from molt.gateway.cli import build_gateway
    from molt.gateway.service import GatewayConfig
    from molt_trainer.requests import SloGate
    from molt_trainer.service import GatewayLatencyProbe
    from molt_trainer.step import train_step

    be = LocalBackend("gw-0", model_path=model_dir, threads=args.threads)
    gw, _, _ = build_gateway(be, record=False, config=GatewayConfig(backend_timeout_s=600.0), governance=None,
                             capture_process=False)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    server = uvicorn.Server(uvicorn.Config(create_app(gw), host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    url = f"http://127.0.0.1:{port}"
    while not server.started:
        time.sleep(0.1)
    http = httpx.Client(base_url=url, timeout=600)
    public = gw.router.models()[0]

    def lat() -> list[float]:
        out = []
        for i in range(args.gateway_requests):
            t = time.perf_counter()
            http.post("/v1/chat/completions", json={"model": public, "max_tokens": 8, "temperature": 0.0,
                                                    "messages": [{"role": "user", "content": PROMPTS[i % 8]}]}
                      ).raise_for_status()
            out.append((time.perf_counter() - t) * 1000)
        return out

    lat()  # warm-up (the backend loads its model on the first call)
    probe = GatewayLatencyProbe(url)
    probe()
    idle = lat()
    gate = SloGate(probe=probe, factor=2.0, check_s=0.5)
    gate.observe_idle()
    out = {"gw_p99_idle_ms": max(idle), "gw_p50_idle_ms": statistics.median(idle)}
    for name, gated in (("ungated", False), ("gated", True)):
        stop = threading.Event()
        steps = [0]

        def train(stop: threading.Event, gated: bool, steps: list[int]) -> None:
            while not stop.is_set():
                if gated:
                    gate.wait(stop)
                    if stop.is_set():
                        return
                train_step(policy, batch, settings)  # type: ignore[arg-type]
                steps[0] += 1

        th = threading.Thread(target=train, args=(stop, gated, steps), daemon=True)
        th.start()
        busy = lat()
        stop.set()
        th.join()
        out[f"gw_p99_training_{name}_ms"] = max(busy)
        out[f"gw_p50_training_{name}_ms"] = statistics.median(busy)
        out[f"gw_training_{name}_steps"] = steps[0]
    out["gw_slo_budget_ms"] = gate.budget_ms() or 0.0
    out["gw_gate_pauses"] = gate.counters["paused"]
    server.should_exit = True
    http.close()
    return out


def serving_latency(backend: object, policy: object, settings: object, batch: object, n: int = 6) -> dict[str, float]:
    """p99 (max of ``n``) of short local-backend generations, idle and while training steps run beside them."""
    from molt.backends import ChatRequest
    from molt_trainer.step import train_step

    def lat() -> list[float]:
        out = []
        for i in range(n):
            t = time.perf_counter()
            asyncio.run(backend.chat(ChatRequest(model="smollm2-135m-instruct",  # type: ignore[attr-defined]
                                                 messages=[{"role": "user", "content": PROMPTS[i % 8]}],
                                                 max_tokens=8, temperature=0.0)))
            out.append((time.perf_counter() - t) * 1000)
        return out

    idle = lat()
    stop = threading.Event()

    def train() -> None:
        while not stop.is_set():
            train_step(policy, batch, settings)  # type: ignore[arg-type]

    th = threading.Thread(target=train, daemon=True)
    th.start()
    busy = lat()
    stop.set()
    th.join()
    return {"serve_p99_idle_ms": max(idle), "serve_p99_training_ms": max(busy)}


# ------------------------------------------------------------------------------------------ TRL


def bench_trl(model_dir: Path, args: argparse.Namespace, work: Path) -> dict[str, float]:
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    gens = args.batch // 2
    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": p}]} for p in PROMPTS * 20])
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    tok.padding_side = "left"

    def reward(completions: list, **kw: object) -> list[float]:
        return [float(len(str(c)) % 2) for c in completions]

    cfg = GRPOConfig(output_dir=str(work / "trl"), per_device_train_batch_size=args.batch, num_generations=gens,
                     max_completion_length=args.completion, max_steps=args.steps + 1, learning_rate=2e-4,
                     logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, bf16=False,
                     gradient_accumulation_steps=1, temperature=1.0, disable_tqdm=True, seed=0)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    peft = LoraConfig(r=args.rank, lora_alpha=2 * args.rank, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                      task_type="CAUSAL_LM")
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=cfg, train_dataset=ds, processing_class=tok,
                          peft_config=peft)
    gen_times: list[float] = []
    tokens: list[int] = []
    orig = trainer._generate_and_score_completions

    def timed(inputs: object) -> object:
        t = time.perf_counter()
        out = orig(inputs)
        gen_times.append(time.perf_counter() - t)
        tokens.append(int(out["prompt_mask"].sum() + out["completion_mask"].sum()))  # type: ignore[index]
        return out

    trainer._generate_and_score_completions = timed  # type: ignore[method-assign]
    steps: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *a: object, **k: object) -> None:
            self.t = time.perf_counter()

        def on_step_end(self, *a: object, **k: object) -> None:
            steps.append(time.perf_counter() - self.t)
            print(f"  trl step {len(steps) - 1}: {tokens[-1] if tokens else 0} tokens, {steps[-1]:.2f}s "
                  f"(generation+scoring {gen_times[-1] if gen_times else 0:.2f}s)", file=sys.stderr, flush=True)

    trainer.add_callback(Clock())
    trainer.train()
    pairs = list(zip(steps, gen_times, tokens, strict=False))[1:]  # drop the warm-up step
    return {"e2e_tok_s": statistics.mean(n / s for s, _, n in pairs),
            "opt_tok_s": statistics.mean(n / max(s - g, 1e-9) for s, g, n in pairs)}


def main() -> None:
    args = _args()
    torch.set_num_threads(args.threads)
    from molt.backends.model import ensure_policy_model

    root = Path(__file__).resolve().parents[1]
    model_dir = ensure_policy_model(os.environ.get("MOLT_TEST_MODEL_HOME", root / ".molt" / "test-models"))
    with tempfile.TemporaryDirectory(prefix="molt-bench-trainer-") as tmp:
        work = Path(tmp)
        print(f"SmolLM2-135M, LoRA r={args.rank} q/k/v/o, batch {args.batch}, completion {args.completion} tokens, "
              f"{args.steps} timed steps, {args.threads} thread(s); load average at the start "
              f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores", flush=True)
        molt = bench_molt(model_dir, args, work)
        trl = None if args.no_trl else bench_trl(model_dir, args, work)
    rows = [("end-to-end tokens/s", "e2e_tok_s"), ("optimisation-only tokens/s", "opt_tok_s")]
    print(f"\n{'':28s} {'Molt':>10s} {'TRL GRPOTrainer':>16s} {'ratio':>7s}")
    for label, key in rows:
        t = trl[key] if trl else float("nan")
        print(f"{label:28s} {molt[key]:10.1f} {t:16.1f} {molt[key] / t if trl else float('nan'):6.2f}x")
    print(f"{'step done -> adapter served':28s} {molt['served_s']:9.2f}s {'(local backend, in-process)':>26s}")
    if "serve_p99_idle_ms" in molt:
        print(f"{'serving p99, idle':28s} {molt['serve_p99_idle_ms']:8.0f}ms")
        print(f"{'serving p99, training':28s} {molt['serve_p99_training_ms']:8.0f}ms")
    if "gw_p99_idle_ms" in molt:
        n = args.gateway_requests
        print(f"gateway over HTTP, slowest / median of {n} requests (8 tokens):")
        print(f"{'  not training':28s} {molt['gw_p99_idle_ms']:8.0f}ms / {molt['gw_p50_idle_ms']:.0f}ms")
        print(f"{'  training, ungated':28s} {molt['gw_p99_training_ungated_ms']:8.0f}ms / "
              f"{molt['gw_p50_training_ungated_ms']:.0f}ms ({molt['gw_training_ungated_steps']:.0f} steps)")
        print(f"{'  training, SLO gate':28s} {molt['gw_p99_training_gated_ms']:8.0f}ms / "
              f"{molt['gw_p50_training_gated_ms']:.0f}ms ({molt['gw_training_gated_steps']:.0f} steps, "
              f"{molt['gw_gate_pauses']:.0f} pauses, budget {molt['gw_slo_budget_ms']:.0f}ms)")
    print(f"load average at the end (1/5/15 min): {' '.join(f'{x:.1f}' for x in os.getloadavg())} on "
          f"{os.cpu_count()} cores")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"args": vars(args), "molt": molt, "trl": trl,
                                               "loadavg": os.getloadavg()}, indent=1))


if __name__ == "__main__":
    main()
