"""``molt agents``: the agents the gateway named by fingerprint (they sent no ``X-Molt-Agent``), and
names for them (:mod:`molt.gateway.agents`)."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from molt.gateway.agents import AgentDirectory

__all__ = ["agents_app"]

agents_app = typer.Typer(help="Agents named without a header (by API key or by fingerprint), and their names.",
                         no_args_is_help=True)

TenantOpt = Annotated[str | None, typer.Option(help="Only this tenant's agents.")]


def _home() -> Path:
    return Path(os.environ.get("MOLT_HOME", "~/.molt")).expanduser()


@agents_app.command("ls")
def agents_ls(tenant: TenantOpt = None) -> None:
    """List the agents `molt serve` named by the fingerprint of their system prompt and tools."""
    entries = AgentDirectory(_home()).entries(tenant)
    if not entries:
        typer.echo(f"No agents named by fingerprint yet under {_home()} (an agent that sends X-Molt-Agent, or "
                   "whose key names its agent, is recorded under that name).")
        return
    t = Table("tenant", "agent", "fingerprint", "label", "last seen (UTC)")
    for e in entries:
        seen = datetime.fromtimestamp(e.last_seen, UTC).strftime("%Y-%m-%d %H:%M:%S")
        t.add_row(e.tenant, e.name or e.fingerprint, e.fingerprint, e.label, seen)
    Console(width=200).print(t)


@agents_app.command("rename")
def agents_rename(fingerprint: Annotated[str, typer.Argument(help="The fingerprint (fp-…) `molt agents ls` shows.")],
                  name: Annotated[str, typer.Argument(help="The agent's name from now on.")],
                  tenant: Annotated[str, typer.Option(help="The tenant of the agent.")] = "default") -> None:
    """Name a fingerprint: the running gateway records the agent's next calls under NAME (within a second),
    so `molt evolve run --agent NAME` evolves it."""
    AgentDirectory(_home()).rename(tenant, fingerprint, name)
    typer.echo(f"{tenant}/{fingerprint} is now named {name!r}; its calls from now on are recorded under it.")
