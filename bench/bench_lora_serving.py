"""What serving N per-tenant LoRA adapters side by side costs the local backend, beside the base model.

One SmolLM2-135M model in the local backend (``molt.backends.LocalBackend``, peft adapters) serves tenants
whose requests each name their own adapter; the peer is the same model in a second backend that never
loaded an adapter, measured in the same run. Rounds interleave every configuration, so drift on a shared
machine hits all alike; each round sends ``--requests`` greedy chat requests of ``--tokens`` new tokens
per configuration, and a configuration's figure is the median over rounds of its generated tokens per
second; "vs base" divides the medians, "paired" is the median over rounds of the ratio to that round's
base (firmer when the machine's pace changes between rounds). Configurations:

- ``base``: the backend without adapters (the peer every ratio is to);
- ``base, 4 loaded``: the same prompts to the base model of a backend holding 4 resident adapters
  (disabled for the request: what a tenant without an adapter pays for the others');
- ``1 / 2 / 4 adapters``: the requests round-robin over 1, 2 or 4 tenants' adapters, all resident;
- ``4 adapters, LRU 2``: 4 tenants' adapters under ``max_adapters=2``: every request loads its adapter from
  disk, evicting the least recently used (the worst case of the bound: more tenants in rotation than slots).

The adapters are random rank-8 LoRAs on q/k/v/o (the trainer's shape; no training needed to time them).

    python bench/bench_lora_serving.py                      # ~10 minutes on 2 busy cores
    python bench/bench_lora_serving.py --rounds 3 --requests 1 --tokens 16   # quicker, noisier
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import logging
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ["What is the capital of France?", "Name three colours.", "What is 7 + 5?", "Say something kind.",
           "What is a LoRA adapter?", "Give me a fruit.", "How many legs has a spider?", "What is rain?"]


def _make_lora() -> Any:
    """The tests' random-LoRA helper (tests/core/backends/lora.py), loaded by path: one definition."""
    spec = importlib.util.spec_from_file_location("molt_bench_lora", ROOT / "tests" / "core" / "backends" / "lora.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.make_lora


async def _run(backend: Any, models: list[str], n: int, tokens: int, offset: int) -> tuple[int, float]:
    """``n`` greedy requests, round-robin over ``models``; (tokens generated, seconds)."""
    from molt.backends import ChatRequest

    made = 0
    t0 = time.perf_counter()
    for i in range(n):
        msgs = [{"role": "user", "content": PROMPTS[(offset + i) % len(PROMPTS)]}]
        r = await backend.chat(ChatRequest(model=models[i % len(models)], messages=msgs, temperature=0.0,
                                           max_tokens=tokens, stop=None))
        made += len(r.choices[0].token_ids or [])
    return made, time.perf_counter() - t0


async def bench(rounds: int, requests: int, tokens: int, model_dir: Path, tmp: Path) -> dict[str, list[float]]:
    from molt.backends import LocalBackend

    make_lora = _make_lora()
    names = [f"tenant{i}@lora" for i in range(4)]
    paths = [str(make_lora(model_dir, tmp / f"lora{i}", seed=i)) for i in range(4)]
    plain = LocalBackend(model_path=model_dir, model="base")
    multi = LocalBackend(model_path=model_dir, model="base", max_adapters=4)
    tight = LocalBackend(model_path=model_dir, model="base", max_adapters=2)
    for b in (plain, multi, tight):
        await b.start()
    for name, path in zip(names, paths, strict=True):
        await multi.load_adapter(name, path)
        await tight.load_adapter(name, path)
    configs: dict[str, tuple[Any, list[str]]] = {
        "base": (plain, ["base"]), "base, 4 loaded": (multi, ["base"]), "1 adapter": (multi, names[:1]),
        "2 adapters": (multi, names[:2]), "4 adapters": (multi, names), "4 adapters, LRU 2": (tight, names)}
    for b, models in configs.values():  # warm-up: first-call costs out of the figures
        await _run(b, models, len(models), 4, 0)
    rates: dict[str, list[float]] = {k: [] for k in configs}
    for r in range(rounds):
        order = list(configs) if r % 2 == 0 else list(reversed(configs))
        for key in order:
            b, models = configs[key]
            made, secs = await _run(b, models, requests * len(models) if key != "base" else requests * 4, tokens, r)
            rates[key].append(made / secs)
        print(f"round {r + 1}/{rounds}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in rates.items()), flush=True)
    rates["_tight_stats"] = [float(v) for v in tight.adapter_stats().values()]
    return rates


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    p.add_argument("--requests", type=int, default=2, help="requests per adapter per round (default 2; base: 4×)")
    p.add_argument("--tokens", type=int, default=32, help="new tokens per request (default 32)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    from molt.backends.model import ensure_policy_model

    model_dir = ensure_policy_model()
    with tempfile.TemporaryDirectory(prefix="molt-bench-lora-") as tmp:
        rates = asyncio.run(bench(args.rounds, args.requests, args.tokens, model_dir, Path(tmp)))
    stats = rates.pop("_tight_stats")
    base = statistics.median(rates["base"])
    print(f"\nSmolLM2-135M, local backend (peft), greedy, {args.tokens} new tokens a request, median of "
          f"{args.rounds} interleaved rounds")
    print(f"{'configuration':<20} {'tokens/s':>9} {'vs base':>8} {'paired':>8}")
    for key, vals in rates.items():
        med = statistics.median(vals)
        paired = statistics.median(v / b for v, b in zip(vals, rates["base"], strict=True))
        print(f"{key:<20} {med:>9.1f} {med / base:>7.2f}× {paired:>7.2f}×")
    print(f"LRU 2 backend: {int(stats[3])} adapter loads, {int(stats[4])} evictions, {int(stats[5])} hits")


if __name__ == "__main__":
    sys.exit(main())
