"""What each capture handler costs a LangChain agent per captured event, side by side with its peers.

One scripted agent run — a root chain that loops ``--turns`` times over a chat-model call and a tool
call, then a retrieval and a last model call — is repeated with no handler, with a do-nothing
handler, with Molt's :class:`~molt_langchain.MoltCallbackHandler`, with LangSmith's
``LangChainTracer`` and with Langfuse's ``CallbackHandler`` (both pointed at an unused loopback port,
so their exporters fail in the background and nothing leaves the machine). Runs are interleaved
round-robin so drift hits every handler alike.

**Agent-thread cost** is the CPU time of the thread that runs the agent (``time.thread_time``), which
is what the agent waits for; work a handler moves to other threads is shown apart as **all threads**:
process CPU over a block of runs that ends with Molt's flush (a peer's exporter is not waited for: it
retries the dead port for seconds), less that of a block of no-handler
runs just before it, handlers taking turns, the median over the rounds. Pairing matters: the peers'
exporters keep retrying in the background, so a handler measured on its own absorbs whatever ran
beside it. For Molt the CPU of its own threads (dispatcher, spool writer, delivery) is shown too, read
from each thread's clock. Per event means per LangChain run the handler sees start and end of (the
number of events Molt records per run).

    python bench/bench_adapters.py             # under 2 minutes on 2 busy cores
    python bench/bench_adapters.py --runs 60   # quicker, noisier

Goal: Molt adds ≤ 20 µs p50 per event on the agent thread and ≤ 0.25× the cheaper peer. "molt" is the
default, governed Recorder; "molt, hook=None" the same adapter recording without the governance
pipeline (capture alone).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import os
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Peers point at a dead loopback port; their tracing must be on, their exports must go nowhere.
DEAD = "http://127.0.0.1:9"
# LangSmith's tracer is attached explicitly (LANGSMITH_TRACING=true would add it to every run,
# the no-handler baseline included).
os.environ.update(
    {
        "LANGSMITH_TRACING": "false",
        "LANGCHAIN_TRACING_V2": "false",
        "LANGSMITH_ENDPOINT": DEAD,
        "LANGSMITH_API_KEY": "bench",
        "LANGFUSE_HOST": DEAD,
        "LANGFUSE_BASE_URL": DEAD,
        "LANGFUSE_PUBLIC_KEY": "pk-lf-bench",
        "LANGFUSE_SECRET_KEY": "sk-lf-bench",
        "OTEL_SDK_DISABLED": "false",
    }
)
os.environ.pop("MOLT_LANGCHAIN", None)
warnings.filterwarnings("ignore")
logging.disable(logging.CRITICAL)

from langchain_core.callbacks import BaseCallbackHandler  # noqa: E402
from langchain_core.documents import Document  # noqa: E402
from langchain_core.language_models.chat_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.retrievers import BaseRetriever  # noqa: E402
from langchain_core.runnables import RunnableLambda  # noqa: E402
from langchain_core.tools import tool  # noqa: E402


class BenchModel(BaseChatModel):
    """Asks for the ``lookup`` tool until it has seen ``turns`` tool results, then answers."""

    turns: int = 8
    latency_s: float = 0.0

    @property
    def _llm_type(self) -> str:
        return "bench"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        seen = sum(isinstance(m, ToolMessage) for m in messages)
        if self.latency_s:
            time.sleep(self.latency_s)  # a model answers over the network: the agent thread waits
        usage = {"input_tokens": 40 + 10 * seen, "output_tokens": 8, "total_tokens": 48 + 10 * seen}
        if seen < self.turns:
            msg = AIMessage(
                content="",
                tool_calls=[{"id": f"c{seen}", "name": "lookup", "args": {"q": f"q{seen}"}}],
                usage_metadata=usage,
                response_metadata={"model_name": "bench-model"},
            )
        else:
            msg = AIMessage(content="done", usage_metadata=usage, response_metadata={"model_name": "bench-model"})
        return ChatResult(generations=[ChatGeneration(message=msg)])


@tool
def lookup(q: str) -> str:
    """Look something up."""
    return f"result for {q}"


class BenchRetriever(BaseRetriever):
    def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Document]:
        return [Document(page_content=f"passage {i} about {query}", id=str(i)) for i in range(3)]


def make_agent(turns: int, latency_ms: float = 0.0) -> Any:
    model, retriever = BenchModel(turns=turns, latency_s=latency_ms / 1000), BenchRetriever()

    def agent(question: str, config: Any) -> str:
        msgs: list[BaseMessage] = [HumanMessage(question)]
        while True:
            ai = model.invoke(msgs, config)
            msgs.append(ai)
            if not ai.tool_calls:
                break
            for call in ai.tool_calls:
                msgs.append(lookup.invoke(call, config))
        retriever.invoke(question, config)
        return str(ai.content)

    return RunnableLambda(agent, name="agent")


class NoopHandler(BaseCallbackHandler):
    """The floor: a handler that does nothing (LangChain's own dispatch cost)."""

    run_inline = True

    def on_chat_model_start(self, *a: Any, **k: Any) -> None:  # the base raises, sending LangChain to
        pass  # a slower fallback (on_llm_start with the messages rendered as text)


_CALLBACKS = (
    "on_chain_start",
    "on_chain_end",
    "on_chat_model_start",
    "on_llm_end",
    "on_tool_start",
    "on_tool_end",
    "on_retriever_start",
    "on_retriever_end",
)


class Tape(BaseCallbackHandler):
    """Records the callbacks of one run, to replay them into each handler without LangChain around."""

    run_inline = True

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattribute__(self, name: str) -> Any:
        if name in _CALLBACKS:
            return lambda *a, **k: self.calls.append((name, a, k))
        return super().__getattribute__(name)


def replay(tape: Tape, handler: Any) -> int:
    """Agent-thread ns to feed one run's callbacks to ``handler`` (with fresh run ids)."""
    import uuid

    ids: dict[Any, Any] = {}

    def fresh(v: Any) -> Any:
        if v is None:
            return None
        if v not in ids:
            ids[v] = uuid.uuid4()
        return ids[v]

    calls = [
        (
            getattr(handler, n),
            a,
            {**k, "run_id": fresh(k.get("run_id")), "parent_run_id": fresh(k.get("parent_run_id"))},
        )
        for n, a, k in tape.calls
    ]
    t0 = time.thread_time_ns()
    for fn, a, k in calls:
        fn(*a, **k)
    return time.thread_time_ns() - t0


# ---------------------------------------------------------------------- handlers


def handlers(tmp: Path) -> dict[str, tuple[Any, Callable[[], None]]]:
    """name -> (handler or None, flush). A peer's flush waits for its exporter, which retries the dead
    port for seconds: it is called once, before the all-threads phase, not in its paired blocks."""
    from molt.capture import MemorySink, Recorder
    from molt_langchain import MoltCallbackHandler

    out: dict[str, tuple[Any, Callable[[], None]]] = {
        "none": (None, lambda: None),
        "no-op handler": (NoopHandler(), lambda: None),
    }
    # named, so that each Recorder's threads can be told apart (see molt_threads)
    rec = Recorder(MemorySink(), spool_dir=tmp / "spool", name="molt")
    molt = MoltCallbackHandler(rec)
    out["molt"] = (molt, lambda: molt.flush(60, deliver=True) and None)
    # capture alone (no governance pipeline): what the adapter, dispatcher, sealing and spool cost, apart
    # from redaction (bench_governance.py measures that)
    bare = MoltCallbackHandler(Recorder(MemorySink(), spool_dir=tmp / "spool-bare", hook=None, name="molt-bare"))
    out["molt, hook=None"] = (bare, lambda: bare.flush(60, deliver=True) and None)
    try:
        from langchain_core.tracers.langchain import LangChainTracer
        from langsmith import Client

        ls_client = Client(api_url=DEAD, api_key="bench", auto_batch_tracing=True)
        ls = LangChainTracer(client=ls_client, project_name="bench")
        out["langsmith"] = (ls, lambda: _quiet(ls.wait_for_futures))
    except Exception as exc:  # pragma: no cover - a peer that cannot load is reported, not fatal
        print(f"LangSmith unavailable: {exc!r}", file=sys.stderr)
    try:
        from langfuse import Langfuse
        from langfuse.langchain import CallbackHandler

        lf_client = Langfuse(public_key="pk-lf-bench", secret_key="sk-lf-bench", host=DEAD)
        lf = CallbackHandler(public_key="pk-lf-bench")
        out["langfuse"] = (lf, lambda: _quiet(lf_client.flush))
    except Exception as exc:  # pragma: no cover
        print(f"Langfuse unavailable (pip install langfuse): {exc!r}", file=sys.stderr)
    return out


def _quiet(fn: Callable[[], Any]) -> None:
    with contextlib.suppress(Exception):  # a peer's flush to a dead port may raise; that is expected
        fn()


# ---------------------------------------------------------------------- measurement


def one_run(agent: Any, handler: Any) -> tuple[int, int]:
    """(agent-thread CPU ns, wall ns) of one run."""
    config = {"callbacks": [handler]} if handler is not None else {}
    t0, w0 = time.thread_time_ns(), time.perf_counter_ns()
    out = agent.invoke("help", config)
    t1, w1 = time.thread_time_ns(), time.perf_counter_ns()
    assert out == "done"
    return t1 - t0, w1 - w0


def interleaved(agent: Any, hs: dict[str, tuple[Any, Any]], runs: int, warmup: int) -> dict[str, list[int]]:
    """Added agent-thread ns per run for each handler: each run is paired with a no-handler run just
    before it, and handlers take turns, so machine drift cancels out of the difference."""
    samples: dict[str, list[int]] = {name: [] for name, (h, _) in hs.items() if h is not None}
    for i in range(warmup + runs):
        for name in samples:
            base, _ = one_run(agent, None)
            cpu, _ = one_run(agent, hs[name][0])
            if i >= warmup:
                samples[name].append(cpu - base)
    return samples


def replayed(tape: Tape, hs: dict[str, tuple[Any, Any]], runs: int) -> dict[str, list[int]]:
    """Agent-thread ns per replayed run for each handler (no LangChain dispatch), round-robin."""
    out: dict[str, list[int]] = {n: [] for n, (h, _) in hs.items() if h is not None}
    for i in range(runs + 5):
        for n in out:
            ns = replay(tape, hs[n][0])
            if i >= 5:
                out[n].append(ns)
    return out


#: Molt's threads per handler: the shared dispatcher and that handler's Recorder's writer and deliverer.
_MOLT_THREADS = {
    "molt": ("molt-adapt", "molt-spool-writer", "molt-deliver"),
    "molt, hook=None": ("molt-adapt", "molt-bare-spool-writer", "molt-bare-deliver"),
}


def molt_threads(name: str) -> dict[str, int]:
    """CPU ns so far of each Molt thread serving handler ``name`` (by thread name), from its own clock."""
    out = {}
    wanted = _MOLT_THREADS.get(name, ())
    for t in threading.enumerate():
        if t.name in wanted and t.ident is not None:
            with contextlib.suppress(OSError):  # the thread ended in between
                out[t.name] = time.clock_gettime_ns(time.pthread_getcpuclockid(t.ident))
    return out


def block(agent: Any, handler: Any, flush: Callable[[], None], runs: int) -> tuple[int, int]:
    """(process CPU ns, agent-thread CPU ns) of ``runs`` runs back to back with ``handler``; the
    process figure includes its flush, the agent thread's does not."""
    c0 = time.process_time_ns()
    a = 0
    for _ in range(runs):
        a += one_run(agent, handler)[0]
    flush()
    return time.process_time_ns() - c0, a


def all_threads(
    agent: Any, hs: dict[str, tuple[Any, Any]], rounds: int, runs: int
) -> tuple[dict[str, list[float]], list[float], dict[str, dict[str, list[float]]], dict[str, list[float]]]:
    """Added process CPU ns per run for each handler, paired: each round, each handler's block of
    ``runs`` runs (and its flush) follows a block of no-handler runs, and the difference is one sample.
    Also the no-handler CPU ns per run, per Molt thread the CPU ns per run of each handler block, and
    the added agent-thread CPU ns per run in these blocks (runs back to back, so a handler's background
    threads run beside the agent, as they do in a busy process)."""
    added: dict[str, list[float]] = {n: [] for n, (h, _) in hs.items() if h is not None}
    agent_added: dict[str, list[float]] = {n: [] for n in added}
    base: list[float] = []
    per_thread: dict[str, dict[str, list[float]]] = {n: {} for n in added if n in _MOLT_THREADS}
    for r in range(rounds + 1):  # round 0 warms every handler up; not counted
        for name in added:
            gc.collect()
            b, ba = block(agent, None, lambda: None, runs)
            t0 = molt_threads(name)
            h, ha = block(agent, hs[name][0], hs[name][1] if name in _MOLT_THREADS else lambda: None, runs)
            t1 = molt_threads(name)
            if r == 0:
                continue
            base.append(b / runs)
            added[name].append((h - b) / runs)
            agent_added[name].append((ha - ba) / runs)
            if name in per_thread:
                for tn, ns in t1.items():
                    per_thread[name].setdefault(tn, []).append((ns - t0.get(tn, 0)) / runs)
    return added, base, per_thread, agent_added


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=80, help="measured runs per handler (default 80)")
    p.add_argument("--turns", type=int, default=8, help="model+tool turns per run (default 8)")
    p.add_argument(
        "--model-latency-ms",
        type=float,
        default=0.0,
        help="how long each model call waits, as a network call would (default 0: a purely CPU-bound "
        "agent, the worst case for a handler with background work; real LLM calls take 100+ ms)",
    )
    args = p.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        agent = make_agent(args.turns, args.model_latency_ms)
        hs = handlers(Path(tmp))
        molt = hs["molt"][0]
        one_run(agent, molt)
        hs["molt"][1]()
        events_per_run = molt.stats.events
        tape = Tape()
        agent.invoke("help", {"callbacks": [tape]})
        t_start = time.monotonic()
        samples = interleaved(agent, hs, args.runs, warmup=max(5, args.runs // 20))
        own = replayed(tape, hs, args.runs)
        for _, flush in hs.values():  # what the phases above left queued is not counted below
            flush()
        cpu_added, cpu_base, cpu_threads, agent_blocks = all_threads(agent, hs, max(10, args.runs // 4), 4)
        elapsed = time.monotonic() - t_start
        assert molt.stats.errors == 0, molt.stats.last_error

    def us(ns: float) -> float:
        return ns / events_per_run / 1000

    base = pct(cpu_base, 0.5)
    added = {n: [us(x) for x in xs] for n, xs in samples.items()}
    p50 = {n: pct(v, 0.50) for n, v in added.items()}
    p99 = {n: pct(v, 0.99) for n, v in added.items()}
    bg = {n: [us(x) for x in xs] for n, xs in cpu_added.items()}
    in_blocks = {n: pct([us(x) for x in xs], 0.5) for n, xs in agent_blocks.items()}
    threads = {n: {t: pct([us(x) for x in xs], 0.5) for t, xs in ts.items()} for n, ts in cpu_threads.items()}
    own_us = {n: [us(x) for x in xs] for n, xs in own.items()}
    peers = [n for n in ("langsmith", "langfuse") if n in p50]
    cheaper = min((p50[n] for n in peers), default=None)
    render(args, events_per_run, base, p50, p99, own_us, bg, threads, cheaper, elapsed, in_blocks)


def render(
    args: Any,
    events: int,
    base: float,
    p50: dict[str, float],
    p99: dict[str, float],
    own: dict[str, list[float]],
    bg: dict[str, list[float]],
    threads: dict[str, dict[str, float]],
    cheaper: float | None,
    elapsed: float,
    in_blocks: dict[str, float],
) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(
        title=f"Agent cost per captured event — LangChain, {events} events/run, {args.runs} runs, "
        f"model latency {args.model_latency_ms:g} ms, "
        f"no-handler run {base / 1e6:.2f} ms CPU"
    )
    t.add_column("handler")
    t.add_column("agent thread p50 µs", justify="right")
    t.add_column("agent thread p99 µs", justify="right")
    t.add_column("× cheaper peer (p50)", justify="right")
    t.add_column("agent thread in blocks p50 µs", justify="right")
    t.add_column("own callbacks p50 / p99 µs", justify="right")
    t.add_column("all threads µs p50 [p25–p75]", justify="right")
    for name in p50:
        ratio = f"{p50[name] / cheaper:.2f}" if cheaper and name != "none" else "—"
        mine = f"{pct(own[name], 0.5):.1f} / {pct(own[name], 0.99):.1f}"
        spread = f"{pct(bg[name], 0.5):.1f} [{pct(bg[name], 0.25):.0f}–{pct(bg[name], 0.75):.0f}]"
        t.add_row(name, f"{p50[name]:.1f}", f"{p99[name]:.1f}", ratio, f"{in_blocks[name]:.1f}", mine, spread)
    console = Console()
    console.print(t)
    console.print(
        "agent thread: added CPU of the agent's thread over the no-handler run, per event; in blocks: the same "
        "over runs back to back, where the handler's own threads run beside the agent (their GIL hand-offs and "
        "cache traffic slow the agent's thread; a single run often ends before they start); own callbacks: "
        "the handler's callbacks replayed without LangChain's dispatch; all threads: added process CPU "
        "(background export and Molt's dispatcher/spool threads included), per event, paired with a "
        f"no-handler block in each of {len(next(iter(bg.values()), []))} rounds."
    )
    for name, ts in threads.items():
        console.print(
            f"{name}: its own threads' CPU per event, p50: "
            + ", ".join(f"{tn} {v:.1f} µs" for tn, v in sorted(ts.items()))
        )
    if "molt" in p50:
        goal_abs = p50["molt"] <= 20
        goal_rel = cheaper is None or p50["molt"] <= 0.25 * cheaper
        console.print(
            f"Molt goal ≤ 20 µs p50: {'met' if goal_abs else 'MISSED'} ({p50['molt']:.1f} µs); "
            f"≤ 0.25× cheaper peer: {'met' if goal_rel else 'MISSED'}"
            + (f" ({p50['molt'] / cheaper:.2f}×)" if cheaper else " (no peer ran)")
            + f".  [{elapsed:.0f} s, python {sys.version.split()[0]}, {os.cpu_count()} CPUs]"
        )
    # The all-threads goal is for capture (adapter, dispatcher, sealing, spool, delivery): the default
    # Recorder adds the governance pipeline, whose redaction bench_governance.py measures on its own.
    for name, label in (("molt, hook=None", "capture alone"), ("molt", "governed (the default)")):
        if name in bg:
            v = pct(bg[name], 0.5)
            goal = (f"goal ≤ 100 µs: {'met' if v <= 100 else 'MISSED'}" if name == "molt, hook=None"
                    else "the goal is for capture alone")
            console.print(f"Molt all threads, {label}: {v:.1f} µs per event p50 ({goal})"
                          + (f", {v / pct(bg[n], 0.5):.2f}× {n}" if (n := _cheapest_bg(bg)) else ""))


def _cheapest_bg(bg: dict[str, list[float]]) -> str | None:
    """The peer with the least all-threads CPU per event in this run (None when no peer ran)."""
    peers = [n for n in ("langsmith", "langfuse") if bg.get(n)]
    return min(peers, key=lambda n: pct(bg[n], 0.5), default=None)


if __name__ == "__main__":
    main()
