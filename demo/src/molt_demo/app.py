"""``molt demo``'s command line: options, Ctrl-C handling, and the summary table printed at the end of a run
(:func:`molt_demo.run.run_demo`); what the demo shows is in :mod:`molt_demo`'s docstring."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from molt_demo.report import LIBRARY_LOG
from molt_demo.report import served_text as served
from molt_demo.run import DemoResult, console, run_demo

# The demo's public names, importable from its command's module too.
__all__ = ["DemoResult", "demo_command", "run_demo"]


def demo_command(
    quick: Annotated[bool, typer.Option("--quick", help="The CI-sized run (8 rounds × 12 requests per tenant).")]
    = False,
    rounds: Annotated[int | None, typer.Option("--rounds", min=2, help="Rounds (default 8 quick, 12 full, "
                                                                    "8 with --train).")] = None,
    per_tenant: Annotated[int | None, typer.Option("--per-tenant", min=6, help="Support-desk requests per tenant per "
                                                   "round (default 12 quick, 24 full, 12 with --train).")] = None,
    out: Annotated[Path, typer.Option("--out", help="Where the report, PNG and JSON go.")] = Path("molt-demo"),
    home: Annotated[Path | None, typer.Option("--home", help="Demo store directory (default: a fresh temporary "
                                                               "one, removed afterwards).")] = None,
    train: Annotated[bool, typer.Option("--train", help="Add the molt-math agent on SmolLM2 and train its weights "
                                                        "when the control plane asks (needs molt-trainer).")] = False,
    math_per_tenant: Annotated[int, typer.Option("--math-per-tenant", min=4, help="With --train: molt-math "
                                                 "questions per tenant per round.")] = 8,
    model_dir: Annotated[Path | None, typer.Option("--model-dir", help="With --train: the converted policy model "
                                                   "directory (default: converted once into $MOLT_HOME).")] = None,
    until_trained: Annotated[int, typer.Option("--until-trained", min=0, help="With --train: end the run once a "
                                               "trained adapter has served this many rounds as the live version "
                                               "(at most --rounds rounds; 0: run them all).")] = 0,
) -> None:
    """Run the end-to-end demo: an agent evolving through Molt, with a report at the end."""
    if until_trained and not train:
        raise typer.BadParameter("--until-trained needs --train (it waits for a trained adapter).",
                                 param_hint="--until-trained")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    n_rounds = rounds or (8 if quick or train else 12)
    n_per = per_tenant or (12 if quick or train else 24)  # --train: the CPU time goes to SmolLM2 instead
    tmp = None
    if home is None:
        tmp = tempfile.mkdtemp(prefix="molt-demo-")
        home = Path(tmp)
    elif home.exists() and any(home.iterdir()):
        raise typer.BadParameter(f"{home} is not empty; the demo needs a fresh directory.", param_hint="--home")
    console.print(f"[bold]molt demo[/bold]: {n_rounds} rounds × {n_per} requests for tenants acme and globex "
                  f"(LangChain agent → Molt gateway → scripted support-desk model)"
                  + (f", plus {math_per_tenant} molt-math questions each (→ SmolLM2, trained)" if train else ""))
    # Ctrl-C stops the demo wherever it is. Python's default handler lets asyncio.run() turn SIGINT into a
    # cancellation of its task, and a cancellation absorbed on the way (the control plane's replays run
    # inside asyncio.run) let a CI run finish as if never interrupted; a handler of our own is left alone
    # by asyncio and raises KeyboardInterrupt at once.
    previous = signal.signal(signal.SIGINT, _interrupt) if threading.current_thread() is threading.main_thread() \
        else None
    try:
        res = (run_demo(home, rounds=n_rounds, per_tenant=n_per, out_dir=out, train=True,
                        math_per_tenant=math_per_tenant, model_dir=model_dir, until_trained=until_trained) if train
               else run_demo(home, rounds=n_rounds, per_tenant=n_per, out_dir=out))
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    tbl = Table(title=f"Molt demo — success {res.first_success:.0%} → {res.last_success:.0%} "
                      f"in {res.seconds:.0f} s")
    for col in ("tenant", "failure cluster", "intervention", "round", "version", "parent served", "it served"):
        tbl.add_column(col)
    for f in res.fixes:  # per version: the task's success under the parent vs under the version it made
        tbl.add_row(f["tenant"], f["cluster"], f["intervention"], str(f["round"] or "-"), f["version"] or "-",
                    served(f["before"], f["n_before"]), served(f["after"], f["n_after"])
                    + (" (overlaps)" if f["overlaps"] else ""))
    Console().print(tbl)
    ran = max((r["round"] for r in res.rounds), default=-1) + 1
    if ran < n_rounds:
        Console().print(f"ended after round {ran} of {n_rounds}: a trained adapter served {until_trained} "
                        f"round(s) as the live version (--until-trained)")
    if res.training is not None:
        t = res.training
        Console().print(f"{t['agent']}: success {served(t['success_base'], t['n_base'])} served by the base model "
                        f"→ {served(t['success_adapter'], t['n_adapter'])} served by the trained adapter "
                        f"({', '.join(t['adapters']) or 'none'})")
    Console().print(f"chains verified: {res.verified} ok, {res.broken} broken · report: {res.report} · "
                    f"plot: {res.png} · library messages: {res.report.parent / LIBRARY_LOG}")
    if res.broken or res.last_success <= res.first_success:
        raise typer.Exit(1)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt
