"""The ``molt`` command: the composition root that wires store, capture and the other parts.

Every command reads its data directory from ``MOLT_HOME`` (default ``~/.molt``): the store lives in
``$MOLT_HOME/store`` and the Recorder's spool in ``$MOLT_HOME/spool``, unless ``--store`` names
another store URI. So several instances (and tests) never share state by accident.

Commands contributed by other packages (``serve``, ``redact``, ``replay``, ``evolve``, …) are mounted
from their own ``cli`` modules, listed in :data:`_MOUNTS`, when those modules are importable.

One module at ~690 lines because it is one idea: the commands that open ``$MOLT_HOME``'s store and spool
themselves, sharing the helpers above that open them and name them in every message.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import click
import orjson
import typer
from rich import box
from rich.console import Console
from rich.table import Table

from molt.errors import MoltError

app = typer.Typer(name="molt", help="Molt: governed, replayable learning material from live agent traffic.",
                  no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False)
trajectories_app = typer.Typer(help="List, show and export recorded trajectories.", no_args_is_help=True)
app.add_typer(trajectories_app, name="trajectories")
spool_app = typer.Typer(help="The capture spool under $MOLT_HOME: deliver what waits in it.", no_args_is_help=True)
app.add_typer(spool_app, name="spool")

console = Console()
err_console = Console(stderr=True, soft_wrap=True)  # a message stays one line, whatever the width

StoreOpt = Annotated[str | None, typer.Option("--store", help="Store URI (default: $MOLT_HOME/store).")]
KeyOpt = Annotated[str | None, typer.Option("--api-key", envvar="MOLT_API_KEY", show_envvar=False,
                                            help="A tenant API key (or $MOLT_API_KEY): scopes every read to it.")]
OperatorOpt = Annotated[bool, typer.Option("--operator", help="Act as the platform operator: every tenant, no API "
                                                              "key (when a key file exists, only whoever may read "
                                                              "it).")]


def molt_home() -> Path:
    """The data directory: ``$MOLT_HOME`` or ``~/.molt``."""
    return Path(os.environ.get("MOLT_HOME", "~/.molt")).expanduser()


def check_home() -> Path:
    """``$MOLT_HOME``, refused in one line when it cannot hold Molt's data (a file, not a directory)."""
    home = molt_home()
    if home.exists() and not home.is_dir():
        raise MoltError(f"MOLT_HOME={home} is a file, not a directory: point MOLT_HOME at the directory Molt "
                        f"records to (default ~/.molt).")
    return home


def store_place(uri: str | None = None) -> str:
    """Where a command reads: named in every message about the store, so a wrong one shows."""
    if uri:
        return f"the store {uri}"
    env = os.environ.get("MOLT_HOME")
    return f"the store {molt_home() / 'store'} (MOLT_HOME={env if env else 'unset: ~/.molt'})"


def open_store(uri: str | None = None, *, existing: bool = False, **kwargs: Any) -> Any:
    """Open the store named by ``--store`` or ``$MOLT_HOME/store`` (no background compaction).

    ``existing``: a read — refuse a local store that is not there instead of creating an empty one, so
    a mistyped ``MOLT_HOME`` or ``--store`` says so rather than reading as "nothing recorded".
    """
    from molt.store import Store

    path = uri or check_home() / "store"
    if existing and "://" not in str(path) and not Path(path).expanduser().is_dir():
        raise MoltError(f"No Molt store at {Path(path).expanduser()}: nothing was recorded "
                        + ("there" if uri else f"with MOLT_HOME={molt_home()}")
                        + ". Point " + ("--store" if uri else "MOLT_HOME") + " at the one your agent or `molt "
                        "serve` records to (the default is ~/.molt/store)." + _spool_clause(uri))
    kwargs.setdefault("auto_compact", False)
    return Store.open(path, storage_options=_storage_options(), **kwargs)


def backlog_text(backlog: Any) -> str:
    """What waits in a spool and what delivers it."""
    what = f"{backlog.events:,} events" + (f" and {backlog.rewards:,} rewards" if backlog.rewards else "")
    if backlog.holder:
        how = (f"the process holding it ({backlog.holder}) delivers them to its Recorder's store; a Recorder "
               f"made without a store only spools (give it one: Recorder(Store.open())), or run `molt spool "
               f"deliver` once that process has exited")
    else:
        # `molt serve` opens MOLT_HOME's own spool only; an agent's spool.<pid> needs `molt spool deliver`.
        how = "run `molt spool deliver`" + (" (`molt serve` also delivers them when it starts)"
                                            if Path(backlog.directory).name == "spool" else "")
    return f"{what} wait in the spool {backlog.directory}, not in the store yet: {how}."


def _spool_clause(uri: str | None) -> str:
    """`` N events wait in the spool …`` when the store read is MOLT_HOME's and its spool has a backlog."""
    from molt.capture.spool import spool_backlog

    if uri:
        return ""
    waiting = [b for b in (spool_backlog(d) for d in spool_dirs()) if b.records]
    return "".join(" " + backlog_text(b) for b in waiting)


def spool_dirs() -> list[Path]:
    """The spools under ``$MOLT_HOME``: ``spool``, and ``spool.<pid>`` of Recorders that found it held."""
    home = molt_home()
    return [d for d in (home / "spool", *sorted(home.glob("spool.*"))) if d.is_dir()]


def _print_spool_note(uri: str | None) -> None:
    note = _spool_clause(uri)
    if note:
        err_console.print(f"[yellow]note:[/yellow]{note}", highlight=False)


def _tenant_clause(reader: Any) -> str:
    tenant = getattr(reader, "tenant_id", None)
    return f" for tenant {tenant!r}" if tenant else ""


def _keys_file() -> Path:
    return Path(os.environ.get("MOLT_KEYS") or molt_home() / "keys.toml")


def open_reader(store_uri: str | None, api_key: str | None, operator: bool, action: str = "read") -> Any:
    """What a read command reads through: the tenant-scoped view of the key's tenant, or the whole
    store for the operator.

    With a key file in place (``$MOLT_KEYS`` or ``$MOLT_HOME/keys.toml``) a key or ``--operator`` is
    required; a local install that has no key file yet is its own operator.
    """
    from molt.errors import AuthenticationError
    from molt.governance.access import KeyRing
    from molt.store.scoped import TenantView

    if operator and api_key:
        raise MoltError("Give either --operator or an API key, not both.")
    store = open_store(store_uri, existing=action in ("read", "export"))
    if api_key:
        principal = KeyRing.from_file(_keys_file()).authenticate(api_key).require(action)
        return TenantView(store, principal)
    if operator or not _keys_file().exists():
        return store
    raise AuthenticationError(f"Tenants are configured ({_keys_file()}): give --api-key (or $MOLT_API_KEY), "
                              f"or --operator to read every tenant.")


def _storage_options() -> dict[str, str] | None:
    """Object-store options from ``MOLT_STORAGE_OPTIONS`` (a JSON object), if set."""
    raw = os.environ.get("MOLT_STORAGE_OPTIONS")
    if not raw:
        return None
    try:
        opts = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise MoltError(f"MOLT_STORAGE_OPTIONS is not valid JSON: {exc}.") from None
    if not isinstance(opts, dict):
        raise MoltError("MOLT_STORAGE_OPTIONS must be a JSON object of string options.")
    return {str(k): str(v) for k, v in opts.items()}


# ---------------------------------------------------------------------------------------- schema


@app.command()
def schema(
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")] = None,
) -> None:
    """Write the versioned ATDP JSON Schema."""
    from molt.atdp.schema import schema_bytes

    data = schema_bytes()
    if output is None:
        sys.stdout.buffer.write(data)
    else:
        output.write_bytes(data)
        err_console.print(f"Wrote the ATDP schema to {output}")


# ---------------------------------------------------------------------------------- trajectories


@trajectories_app.command("ls")
def trajectories_ls(
    store: StoreOpt = None,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant.")] = None,
    agent: Annotated[str | None, typer.Option(help="Only this agent.")] = None,
    since: Annotated[datetime | None, typer.Option(help="Active at or after (ISO time, UTC).")] = None,
    until: Annotated[datetime | None, typer.Option(help="Started before (ISO time, UTC).")] = None,
    outcome: Annotated[str | None, typer.Option(help="success, failure, error or unrewarded.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many, newest first.")] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="JSON lines instead of a table.")] = False,
    api_key: KeyOpt = None,
    operator: OperatorOpt = False,
) -> None:
    """List trajectories, newest first."""
    s = open_reader(store, api_key, operator)
    kw: dict[str, Any] = {"agent": agent, "since": _utc(since), "until": _utc(until), "outcome": outcome,
                          "limit": limit}
    if tenant is not None:
        if getattr(s, "tenant_id", tenant) != tenant:
            raise MoltError(f"This key reads tenant {s.tenant_id!r}, not {tenant!r}.")
        if not hasattr(s, "tenant_id"):
            kw["tenant"] = tenant
    rows = s.trajectories(**kw)
    if as_json:
        for r in rows:
            sys.stdout.write(r.model_dump_json() + "\n")
    else:
        console.print(_trajectory_table(rows))
    if not rows:
        filtered = tenant or any(kw[k] for k in ("agent", "since", "until", "outcome"))
        err_console.print(f"No trajectories{' match' if filtered else ''} in {store_place(store)}.", highlight=False)
    _print_spool_note(store)


def _trajectory_table(rows: list[Any]) -> Table:
    """``trajectories ls`` as a table whose ids are never cut: they are pasted into ``show``, ``reward``
    and ``replay``. A terminal too narrow for every column gets the columns that matter most."""
    idw = max((len(r.trajectory_id) for r in rows), default=10)
    agw = max((len(f"{r.tenant_id or ''}/{r.agent_id or ''}") for r in rows), default=12)
    wide = console.width >= idw + agw + 75
    t = Table(box=None if not wide else box.HEAVY_HEAD, pad_edge=wide)
    t.add_column("trajectory", no_wrap=True, min_width=idw)
    if wide:
        for name in ("tenant", "agent", "events", "errors", "reward", "outcome", "last event"):
            t.add_column(name, overflow="fold")
    else:
        for name in ("tenant/agent", "events", "outcome"):
            t.add_column(name, overflow="fold")
    for r in rows:
        reward = "" if r.reward is None else f"{r.reward:.3g}"
        if wide:
            t.add_row(r.trajectory_id, r.tenant_id or "", r.agent_id or "", str(r.events), str(r.errors), reward,
                      r.outcome, r.last_ts.isoformat())
        else:
            t.add_row(r.trajectory_id, f"{r.tenant_id or ''}/{r.agent_id or ''}", str(r.events), r.outcome)
    return t


def _stored_trajectory_id(s: Any, trajectory_id: str) -> str | None:
    """The id the trajectory a client calls ``trajectory_id`` is stored under: the id itself, or its
    keyed digest in the reader's tenant (every tenant of the store for the operator), as governance
    stores a client's id that holds personal data (:mod:`molt.governance.envelope`); None if neither."""
    from molt.governance.envelope import lookup_ids

    if s.sealed_events(trajectory_id):
        return trajectory_id
    scoped = getattr(s, "tenant_id", None)
    if scoped is not None:
        tenants: list[str | None] = [scoped]
    else:
        got = s.table("events").search().select(["tenant_id"]).limit(None).to_arrow().column("tenant_id")
        tenants = sorted(set(got.to_pylist()), key=str)
    for tid in lookup_ids(trajectory_id, tenants)[1:]:
        if s.sealed_events(tid):
            return tid
    return None


def _trajectory_by_client_id(s: Any, trajectory_id: str) -> Any:
    """The trajectory ``trajectory_id`` names (see :func:`_stored_trajectory_id`)."""
    from molt.errors import NotFound

    stored = _stored_trajectory_id(s, trajectory_id)
    if stored is None:
        raise NotFound(f"No trajectory {trajectory_id} in the store.", trajectory_id=trajectory_id)
    return s.trajectory(stored)


@trajectories_app.command("show")
def trajectories_show(
    trajectory_id: str,
    store: StoreOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="The trajectory as JSON.")] = False,
    api_key: KeyOpt = None,
    operator: OperatorOpt = False,
) -> None:
    """Show a trajectory: events in causal order, rewards joined."""
    from molt.errors import NotFound

    s = open_reader(store, api_key, operator)
    try:
        traj = _trajectory_by_client_id(s, trajectory_id)
    except NotFound:
        raise NotFound(f"No trajectory {trajectory_id} in {store_place(store)}"
                       f"{_tenant_clause(s)}; `molt trajectories ls` lists the ids it holds."
                       + _spool_clause(store), trajectory_id=trajectory_id) from None
    if as_json:
        sys.stdout.write(traj.model_dump_json(indent=2) + "\n")
        return
    # the event id is what `molt reward --event` takes: shown whole; the parent by its seq (readable,
    # and unambiguous within the trajectory)
    seq_of = {e.event_id: e.seq for e in traj.events}
    t = Table("seq", "kind", "name", "parent", "status", "reward", "event", title=f"trajectory {trajectory_id}")
    t.columns[-1].no_wrap, t.columns[-1].min_width = True, max((len(e.event_id) for e in traj.events), default=5)
    for e in traj.events:
        parent = "" if e.parent_id is None else str(seq_of.get(e.parent_id, f"missing {e.parent_id}"))
        t.add_row(str(e.seq), e.kind.value, e.name or "", parent, e.outcome.status.value if e.outcome else "",
                  "" if e.reward is None else f"{e.reward:.3g}", e.event_id)
    console.print(t)
    for r in traj.rewards:
        target = f"event {r.event_id}" if r.event_id else "trajectory"
        console.print(f"late reward {r.value:+.3g} on {target} from {r.source.value}: {r.reason or ''}")


@trajectories_app.command("export")
def trajectories_export(
    output: Annotated[Path | None, typer.Argument(help="File to write: Parquet (default), a datasets file "
                                                       "(--format hf) or OTLP/protobuf (--format otlp).")] = None,
    fmt: Annotated[str, typer.Option("--format", help="parquet: Molt's own (sealed events; late rewards in "
                                                      "<stem>.rewards.parquet beside it); hf: Hugging Face datasets "
                                                      "Parquet (messages + tools + rewards); otlp: OTLP/protobuf.")
           ] = "parquet",
    otlp: Annotated[str | None, typer.Option("--otlp", help="Send to this OTLP/HTTP endpoint instead of a file "
                                                            "(http://collector:4318/v1/traces).")] = None,
    store: StoreOpt = None,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant (operator).")] = None,
    api_key: KeyOpt = None,
    operator: OperatorOpt = False,
) -> None:
    """Export trajectories: to Parquet with their late rewards, to a datasets file, or to an OTLP collector."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from molt.store import Filter

    _choose("--format", fmt, ("parquet", "hf", "otlp"))
    if (output is None) == (otlp is None):
        raise MoltError("Give either an output file or --otlp URL.")
    if output is not None and output.exists() and output.is_dir():
        raise MoltError(f"{output} is a directory; give a file path for the export.")
    s = open_reader(store, api_key, operator, action="export")
    scoped = hasattr(s, "tenant_id")
    if tenant and scoped and tenant != s.tenant_id:
        raise MoltError(f"This key exports tenant {s.tenant_id!r}, not {tenant!r}.")
    where = Filter(tenant_id=tenant) if tenant and not scoped else None
    total = s.count("events", where=where) if scoped else s.count("events", where)
    with Progress(TextColumn("exporting"), BarColumn(), MofNCompleteColumn(), console=err_console,
                  transient=True) as progress:
        task = progress.add_task("export", total=total)
        step = lambda k: progress.advance(task, k)  # noqa: E731
        if otlp is not None:
            from molt.interop.otlp import export_otlp

            sent, failed = export_otlp(s, otlp, where=where, progress=step)
            done = f"Sent {sent:,} spans to {otlp}" + (f"; {failed:,} failed" if failed else "")
        elif fmt == "hf":
            from molt.governance.thorough import default_pass
            from molt.interop.hf import export_dataset

            n = export_dataset(s, output, where=where, progress=step, clean=default_pass().clean_many)
            done = f"Exported {n:,} trajectories to {output}"
        elif fmt == "otlp":
            from molt.interop.otlp import write_otlp_file

            done = f"Exported {write_otlp_file(s, output, where=where, progress=step):,} spans to {output}"
        else:
            from molt.interop.parquet import export_parquet, rewards_path

            n, r = export_parquet(s, output, where=where, progress=step)
            done = f"Exported {n:,} events to {output} and {r:,} late rewards to {rewards_path(output)}"  # type: ignore[arg-type]
    err_console.print(done)
    if otlp is not None and failed:
        raise typer.Exit(1)


def _choose(option: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(choices)}.", param_hint=option)


@trajectories_app.command("import")
def trajectories_import(
    source: Annotated[Path, typer.Argument(help="The file: a Molt Parquet export, an OTLP file, a Langfuse or "
                                                "a LangSmith export.")],
    fmt: Annotated[str, typer.Option("--format", help="parquet (molt trajectories export), otlp (collector file "
                                                      "exporter: JSON lines or protobuf), langfuse, langsmith.")
           ] = "parquet",
    mode: Annotated[str, typer.Option("--mode", help="all-or-nothing (default): any refused row refuses the file; "
                                                     "per-trajectory: import the rest, quarantine refused rows "
                                                     "(and their trajectory) with the reason.")] = "all-or-nothing",
    store: StoreOpt = None,
    api_key: KeyOpt = None,
    operator: OperatorOpt = False,
    no_governance: Annotated[bool, typer.Option(
        "--no-governance", help="Store the events exactly as exported, WITHOUT the governance pipeline "
                                "(no redaction; never trained on).")] = False,
) -> None:
    """Import trajectories, governed like live capture (redacted, tenant-checked, eligibility-marked) and
    idempotent (a rerun counts what is already stored as duplicates). Molt's Parquet export is all or
    nothing (chains re-verified, tenant from the hashed records, late rewards from its rewards file);
    the other formats follow --mode."""
    # Over 60 lines with its options, which typer reads from the signature; the body is ~45.
    _choose("--format", fmt, ("parquet", "otlp", "langfuse", "langsmith"))
    _choose("--mode", mode, ("all-or-nothing", "per-trajectory"))
    reader = open_reader(store, api_key, operator, action="write")
    tenant_id = getattr(reader, "tenant_id", None)
    if no_governance:
        err_console.print("[bold red]Importing WITHOUT governance (--no-governance): events are stored as "
                          "exported, PII included.[/bold red]")
    pipeline = None if no_governance else "default"
    target = open_store(store)
    if fmt == "parquet":
        from molt.interop.parquet import import_parquet_export

        got = import_parquet_export(target, source, tenant_id=tenant_id, pipeline=pipeline)
        report = got.events
        erased = (f"; {report.erased:,} held what the policy redacts: stored with the payload erased, the redacted "
                  f"record in quarantine" if report.erased else "")
        rewards = f"; {got.rewards:,} late rewards" + (f" ({got.reward_duplicates:,} already stored)"
                                                       if got.reward_duplicates else "")
        console.print(f"Imported {report.imported:,} events of {report.trajectories:,} trajectories from {source} "
                      f"({report.duplicates:,} already in the store{erased}){rewards}.")
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn

    from molt.capture.tenancy import TrajectoryNamespace, store_tenant
    from molt.governance.access import KeyRing
    from molt.interop import ImportRefused, import_file

    keys = _keys_file()
    multi = KeyRing.from_file(keys).multi_tenant() if keys.exists() else False
    namespace = TrajectoryNamespace(store_tenant(target), multi_tenant=lambda: multi)
    try:
        with Progress(SpinnerColumn(), TextColumn("importing {task.completed:,} rows"), console=err_console,
                      transient=True) as progress:
            task = progress.add_task("import", total=None)
            rep = import_file(target, source, fmt, tenant_id=tenant_id, namespace=namespace, pipeline=pipeline,
                              mode=mode, progress=lambda k: progress.advance(task, k))  # type: ignore[arg-type]
    except ImportRefused as exc:
        err_console.print(f"[red]{exc.report.summary()}[/red] (mode {mode})")
        raise
    console.print(f"{source}: {rep.summary()} (mode {mode}).")
    for line in rep.refused[:20]:
        console.print(f"  refused: {line}")
    if len(rep.refused) > 20:
        console.print(f"  … and {len(rep.refused) - 20:,} more refused rows (in the quarantine with their reasons)")


# ---------------------------------------------------------------------------------- reward, verify


@app.command()
def reward(
    trajectory_id: str,
    value: Annotated[float, typer.Option("--value", "-v", help="Reward value (finite; may be negative).")],
    source: Annotated[str, typer.Option(help="user_correction, test_result, human_label, judge, …")] = "human_label",
    event: Annotated[str | None, typer.Option("--event", help="Attach to this event, not the trajectory.")] = None,
    reason: Annotated[str | None, typer.Option(help="Why.")] = None,
    dimension: Annotated[list[str] | None, typer.Option("--dim", help="Named dimension NAME=VALUE.")] = None,
    store: StoreOpt = None,
    api_key: KeyOpt = None,
    operator: OperatorOpt = False,
) -> None:
    """Append a late reward to a trajectory or one of its events (never rewrites the event)."""
    from molt.atdp.validate import parse_reward

    dims: dict[str, float] = {}
    for d in dimension or []:
        name, sep, val = d.partition("=")
        if not sep:
            raise MoltError(f"--dim takes NAME=VALUE, got {d!r}.")
        dims[name] = float(val)
    s = open_store(store, existing=True)
    reader = open_reader(store, api_key, operator, action="write")
    stored = _stored_trajectory_id(reader, trajectory_id)
    tenant = s.trajectory_tenant(stored) if stored is not None else None
    if hasattr(reader, "tenant_id") and reader.tenant_id != tenant:
        from molt.errors import NotFound

        raise NotFound(f"No trajectory {trajectory_id} for tenant {reader.tenant_id!r}.")
    ann = parse_reward({"trajectory_id": trajectory_id, "event_id": event, "value": value,
                        "source": source, "reason": reason, "dimensions": dims or None,
                        "tenant_id": tenant})
    if stored is not None and stored != trajectory_id:  # a digested id: its reward is governed the same way
        from molt.capture.hooks import govern_reward
        from molt.capture.recorder import DEFAULT_PIPELINE, resolve_pipeline

        ann = govern_reward(resolve_pipeline(DEFAULT_PIPELINE), ann)
    s.append_rewards([ann])
    console.print(f"Appended reward {value:+g} ({source}) as {ann.annotation_id}")


@app.command()
def verify(
    trajectory_id: Annotated[str | None, typer.Argument(help="One trajectory (default: all).")] = None,
    store: StoreOpt = None,
    api_key: KeyOpt = None,
    operator: OperatorOpt = False,
) -> None:
    """Verify hash chains; exits 1 if any trajectory fails."""
    from rich.progress import Progress

    s = open_reader(store, api_key, operator)
    ids = [trajectory_id] if trajectory_id else s.trajectory_ids()
    bad = 0
    with Progress(console=err_console, transient=True) as progress:
        task = progress.add_task("verifying", total=len(ids))
        for tid in ids:
            rep = s.verify(tid)
            if rep.events == 0:
                err_console.print(f"[red]no trajectory {tid}[/red] in {store_place(store)}", highlight=False)
                bad += 1
            elif not rep.ok:
                bad += 1
                err_console.print(f"[red]FAIL[/red] {tid}: " + "; ".join(rep.problems[:5]))
            progress.advance(task)
    console.print(f"{len(ids) - bad} of {len(ids)} trajectories verify ({store_place(store)})", highlight=False)
    _print_spool_note(store)
    if bad:
        raise typer.Exit(1)


# ----------------------------------------------------------------------------------------- spool


@spool_app.command("deliver")
def spool_deliver(store: StoreOpt = None) -> None:
    """Deliver what waits in the spools under $MOLT_HOME (recorded by a Recorder without a store,
    or by a process that ended before delivering) into the store, then exit."""
    from molt.capture import Recorder
    from molt.capture.spool import spool_backlog
    from molt.errors import SpoolInUse

    check_home()
    waiting = [b for b in (spool_backlog(d) for d in spool_dirs()) if b.records]
    if not waiting:
        console.print(f"Nothing waits in the spools under {molt_home()}.", highlight=False)
        return
    s = open_store(store)
    held, left = [], 0
    for before in waiting:
        try:
            # the frames were governed (or not) when they were spooled; this only ships them
            with Recorder(s, spool_dir=before.directory, name="molt-spool-deliver") as rec:
                rec.flush(deliver=True)
        except SpoolInUse:
            held.append(before)
            continue
        after = spool_backlog(before.directory)
        left += after.records
        console.print(f"Delivered {before.records - after.records:,} records from {before.directory} to "
                      f"{store_place(store)}" + (f"; {after.records:,} still wait (the store refused them: see "
                                                 f"`molt doctor`)" if after.records else "") + ".", highlight=False)
        if not after.records and before.directory.name != "spool":
            shutil.rmtree(before.directory, ignore_errors=True)  # a finished process's own spool, now empty
    if held:
        raise MoltError("; ".join(f"The spool {b.directory} is held by a running process ({b.holder or 'another'})"
                                  for b in held)
                        + ": it delivers the events itself if its Recorder has a store; otherwise run this again "
                          "once it has exited.")
    if left:
        raise typer.Exit(1)


# ---------------------------------------------------------------------------------------- mounts

#: Sub-commands contributed by other modules: (command name, "module:attribute"). A Typer app is
#: mounted as a group, a function as a single command. Modules that are not built yet are skipped.
_MOUNTS: list[tuple[str, str]] = [
    ("smoke", "molt.smoke:smoke_command"),
    ("doctor", "molt.doctor:doctor"),
    ("redact", "molt.governance.redact_cli:main"),
    ("erase", "molt.control.cli:erase_command"),  # governance's erasure, followed into learned artifacts
    ("audit", "molt.governance.cli:audit_command"),
    ("retention", "molt.governance.cli:retention_app"),
    ("policy", "molt.governance.cli:policy_app"),
    ("native", "molt.governance.cli:native_app"),
    ("serve", "molt.serve:serve_command"),
    ("agents", "molt.gateway.agents_cli:agents_app"),
    ("replay", "molt.replay.cli:app"),
    ("versions", "molt.control.cli:versions_app"),
    ("evolve", "molt.control.cli:evolve_app"),
    ("adapters", "molt.control.cli:adapters_app"),
    ("demo", "molt_demo.app:demo_command"),
]


#: The sections of `molt --help`, in this order: what each command is for.
_GROUPS: dict[str, str] = {
    "serve": "Capture", "agents": "Capture", "trajectories": "Capture", "reward": "Capture", "spool": "Capture",
    "schema": "Capture",
    "redact": "Govern", "erase": "Govern", "audit": "Govern", "retention": "Govern", "policy": "Govern",
    "native": "Govern",
    "evolve": "Evolve", "versions": "Evolve", "adapters": "Evolve", "replay": "Evolve", "demo": "Evolve",
    "doctor": "Operate", "verify": "Operate", "smoke": "Operate",
}
_ORDER = ("Capture", "Govern", "Evolve", "Operate")


def _group_commands() -> None:
    """Put every command in its `molt --help` section (unknown ones under Operate), sections in order."""
    def key(info: Any) -> tuple[int, str]:
        name = info.name or getattr(info.callback, "__name__", "")
        return _ORDER.index(_GROUPS.get(name, "Operate")), name

    for info in [*app.registered_commands, *app.registered_groups]:
        name = info.name or getattr(info.callback, "__name__", "")
        info.rich_help_panel = _GROUPS.get(name, "Operate")
    app.registered_commands.sort(key=key)
    app.registered_groups.sort(key=key)


def _mount(argv: list[str]) -> None:
    # Import a contributed module only when its command runs (or for top-level help): some pull in
    # heavy dependencies, and `molt schema` should not pay for them.
    wanted = argv[0] if argv else "--help"
    for name, target in _MOUNTS:
        if wanted not in (name, "--help", "-h"):
            continue
        module, _, attr = target.partition(":")
        try:
            obj = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError):
            continue
        if isinstance(obj, typer.Typer):
            app.add_typer(obj, name=name)
        else:
            app.command(name)(obj)
    _group_commands()


def _utc(ts: datetime | None) -> datetime | None:
    if ts is None:
        return None
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts


def run(argv: list[str] | None = None) -> int:
    """Run ``molt`` with ``argv`` (default ``sys.argv[1:]``) and return the exit status.

    Molt errors and invalid values become one clear line on stderr and status 2 (no traceback)."""
    args = list(sys.argv[1:] if argv is None else argv)
    _mount(args)
    try:
        if args and args[0] not in ("--help", "-h", "schema") and "--help" not in args:
            check_home()  # a MOLT_HOME that is a file: one line here, not a traceback from whatever opens it
        # Without standalone mode click returns the code of a typer.Exit instead of raising it.
        rv = app(args, prog_name="molt", standalone_mode=False)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except (click.exceptions.Abort, typer.Abort):
        err_console.print("aborted")
        return 130
    except (click.ClickException, typer.TyperException) as exc:  # typer ≥ 0.2x raises its own copy of click's
        show = getattr(exc, "show", None)
        if show is not None:
            show()
        else:
            err_console.print(f"[red]error:[/red] {exc}", highlight=False)
        return int(getattr(exc, "exit_code", 2))
    except (MoltError, ValueError) as exc:
        err_console.print(f"[red]error:[/red] {exc}", highlight=False)
        return 2
    return rv if isinstance(rv, int) else 0


def main() -> None:
    """Console-script entry point."""
    raise SystemExit(run())


if __name__ == "__main__":
    main()
