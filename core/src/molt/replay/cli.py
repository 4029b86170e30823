"""``molt replay``: replay a recorded trajectory side by side with the recording, or a window of them.

::

    molt replay <trajectory> [--override key=value …] [--backend stub|local|openai|vllm] [--agent module:fn]
    molt replay window [--tenant T] [--limit N] [--sample K] [--agent module:fn] [--override key=value …]

Without ``--agent`` a single trajectory's model calls are each re-decided from their recorded request
(step replay), and a window is re-driven from the recordings alone (generic replay,
:mod:`molt.replay.generic`); with ``--agent`` the whole episode is re-run through the
``@molt.replayable`` agent. Tools are served from the cassette. Override keys: ``memory``, ``skill`` (``name:instructions``), ``system_prompt``,
``system_prompt_mode``, ``tool.<name>.description|rename|parameters``, ``model``, ``temperature``,
``top_p``, ``max_tokens``, ``seed``.
"""

from __future__ import annotations

import asyncio
import os
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from typer.core import TyperGroup

__all__ = ["app"]


class _DefaultShow(TyperGroup):
    """``molt replay <trajectory>`` means ``molt replay show <trajectory>``."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["show", *args]
        return super().resolve_command(ctx, args)


app = typer.Typer(cls=_DefaultShow, help="Replay recorded trajectories under a candidate policy.",
                  no_args_is_help=True, add_completion=False)
console = Console()

StoreOpt = Annotated[str | None, typer.Option("--store", help="Store URI (default: $MOLT_HOME/store).")]
OverrideOpt = Annotated[list[str] | None, typer.Option("--override", "-o", help="key=value; repeatable.")]
BackendOpt = Annotated[str, typer.Option("--backend", help="Backend kind: stub, local, openai, vllm.")]
ModelPathOpt = Annotated[str | None, typer.Option("--model-path", help="local backend: model directory.")]
AgentOpt = Annotated[str | None, typer.Option("--agent", help="module:function of a @molt.replayable agent.")]
VerifierOpt = Annotated[str | None, typer.Option("--verifier", help="e.g. contains:45 days, regex:…, exact:…")]


KeyOpt = Annotated[str | None, typer.Option("--api-key", envvar="MOLT_API_KEY", show_envvar=False,
                                            help="An API key of the trajectories' tenant (or $MOLT_API_KEY).")]
OperatorOpt = Annotated[bool, typer.Option("--operator", help="Act as the platform operator: every tenant, no API "
                                                              "key (when a key file exists, only whoever may read "
                                                              "it).")]


def _home() -> Any:
    from pathlib import Path

    return Path(os.environ.get("MOLT_HOME", "~/.molt")).expanduser()


def _store(uri: str | None) -> Any:
    from molt.store import Store

    return Store.open(uri or _home() / "store", auto_compact=False)


def _tenant(api_key: str | None, operator: bool, tenant: str | None = None) -> str | None:
    """The tenant a replay may read (``None``: any). With a key file (``$MOLT_KEYS`` or
    ``$MOLT_HOME/keys.toml``) a key of that tenant or ``--operator`` is required, as for every
    command that reads the store; a local install with no key file is its own operator."""
    from pathlib import Path

    from molt.errors import AuthenticationError, MoltError, PermissionDenied
    from molt.governance.access import KeyRing

    keys = Path(os.environ.get("MOLT_KEYS") or _home() / "keys.toml")
    if operator and api_key:
        raise MoltError("Give either --operator or an API key, not both.")
    if api_key:
        p = KeyRing.from_file(keys).authenticate(api_key).require("read")
        if tenant is not None and tenant != p.tenant_id:
            raise PermissionDenied(f"This key belongs to tenant {p.tenant_id!r}; it cannot replay {tenant!r}.")
        return p.tenant_id
    if operator or not keys.exists():
        return tenant
    raise AuthenticationError("Tenants are configured (a key file exists): give --api-key of the trajectory's "
                              "tenant (or $MOLT_API_KEY), or --operator.")


def _policy(backend: str, model_path: str | None, overrides: list[str] | None, candidate: str | None = None) -> Any:
    from molt.backends import create_backend
    from molt.replay.policy import ReplayAgent, parse_overrides

    config: dict[str, Any] = {}
    if backend == "local" and model_path:
        config["model_path"] = model_path
    return ReplayAgent(create_backend(backend, **config), parse_overrides(overrides or []), version=candidate)


@app.command("show")
def show(
    trajectory: Annotated[str, typer.Argument(help="The trajectory id.")],
    override: OverrideOpt = None,
    backend: BackendOpt = "stub",
    model_path: ModelPathOpt = None,
    agent: AgentOpt = None,
    verifier: VerifierOpt = None,
    store: StoreOpt = None,
    api_key: KeyOpt = None,
    operator: OperatorOpt = False,
) -> None:
    """Replay one trajectory and show recorded vs replayed steps side by side."""
    from molt.errors import NotFound
    from molt.replay.episode import replay_episode
    from molt.replay.load import load_trajectory
    from molt.replay.step import replay_steps

    tenant = _tenant(api_key, operator)
    st = _store(store)
    try:
        if tenant is not None and st.trajectory_tenant(trajectory) != tenant:
            raise NotFound(f"No trajectory {trajectory!r} of tenant {tenant!r}.", trajectory_id=trajectory)
        traj = load_trajectory(st, trajectory)
        policy = _policy(backend, model_path, override)
        table = Table(title=f"replay of {trajectory} under {policy.version}", show_lines=True)
        table.add_column("#", justify="right")
        table.add_column("recorded", overflow="fold")
        table.add_column("replayed", overflow="fold")
        table.add_column("", justify="center")
        if agent is None:
            steps = asyncio.run(replay_steps(traj, policy))
            for s in steps:
                mark = "[green]=[/green]" if s.same_as_recorded else "[red]≠[/red]"
                extra = f"\n[dim]correction: {s.corrected}[/dim]" if s.corrected else ""
                table.add_row(str(s.seq), s.recorded.render(), s.replayed.render() + extra, mark)
            console.print(table)
            same = sum(s.same_as_recorded for s in steps)
            console.print(f"{same}/{len(steps)} model calls re-decided identically.")
            return
        res = asyncio.run(replay_episode(traj, agent, policy, verifier=verifier))
        n = max(len(res.recorded), len(res.actions))
        for i in range(n):
            a = res.recorded[i] if i < len(res.recorded) else None
            b = res.actions[i] if i < len(res.actions) else None
            same = a is not None and b is not None and a.same(b)
            table.add_row(str(i), a.render() if a else "", b.render() if b else "",
                          "[green]=[/green]" if same else "[red]≠[/red]")
        console.print(table)
        for m in res.misses:
            console.print(f"[yellow]cache miss:[/yellow] {m.describe()}", highlight=False)
        console.print(f"status [bold]{res.status}[/bold] · answer {res.answer!r} · reward recorded "
                      f"{res.recorded_reward} → replayed {res.replayed_reward}", highlight=False)
    finally:
        st.close()


@app.command("window")
def window(
    agent: Annotated[str | None, typer.Option(
        "--agent", help="module:function of a @molt.replayable agent (default: generic replay from the "
                        "recording, molt.replay.generic).")] = None,
    override: OverrideOpt = None,
    backend: BackendOpt = "stub",
    model_path: ModelPathOpt = None,
    verifier: VerifierOpt = None,
    tenant: Annotated[str | None, typer.Option("--tenant", help="Only this tenant's trajectories.")] = None,
    limit: Annotated[int, typer.Option("--limit", help="Newest N trajectories form the window.")] = 100,
    sample: Annotated[int | None, typer.Option("--sample", help="Replay a random sample of this size.")] = None,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    candidate: Annotated[str | None, typer.Option("--candidate", help="Candidate id for the results.")] = None,
    store: StoreOpt = None,
    api_key: KeyOpt = None,
    operator: OperatorOpt = False,
) -> None:
    """Evaluate a candidate over a window of trajectories and summarise the batch."""
    from rich.progress import Progress

    from molt.replay.evaluate import evaluate_candidate

    tenant = _tenant(api_key, operator, tenant)
    st = _store(store)
    try:
        ids = [s.trajectory_id for s in st.trajectories(tenant=tenant, limit=limit)]
        if not ids:
            console.print("No trajectories in the window.")
            raise typer.Exit(1)
        policy = _policy(backend, model_path, override, candidate)
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("replaying", total=min(sample or len(ids), len(ids)))
            ev = asyncio.run(evaluate_candidate(st, ids, agent, policy, candidate_id=candidate, sample=sample,
                                                seed=seed, verifier=verifier, tenant_id=tenant,
                                                progress=lambda _: progress.advance(task)))
        t = Table(title=f"candidate {ev.candidate_id} · evaluation {ev.evaluation_id}")
        t.add_column("metric")
        t.add_column("value", justify="right")

        def f(x: float | None) -> str:
            return "—" if x is None else f"{x:+.3f}" if x < 0 or x > 0 else "0.000"

        def ci(x: tuple[float, float] | None) -> str:
            return "—" if x is None else f"[{x[0]:+.3f}, {x[1]:+.3f}]"

        rows = [("window / sampled / scored", f"{ev.window} / {ev.sampled} / {ev.scored}"),
                ("unknown (left the recording) / errors / invalid", f"{ev.unknown} / {ev.errors} / {ev.invalid}"),
                ("success rate recorded → replayed", f"{ev.baseline_success_rate} → {ev.candidate_success_rate}"),
                ("success delta (95% Newcombe)", f"{f(ev.success_delta)} {ci(ev.success_delta_ci)}"),
                ("reward delta (95% bootstrap)", f"{f(ev.reward_delta)} {ci(ev.reward_delta_ci)}"),
                ("cost", ", ".join(f"{k}={v}" for k, v in ev.cost.items()))]
        for r in rows:
            t.add_row(*r)
        console.print(t)
    finally:
        st.close()
