"""Governance commands, mounted by ``molt``: ``erase``, ``audit``, ``retention run``, ``policy check``.

Who may run them: a tenant admin's API key (``--api-key`` or ``$MOLT_API_KEY``, checked against the
key file ``--keys`` / ``$MOLT_KEYS`` / ``$MOLT_HOME/keys.toml``) acts on that tenant only;
``--operator`` is the platform operator with direct access to the store (a cron job, an on-call
engineer) and may act on any tenant — the audit log records which it was. ::

    molt erase --subject customer-4711 --api-key $ACME_ADMIN_KEY
    molt erase --tenant globex --operator --yes
    molt audit --api-key $ACME_ADMIN_KEY --kind quarantine --kind erasure
    molt retention run --operator --policy governance.yaml
    molt policy check governance.yaml
    molt native build --if-stale     # compile the redaction detectors (molt.governance.redaction.native)
"""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console
from rich.table import Table

from molt.errors import GovernanceError, MoltError
from molt.governance.access import KeyRing, Principal, Role

__all__ = ["audit_command", "erase_command", "native_app", "policy_app", "retention_app", "run_erase"]

console = Console()
err_console = Console(stderr=True)

StoreOpt = Annotated[str | None, typer.Option("--store", help="Store URI (default: $MOLT_HOME/store).")]
KeyOpt = Annotated[str | None, typer.Option("--api-key", envvar="MOLT_API_KEY", show_envvar=False,
                                            help="An admin API key of the tenant (or $MOLT_API_KEY).")]
KeysOpt = Annotated[Path | None, typer.Option("--keys", help="Key file (default: $MOLT_KEYS or "
                                                            "$MOLT_HOME/keys.toml).")]
OperatorOpt = Annotated[bool, typer.Option("--operator", help="Act as the platform operator: every tenant, no API "
                                                              "key (when a key file exists, only whoever may read "
                                                              "it).")]
SpoolOpt = Annotated[list[Path] | None, typer.Option("--spool", help="Recorder spool directories to scrub "
                                                                    "(default: $MOLT_HOME/spool if present).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="JSON output.")]
PolicyOpt = Annotated[Path | None, typer.Option(
    "--policy", help="Governance policy file (default: $MOLT_GOVERNANCE_POLICY or $MOLT_HOME/governance.yaml).")]


def _home() -> Path:
    return Path(os.environ.get("MOLT_HOME", "~/.molt")).expanduser()


def _open_store(uri: str | None) -> Any:
    from molt.store import Store

    raw = os.environ.get("MOLT_STORAGE_OPTIONS")
    opts = None
    if raw:
        try:
            opts = {str(k): str(v) for k, v in orjson.loads(raw).items()}
        except (orjson.JSONDecodeError, AttributeError) as exc:
            raise MoltError(f"MOLT_STORAGE_OPTIONS must be a JSON object of string options: {exc}.") from None
    return Store.open(uri or _home() / "store", storage_options=opts, auto_compact=False)


def _policy_path(path: Path | None) -> Path | None:
    if path is not None:
        return path
    env = os.environ.get("MOLT_GOVERNANCE_POLICY")
    if env:
        return Path(env)
    default = _home() / "governance.yaml"
    return default if default.exists() else None


def _spools(spool: list[Path] | None) -> list[Path]:
    if spool:
        return spool
    # the default spool, and the spool.<pid> of Recorders that found it held (molt.capture.recorder)
    return [d for d in (_home() / "spool", *sorted(_home().glob("spool.*"))) if d.is_dir()]


def _principal(api_key: str | None, keys: Path | None, operator: bool, role: Role = Role.ADMIN) -> Principal | None:
    """The authenticated admin, or None for ``--operator``."""
    if operator:
        if api_key:
            raise GovernanceError("Give either --operator or an API key, not both.")
        return None
    if not api_key:
        raise GovernanceError("This command needs a tenant admin's API key (--api-key or $MOLT_API_KEY), "
                              "or --operator for the platform operator.")
    path = keys or Path(os.environ.get("MOLT_KEYS") or _home() / "keys.toml")
    return KeyRing.from_file(path).authenticate(api_key).require(role)


def _actor(p: Principal | None) -> str:
    return "operator" if p is None else f"{p.tenant_id}/{p.role.value}" + (f" ({p.key_name})" if p.key_name else "")


def _utc(ts: datetime | None) -> datetime | None:
    if ts is None:
        return None
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts


# ------------------------------------------------------------------------------------------- erase


def erase_command(
    tenant: Annotated[str | None, typer.Option("--tenant", help="The tenant (all of its data, or the "
                                                                "subject's data within it).")] = None,
    subject: Annotated[str | None, typer.Option("--subject", help="A data subject id "
                                                                  "(metadata.consent.subject_id).")] = None,
    scope: Annotated[str, typer.Option(help="Subject erasure: 'trajectory' (every event of the subject's "
                                            "trajectories) or 'events'.")] = "trajectory",
    api_key: KeyOpt = None,
    keys: KeysOpt = None,
    operator: OperatorOpt = False,
    spool: SpoolOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Count what would be erased; change nothing.")] = False,
    yes: Annotated[bool, typer.Option("--yes", help="Confirm a whole-tenant erasure.")] = False,
    as_json: JsonOpt = False,
    store: StoreOpt = None,
) -> None:
    """Erase a tenant's data or a data subject's (right to be forgotten), physically, chains intact."""
    from molt.governance.erasure import erase_subject, erase_tenant

    run_erase(erase_subject, erase_tenant, tenant=tenant, subject=subject, scope=scope, api_key=api_key, keys=keys,
              operator=operator, spool=spool, dry_run=dry_run, yes=yes, as_json=as_json, store=store)


def run_erase(erase_subject: Any, erase_tenant: Any, *, tenant: str | None, subject: str | None, scope: str,
              api_key: str | None, keys: Path | None, operator: bool, spool: list[Path] | None, dry_run: bool,
              yes: bool, as_json: bool, store: str | None) -> None:
    """What ``molt erase`` does with the erasure functions given: ``erase_subject(store, subject, tenant_id=,
    spool_dirs=, actor=, scope=, dry_run=)`` and ``erase_tenant(store, tenant, spool_dirs=, actor=, dry_run=)``,
    each returning a report with ``summary``, ``as_dict()`` and ``chains_failed`` (the control plane mounts
    its own, which follow lineage into learned artifacts: :mod:`molt.control.forget`)."""
    who = _principal(api_key, keys, operator)
    if who is not None:
        tenant = tenant or who.tenant_id
        who.require(Role.ADMIN, tenant=tenant)
    if subject is None and tenant is None:
        raise GovernanceError("Say what to erase: --subject ID (optionally --tenant T) or --tenant T.")
    s = _open_store(store)
    if subject is not None:
        report = erase_subject(s, subject, tenant_id=tenant, spool_dirs=_spools(spool), actor=_actor(who),
                               scope=scope, dry_run=dry_run)
    else:
        assert tenant is not None
        if not (yes or dry_run):
            raise GovernanceError(f"This deletes every record of tenant {tenant!r} for good; pass --yes to "
                                  f"confirm (or --dry-run to count first).")
        report = erase_tenant(s, tenant, spool_dirs=_spools(spool), actor=_actor(who), dry_run=dry_run)
    if as_json:
        sys.stdout.write(orjson.dumps(report.as_dict(), default=str).decode() + "\n")
    else:
        console.print(report.summary)
    if report.chains_failed:
        raise typer.Exit(1)


# ------------------------------------------------------------------------------------------- audit


def audit_command(
    kind: Annotated[list[str] | None, typer.Option("--kind", help="redaction, eligibility, quarantine, "
                                                                   "erasure or retention (repeatable).")] = None,
    since: Annotated[datetime | None, typer.Option(help="At or after (ISO time, UTC).")] = None,
    until: Annotated[datetime | None, typer.Option(help="Before (ISO time, UTC).")] = None,
    trajectory: Annotated[str | None, typer.Option("--trajectory", help="Only this trajectory.")] = None,
    event: Annotated[str | None, typer.Option("--event", help="Only this event.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many, newest first.")] = 50,
    tenant: Annotated[str | None, typer.Option("--tenant", help="With --operator: the tenant.")] = None,
    api_key: KeyOpt = None,
    keys: KeysOpt = None,
    operator: OperatorOpt = False,
    as_json: JsonOpt = False,
    store: StoreOpt = None,
) -> None:
    """Show the tenant's governance decisions: redactions, eligibility, quarantine, erasure, retention."""
    from molt.governance.audit import Audit

    who = _principal(api_key, keys, operator)
    if who is None:
        if not tenant:
            raise GovernanceError("With --operator, name the tenant to audit with --tenant.")
        who = Principal(tenant_id=tenant, role=Role.ADMIN, key_name="operator")
    elif tenant is not None:
        who.require(Role.ADMIN, tenant=tenant)
    entries = Audit(_open_store(store), who).entries(kinds=kind, since=_utc(since), until=_utc(until),
                                                     trajectory_id=trajectory, event_id=event, limit=limit)
    if as_json:
        for e in entries:
            sys.stdout.write(orjson.dumps(e.as_dict(), default=str).decode() + "\n")
        return
    t = Table("time", "kind", "trajectory", "event", "summary", title=f"audit of tenant {who.tenant_id}")
    for e in entries:
        t.add_row(e.ts.isoformat(timespec="seconds"), e.kind, (e.trajectory_id or "")[-12:],
                  (e.event_id or "")[-12:], e.summary)
    console.print(t)


# --------------------------------------------------------------------------------------- retention

retention_app = typer.Typer(help="Enforce per-tenant, per-classification retention windows.", no_args_is_help=True)


@retention_app.command("run")
def retention_run(
    policy: PolicyOpt = None,
    tenant: Annotated[str | None, typer.Option("--tenant", help="Only this tenant (default: all, with "
                                                                "--operator).")] = None,
    now: Annotated[datetime | None, typer.Option(help="Pretend it is this time (ISO, UTC).")] = None,
    api_key: KeyOpt = None,
    keys: KeysOpt = None,
    operator: OperatorOpt = False,
    spool: SpoolOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Count what would expire; change nothing.")] = False,
    as_json: JsonOpt = False,
    store: StoreOpt = None,
) -> None:
    """Drop expired payloads and quarantine records, physically; one audit record per tenant."""
    from molt.governance.policy import load_policy_file
    from molt.governance.retention import run_retention

    who = _principal(api_key, keys, operator)
    tenants = None
    if who is not None:
        who.require(Role.ADMIN, tenant=tenant or who.tenant_id)
        tenants = [who.tenant_id]
    elif tenant is not None:
        tenants = [tenant]
    reports = run_retention(_open_store(store), load_policy_file(_policy_path(policy)), tenants=tenants,
                            now=_utc(now), spool_dirs=_spools(spool), actor=_actor(who), dry_run=dry_run)
    for r in reports:
        if as_json:
            sys.stdout.write(orjson.dumps({"tenant_id": r.tenant_id, "events": r.events, "expired": r.expired,
                                           "consent_expired": r.consent_expired,
                                           "quarantine_deleted": r.quarantine_deleted,
                                           "spool_frames": r.spool_frames, "dry_run": r.dry_run}).decode() + "\n")
        else:
            console.print(f"{r.tenant_id or '(no tenant)'}: {r.summary}")


# ------------------------------------------------------------------------------------------ policy

policy_app = typer.Typer(help="Check governance policy files.", no_args_is_help=True)


@policy_app.command("check")
def policy_check(path: Annotated[Path, typer.Argument(help="The policy file (YAML or TOML).")]) -> None:
    """Validate a policy file and show each tenant's effective settings."""
    from molt.governance.policy import load_policy_file

    pol = load_policy_file(path)
    t = Table("tenant", "opt-in", "consent", "classes", "retention days", "redaction", "shares with",
              title=f"{path} ({pol.label})")
    for tenant in [None, *pol.tenants]:
        tp = pol.for_tenant(tenant)
        tr = tp.training
        t.add_row(tenant or "(defaults)", "yes" if tr.opt_in else "no", "required" if tr.require_consent else "-",
                  ",".join(sorted(c.value for c in tr.classifications)),
                  " ".join(f"{c.value[:4]}={d}" for c, d in tp.retention.days.items()),
                  tp.redaction_policy.name if tp.redaction.enabled else "off", ",".join(sorted(tr.share_with)))
    console.print(t)


native_app = typer.Typer(help="The compiled (mypyc) build of the redaction detectors.", no_args_is_help=True)


@native_app.command("build")
def native_build_command(
    if_stale: Annotated[bool, typer.Option("--if-stale", help="Do nothing when the build is current.")] = False,
    opt_level: Annotated[str, typer.Option("--opt-level", help="C optimisation level, 0-3.")] = "3",
) -> None:
    """Compile the redaction detectors into core/build/native (or $MOLT_NATIVE_DIR)."""
    from molt.governance.redaction import native

    if opt_level not in ("0", "1", "2", "3"):
        raise typer.BadParameter(f"must be 0, 1, 2 or 3, not {opt_level!r}", param_hint="--opt-level")
    try:
        root = native.build(if_stale=if_stale, opt_level=opt_level)
    except native.NativeBuildError as exc:
        err_console.print(f"[red]error:[/red] native build failed: {exc}", highlight=False)
        raise typer.Exit(1) from None
    console.print(f"compiled redaction detectors: {root}", highlight=False)


@native_app.command("status")
def native_status_command() -> None:
    """Whether this interpreter uses the compiled detectors, and why (not)."""
    from molt.governance.redaction import native

    console.print_json(data=native.status())
