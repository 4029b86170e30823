"""Replay benchmark: episode replay throughput with cassette tools, step replay with real SmolLM2.

Prints two tables, each with a reference measured in the same run:

1. Episodes/s of a small tool-using support agent (2 model calls + 1 tool call per episode) under the
   deterministic ``stub`` policy:
   - *live reference*: the same episodes run live against the stub with the real (Python) tools, no
     cassette, nothing loaded from the store;
   - *replay, preloaded*: episode replay from trajectories already read and verified (cassette tools);
   - *replay, end to end*: read from LanceDB + hash-chain verification + cassette + replay + verifier.
   Every replay is checked to reproduce the recorded actions exactly. The goal is ≥ 50 episodes/s.
2. Step replay with the real SmolLM2-135M policy (``local`` backend, temperature 0, 8 new tokens):
   model calls/s and completion tokens/s of ``replay_steps`` next to calling the backend directly with
   the same requests (the floor: replay's own overhead is the difference). Every step is checked to
   re-decide exactly what was recorded.

Run: ``.venv/bin/python bench/bench_replay.py`` (``--episodes 200 --smol-episodes 4``; ``--no-smol`` skips
table 2). Set ``MOLT_TEST_MODEL_HOME`` to reuse a converted SmolLM2 (default ``.molt/test-models``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from molt.backends import ChatRequest, StubBackend
from molt.replay import (
    LiveTools,
    ReplayAgent,
    load_trajectories,
    load_trajectory,
    record_episode,
    replay_episode,
    replay_steps,
    replayable,
    save_trajectories,
)
from molt.replay.episode import live_answer, resolve_agent, run_agent
from molt.replay.load import model_request, offered_tools
from molt.store import Store

console = Console(width=110)
ROOT = Path(__file__).resolve().parents[1]

KB_TOOL = {"type": "function", "function": {
    "name": "search_kb", "description": "Search the knowledge base.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}


def kb_search(query: str) -> Any:
    return {"query": query, "state": "shipped", "eta_days": 2}


@replayable(name="bench-support", verifier="contains:shipped")
async def support(input: str, model: Any, tools: Any) -> Any:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are support."},
                                      {"role": "user", "content": input}]
    for _ in range(4):
        reply = await model.achat(messages, tools=[KB_TOOL], temperature=0)
        messages.append(reply.message)
        if not reply.tool_calls:
            return reply.text
        for c in reply.tool_calls:
            messages.append({"role": "tool", "tool_call_id": c["id"],
                             "content": orjson.dumps(tools.call(c["name"], **c["arguments"])).decode()})
    return None


@replayable(name="bench-smol")
async def smol(input: str, model: Any, tools: Any) -> Any:
    facts = tools.call("lookup", topic=input)
    reply = await model.achat([{"role": "system", "content": f"Facts: {facts}"}, {"role": "user", "content": input}],
                              temperature=0, max_tokens=8)
    return reply.text


def live_tools() -> LiveTools:
    live = LiveTools()
    live.register("search_kb", kb_search)
    live.register("lookup", lambda topic: f"Notes about {topic}: it is documented in the handbook.")
    return live


async def bench_episodes(store: Store, n: int) -> list[tuple[str, float, str]]:
    questions = [f"Where is my order A-{i}?" for i in range(n)]
    policy = ReplayAgent(StubBackend())
    items = []
    for q in questions:
        ev, rw, _ = await record_episode("bench-support", q, policy, live_tools())
        items.append((ev, rw))
    save_trajectories(store, items)
    ids = [ev[0].trajectory_id for ev, _ in items]
    agent = resolve_agent("bench-support")

    t0 = time.perf_counter()
    for q in questions:
        await run_agent(agent, q, ReplayAgent(StubBackend()), live_answer(live_tools()))
    live_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    for tid in ids:
        load_trajectory(store, tid)
    load_one_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    loaded = load_trajectories(store, ids)
    trajs = [loaded[tid] for tid in ids]
    load_s = time.perf_counter() - t0
    assert all(not isinstance(t, Exception) for t in trajs)

    t0 = time.perf_counter()
    results = [await replay_episode(t, agent, ReplayAgent(StubBackend())) for t in trajs]
    replay_s = time.perf_counter() - t0
    exact = sum(r.same_actions and r.answer == r.recorded_answer and not r.misses for r in results)
    if exact != n:
        raise SystemExit(f"only {exact}/{n} replays reproduced the recording")
    return [("live against the stub, real tools (reference)", n / live_s, "—"),
            ("replay, preloaded trajectories, cassette tools", n / replay_s, f"{exact}/{n}"),
            ("replay end to end, batched load (LanceDB read + chain verify + replay)", n / (load_s + replay_s),
             f"{exact}/{n}"),
            ("replay end to end, one LanceDB read per trajectory", n / (load_one_s + replay_s), f"{exact}/{n}")]


async def bench_smol(store: Store, n: int, threads: int | None) -> list[tuple[str, float, float, str]]:
    from molt.backends import LocalBackend
    from molt.backends.model import ensure_policy_model

    home = Path(os.environ.get("MOLT_TEST_MODEL_HOME", ROOT / ".molt" / "test-models"))
    # --threads: torch CPU threads; on a shared, loaded box 1 thread is several times faster than 2.
    backend = LocalBackend(model_path=ensure_policy_model(home), threads=threads)
    policy = ReplayAgent(backend)
    await policy.start()
    items = []
    for i in range(n):
        ev, rw, _ = await record_episode("bench-smol", f"Question {i}: what is in the handbook?", policy, live_tools())
        items.append((ev, rw))
    save_trajectories(store, items)
    trajs = [load_trajectory(store, ev[0].trajectory_id) for ev, _ in items]

    first = next(e for e in trajs[0].events if e.kind.value == "model_call")
    await backend.chat(ChatRequest(model=backend.model, messages=model_request(first), temperature=0, max_tokens=8))
    t0 = time.perf_counter()  # timed after one warm-up call, so neither mode pays first-call costs
    toks = 0
    for t in trajs:
        for e in t.events:
            if e.kind.value == "model_call":
                res = await backend.chat(ChatRequest(model=backend.model, messages=model_request(e),
                                                     tools=offered_tools(e), temperature=0, max_tokens=8))
                toks += res.usage.completion_tokens if res.usage else 0
    direct_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    steps = []
    for t in trajs:
        steps += await replay_steps(t, ReplayAgent(backend))
    replay_s = time.perf_counter() - t0
    same = sum(s.same_as_recorded for s in steps)
    rtoks = sum(s.decision.completion_tokens for s in steps)
    return [("backend.chat directly, same requests (reference)", len(steps) / direct_s, toks / direct_s, "—"),
            ("step replay (harness + backend + compare)", len(steps) / replay_s, rtoks / replay_s,
             f"{same}/{len(steps)}")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=200)
    ap.add_argument("--smol-episodes", type=int, default=4)
    ap.add_argument("--no-smol", action="store_true")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads for SmolLM2 (default 1)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "store", auto_compact=False) as store:
        rows = asyncio.run(bench_episodes(store, args.episodes))
        t = Table(title=f"Episode replay, stub policy, {args.episodes} episodes (goal ≥ 50 episodes/s)")
        t.add_column("mode")
        t.add_column("episodes/s", justify="right")
        t.add_column("reproduced exactly", justify="right")
        for name, eps, ok in rows:
            t.add_row(name, f"{eps:,.0f}", ok)
        console.print(t)
        if not args.no_smol:
            srows = asyncio.run(bench_smol(store, args.smol_episodes, args.threads))
            t = Table(title=f"Step replay, SmolLM2-135M local backend ({args.threads} thread), temperature 0, "
                            f"{args.smol_episodes} calls of 8 new tokens")
            t.add_column("mode")
            t.add_column("model calls/s", justify="right")
            t.add_column("completion tokens/s", justify="right")
            t.add_column("same as recorded", justify="right")
            for name, cps, tps, ok in srows:
                t.add_row(name, f"{cps:.2f}", f"{tps:.1f}", ok)
            console.print(t)
    console.print(f"[dim]{sys.executable} bench/bench_replay.py --episodes {args.episodes} "
                  f"--smol-episodes {args.smol_episodes} --threads {args.threads}; os.cpu_count()={os.cpu_count()}, "
                  f"load average {os.getloadavg()[0]:.1f}[/dim]")


if __name__ == "__main__":
    main()
