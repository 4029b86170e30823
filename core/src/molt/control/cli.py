"""``molt versions`` and ``molt evolve``: composite policy versions and the control plane from the shell.

Who may run them: with a key file in place (``$MOLT_KEYS`` or ``$MOLT_HOME/keys.toml``), an API key
(``--api-key`` / ``$MOLT_API_KEY``) acts on its tenant only — reading needs ``read``, changing the
live version or running a cycle needs ``admin`` — or ``--operator`` acts on any tenant. A local
install with no key file is its own operator. ::

    molt versions ls --tenant acme
    molt versions show support@acme:v2
    molt versions diff support@acme:v1 support@acme:v2
    molt versions promote support@acme:v2
    molt versions rollback --tenant acme --agent support
    molt versions proposals --tenant acme                   # changes waiting for an operator (approval mode)
    molt versions approve support@acme:v3                   # starts its canary
    molt versions reject support@acme:v3 --comment "the refund window differs by region"
    molt evolve run --tenant acme --agent my-agent          # replays with the served model
    molt evolve run --tenant acme --reflector-url https://llm.example/v1 --reflector-model big-model
    molt evolve log --tenant acme
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console
from rich.table import Table

from molt.errors import MoltError

__all__ = ["adapters_app", "erase_command", "evolve_app", "versions_app"]

console = Console()
err_console = Console(stderr=True, soft_wrap=True)  # an error stays one line, whatever the width

versions_app = typer.Typer(help="Composite policy versions: list, show, diff, promote, roll back.",
                           no_args_is_help=True)
adapters_app = typer.Typer(help="Trained adapters per tenant, with whose data trained them.", no_args_is_help=True)
evolve_app = typer.Typer(help="The evolution control plane: run a cycle, read the decision log.",
                         no_args_is_help=True)

StoreOpt = Annotated[str | None, typer.Option("--store", help="Store URI (default: $MOLT_HOME/store).")]
KeyOpt = Annotated[str | None, typer.Option("--api-key", envvar="MOLT_API_KEY", show_envvar=False,
                                            help="An API key of the tenant (or $MOLT_API_KEY).")]
OperatorOpt = Annotated[bool, typer.Option("--operator", help="Act as the platform operator: every tenant, no API "
                                                              "key (when a key file exists, only whoever may read "
                                                              "it).")]
TenantOpt = Annotated[str | None, typer.Option("--tenant", help="Tenant id (default: the key's tenant).")]
AgentOpt = Annotated[str | None, typer.Option("--agent", help="Agent id.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="JSON output.")]


def _home() -> Path:
    return Path(os.environ.get("MOLT_HOME", "~/.molt")).expanduser()


def _keys_file() -> Path:
    """The tenant key file: ``$MOLT_KEYS`` or ``$MOLT_HOME/keys.toml`` (as every molt command reads it)."""
    return Path(os.environ.get("MOLT_KEYS") or _home() / "keys.toml")


def _who(api_key: str | None, operator: bool, action: str, tenant: str | None) -> str | None:
    """The tenant the caller may act on (``None``: any — the operator), checking ``action``."""
    from molt.errors import AuthenticationError, PermissionDenied
    from molt.governance.access import KeyRing

    if operator and api_key:
        raise MoltError("Give either --operator or an API key, not both.")
    if api_key:
        p = KeyRing.from_file(_keys_file()).authenticate(api_key).require(action)
        if tenant is not None and tenant != p.tenant_id:
            raise PermissionDenied(f"This key belongs to tenant {p.tenant_id!r}; it cannot act on {tenant!r}.")
        return p.tenant_id
    if operator or not _keys_file().exists():
        return tenant
    raise AuthenticationError("A key file exists: give --api-key (or $MOLT_API_KEY) or --operator.")


def _registry(store_uri: str | None) -> Any:
    """The registry of the store these commands read; a local store that is not there is refused
    (naming it) rather than created empty, so a mistyped MOLT_HOME or --store says so."""
    from molt.control.versions import VersionRegistry
    from molt.store import Store

    path = store_uri or _home() / "store"
    if "://" not in str(path) and not Path(path).expanduser().is_dir():
        where = "there" if store_uri else f"with MOLT_HOME={_home()}"
        raise MoltError(f"No Molt store at {Path(path).expanduser()}: nothing was recorded {where}. Point "
                        f"{'--store' if store_uri else 'MOLT_HOME'} at the one your agent or `molt serve` records "
                        f"to (the default is ~/.molt/store).")
    return VersionRegistry(Store.open(path, auto_compact=False))


def _fail(exc: Exception) -> None:
    err_console.print(f"[red]error:[/red] {exc}", highlight=False)
    raise typer.Exit(2)


@versions_app.command("ls")
def versions_ls(tenant: TenantOpt = None, agent: AgentOpt = None, store: StoreOpt = None, api_key: KeyOpt = None,
                operator: OperatorOpt = False, json: JsonOpt = False) -> None:
    """List versions (newest first) with their status: live, canary, previous or candidate."""
    try:
        t = _who(api_key, operator, "read", tenant)
        reg = _registry(store)
        pairs = reg.agents(t)
        rows = [v for tt in sorted({p[0] for p in pairs}) for v in reg.list(tt, agent)]
    except MoltError as exc:
        _fail(exc)
    if json:
        for v in rows:
            typer.echo(orjson.dumps(_brief(v)).decode())
        return
    tbl = Table("version", "tenant", "agent", "status", "parent", "created", "note")
    version_col = tbl.columns[0]  # ids are pasted into show / diff / promote: never cut them
    version_col.no_wrap, version_col.min_width = True, max((len(v.version_id) for v in rows), default=7)
    for v in rows:
        tbl.add_row(v.version_id, v.tenant_id, v.agent_id, v.status + (f" {v.canary_weight:.0%}" if v.canary_weight
                                                                        else ""),
                    v.parent_id or "-", v.created_at.strftime("%Y-%m-%d %H:%M:%S"), (v.note or "")[:60])
    console.print(tbl)


def _brief(v: Any) -> dict[str, Any]:
    return {"version_id": v.version_id, "tenant_id": v.tenant_id, "agent_id": v.agent_id, "status": v.status,
            "parent_id": v.parent_id, "created_at": v.created_at.isoformat(), "note": v.note,
            "parts_digest": v.parts.digest()}


@versions_app.command("show")
def versions_show(version: str, store: StoreOpt = None, api_key: KeyOpt = None, operator: OperatorOpt = False) -> None:
    """Print a version's parts (canonical JSON, exactly as stored) and their lineage: for each learned part
    (memory, skill, harness edit, tool rewrite, adapter) the tenants, trajectories and subjects behind it
    (counts; never a payload)."""
    try:
        t = _who(api_key, operator, "read", None)
        reg = _registry(store)
        v = reg.get(version, tenant_id=t)
        from molt.control.provenance import version_lineage

        lineage = [r.summary() for r in version_lineage(reg.store, reg, v)]
    except MoltError as exc:
        _fail(exc)
    # the lineage section: each learned part with the tenants and how many trajectories and subjects made it
    typer.echo(orjson.dumps({**_brief(v), "parts": orjson.loads(v.parts_bytes), "lineage": lineage},
                            option=orjson.OPT_INDENT_2).decode())


@versions_app.command("diff")
def versions_diff(a: str, b: str, store: StoreOpt = None, api_key: KeyOpt = None,
                  operator: OperatorOpt = False) -> None:
    """The parts that differ between versions A and B."""
    try:
        t = _who(api_key, operator, "read", None)
        changes = _registry(store).diff(a, b, tenant_id=t)
    except MoltError as exc:
        _fail(exc)
    if not changes:
        console.print("identical parts")
        return
    tbl = Table("part", a, b)
    for path, x, y in changes:
        tbl.add_row(path, orjson.dumps(x).decode(), orjson.dumps(y).decode())
    console.print(tbl)


@versions_app.command("promote")
def versions_promote(version: str, reason: Annotated[str | None, typer.Option("--reason")] = None,
                     store: StoreOpt = None, api_key: KeyOpt = None, operator: OperatorOpt = False) -> None:
    """Make VERSION live (ends its canary)."""
    try:
        t = _who(api_key, operator, "admin", None)
        v = _registry(store).promote(version, actor=_actor(api_key), reason=reason, tenant_id=t)
    except MoltError as exc:
        _fail(exc)
    console.print(f"{v.version_id} is live for {v.tenant_id}/{v.agent_id}")


@versions_app.command("rollback")
def versions_rollback(tenant: TenantOpt = None, agent: Annotated[str, typer.Option("--agent", help="Agent id.")] = "",
                      reason: Annotated[str | None, typer.Option("--reason")] = None, store: StoreOpt = None,
                      api_key: KeyOpt = None, operator: OperatorOpt = False) -> None:
    """Restore the version that was live before the current one (one step, exact parts)."""
    try:
        t = _who(api_key, operator, "admin", tenant)
        if not t or not agent:
            raise MoltError("rollback needs --tenant (or a tenant's key) and --agent.")
        v = _registry(store).rollback(t, agent, actor=_actor(api_key), reason=reason)
    except MoltError as exc:
        _fail(exc)
    console.print(f"rolled back: {v.version_id} is live for {t}/{agent} (parts {v.parts.digest()[:12]})")


def _actor(api_key: str | None) -> str:
    return "api-key" if api_key else "operator"


@versions_app.command("proposals")
def versions_proposals(tenant: TenantOpt = None, agent: AgentOpt = None, store: StoreOpt = None,
                       api_key: KeyOpt = None, operator: OperatorOpt = False, json: JsonOpt = False) -> None:
    """List the changes waiting for an operator's approval (approval mode), with their evidence."""
    from molt.control.approval import Proposals

    try:
        t = _who(api_key, operator, "read", tenant)
        reg = _registry(store)
        book = Proposals(reg.store, reg)
        tenants = [t] if t else sorted({p[0] for p in reg.agents()})
        got = [p for tt in tenants for p in book.list(tt, agent)]
    except MoltError as exc:
        _fail(exc)
    if json:
        for p in got:
            typer.echo(orjson.dumps({**_brief(p.version), "kind": p.kind, "cluster": p.cluster,
                                     "evidence": p.evidence}).decode())
        return
    if not got:
        console.print("No change is waiting for approval.")
        return
    for p in got:
        cand = p.evidence.get("candidate") or {}
        replay = (cand.get("evidence") or {}).get("replay") or {}
        ci = replay.get("success_delta_ci")
        delta = replay.get("success_delta")
        console.print(f"[bold]{p.version.version_id}[/bold] ({p.version.tenant_id}/{p.version.agent_id}) "
                      f"{p.kind} for cluster {p.cluster}", highlight=False, soft_wrap=True)
        console.print(f"  proposed: {cand.get('description') or ''}", highlight=False, soft_wrap=True)
        if delta is not None:
            console.print(f"  replay with {replay.get('model')} ({replay.get('backend')}): fixes {delta:+.0%}"
                          + (f" (95% interval {ci[0]:+.0%} to {ci[1]:+.0%})" if ci else "")
                          + f" on {replay.get('scored')} scored of {replay.get('sampled')} replayed",
                          highlight=False, soft_wrap=True)
        for path, a, b in p.evidence.get("diff") or []:
            console.print(f"  {path}: {orjson.dumps(a).decode()} → {orjson.dumps(b).decode()}", highlight=False,
                          soft_wrap=True)
        console.print(f"  approve: molt versions approve {p.version.version_id}    reject: molt versions reject "
                      f"{p.version.version_id} --comment WHY", highlight=False, soft_wrap=True)


@versions_app.command("approve")
def versions_approve(version: str,
                     weight: Annotated[float, typer.Option("--weight", min=0.01, max=0.99,
                                                           help="The canary's share of new sessions.")] = 0.2,
                     comment: Annotated[str | None, typer.Option("--comment", help="Why (kept in the audit log).")]
                     = None,
                     store: StoreOpt = None, api_key: KeyOpt = None, operator: OperatorOpt = False) -> None:
    """Approve a proposed change: its canary starts (the control plane then promotes or aborts it)."""
    from molt.control.approval import Proposals

    try:
        t = _who(api_key, operator, "admin", None)
        reg = _registry(store)
        tenant = t or reg.get(version).tenant_id
        v = Proposals(reg.store, reg).approve(version, tenant_id=tenant, actor=_actor(api_key), weight=weight,
                                              comment=comment)
    except MoltError as exc:
        _fail(exc)
    console.print(f"approved: {v.version_id} is in canary at {weight:.0%} for {v.tenant_id}/{v.agent_id}")


@versions_app.command("reject")
def versions_reject(version: str,
                    comment: Annotated[str, typer.Option("--comment", help="Why (required; kept in the audit log "
                                                         "and shown to the next operator).")] = "",
                    store: StoreOpt = None, api_key: KeyOpt = None, operator: OperatorOpt = False) -> None:
    """Reject a proposed change: the live version stays, and the same change is not proposed again for
    its failure cluster."""
    from molt.control.approval import Proposals

    try:
        t = _who(api_key, operator, "admin", None)
        reg = _registry(store)
        tenant = t or reg.get(version).tenant_id
        v = Proposals(reg.store, reg).reject(version, tenant_id=tenant, actor=_actor(api_key), comment=comment)
    except MoltError as exc:
        _fail(exc)
    console.print(f"rejected: {v.version_id}; the live version of {v.tenant_id}/{v.agent_id} is unchanged")


@evolve_app.command("run")
def evolve_run(tenant: TenantOpt = None, agent: AgentOpt = None,
               backend: Annotated[str | None, typer.Option("--backend", help="The model replay runs candidates with. "
                                                           "Default: the model `molt serve` serves from this "
                                                           "MOLT_HOME (it records its backend in $MOLT_HOME/status); "
                                                           "without one, the local SmolLM2-135M. Or a registered "
                                                           "kind (stub, local, openai, vllm; --model to name the "
                                                           "model), or module:factory for a Python backend "
                                                           "factory.")] = None,
               base_url: Annotated[str | None, typer.Option("--base-url", help="openai/vllm backend URL.")] = None,
               model: Annotated[str | None, typer.Option("--model", help="Backend model name.")] = None,
               live_tools: Annotated[str | None, typer.Option(
                   "--live-tools", help="module:factory returning sandboxed LiveTools for replay branches that "
                                        "leave the recording (default: none; such branches count as unknown).")]
               = None,
               promote: Annotated[bool, typer.Option("--promote", help="Promote at once instead of a canary.")]
               = False,
               approval: Annotated[str | None, typer.Option(
                   "--approval", help="What may go live without an operator: auto (everything), context (no "
                                      "memory, skill, harness or tool-schema change: it waits as a proposal), "
                                      "all (no new version). Default: auto, or what --plane-setting "
                                      "approval=... says.")] = None,
               reflector_url: Annotated[str | None, typer.Option(
                   "--reflector-url", help="A model that reads each failing cluster and writes candidates beside "
                                           "the templates': an OpenAI-compatible base URL (.../v1; in production a "
                                           "strong model), or 'served' for the replay backend's model. Default: "
                                           "templates only.")] = None,
               reflector_model: Annotated[str | None, typer.Option(
                   "--reflector-model", help="The model to ask at --reflector-url (default: the backend's).")] = None,
               reflector_key: Annotated[str | None, typer.Option(
                   "--reflector-key", envvar="MOLT_REFLECTOR_API_KEY", show_envvar=False,
                   help="Bearer token for --reflector-url (or $MOLT_REFLECTOR_API_KEY).")] = None,
               reflector_max_tokens: Annotated[int, typer.Option(
                   "--reflector-max-tokens", min=16, help="The reflection's completion budget.")] = 512,
               verifier: Annotated[list[str] | None, typer.Option(
                   "--verifier", help="TASK=SPEC (repeatable), as in `molt serve`: judges the replays of traffic "
                                      "labelled TASK. SPEC: contains:TEXT, regex:PATTERN, exact:TEXT or "
                                      "module:function.")] = None,
               agent_verifier: Annotated[list[str] | None, typer.Option(
                   "--agent-verifier", help="AGENT=SPEC (repeatable), as in `molt serve`: the same for an "
                                            "agent's traffic, with or without task labels.")] = None,
               plane_setting: Annotated[list[str] | None, typer.Option(
                   "--plane-setting", help="KEY=VALUE (repeatable), as in `molt serve`: a control-plane "
                                           "threshold (molt.control.plane.PlaneSettings, e.g. canary_min=6).")]
               = None,
               store: StoreOpt = None, api_key: KeyOpt = None, operator: OperatorOpt = False,
               json: JsonOpt = False) -> None:
    """Run one control-plane cycle for an agent (or every agent of the tenant) and print the decision.

    Every agent with captured traffic can be evolved — through the gateway, an adapter or an import —
    with no Python registration: one without a policy version starts from the served model's.
    """
    from molt.control.plane import ControlPlane, settings_from_pairs
    from molt.control.versions import AgentConfig, ModelPart
    from molt.replay.verifiers import register_named_verifiers

    try:
        if approval is not None and approval not in ("auto", "context", "all"):
            raise typer.BadParameter(f"give auto, context or all; got {approval!r}", param_hint="--approval")
        settings = settings_from_pairs(plane_setting or [], **({"promote_directly": True} if promote else {}),
                                       **({"approval": approval} if approval is not None else {}))
        register_named_verifiers(verifier or [], agent_verifier or [])
    except ValueError as exc:  # pydantic's ValidationError is one
        raise typer.BadParameter(str(exc), param_hint="--plane-setting / --verifier / --agent-verifier") from exc
    try:
        t = _who(api_key, operator, "admin", tenant)
        reg = _registry(store)
        be = _replay_backend(backend, base_url, model)
        tools = _factory(live_tools, "--live-tools")() if live_tools else None
        refl = _reflector(reflector_url, reflector_model, reflector_key, reflector_max_tokens, be)
        plane = ControlPlane(reg.store, be, live_tools=tools, settings=settings,
                             base_parts=AgentConfig(model=ModelPart(base=be.model)), actor=_actor(api_key),
                             reflector=refl)
        pairs = [(tt, a) for tt, a in sorted(plane.agents(t)) if agent is None or a == agent]
        if not pairs:
            raise MoltError(f"No agent {'named ' + repr(agent) + ' ' if agent else ''}has captured traffic or a "
                            f"policy version{' in tenant ' + repr(t) if t else ''}; send it through `molt serve` "
                            f"or attach an adapter first.")
        results = [asyncio.run(plane.arun_cycle(tt, a)) for tt, a in pairs]
    except MoltError as exc:
        _fail(exc)
    for r in results:
        rec = r.record
        if json:
            typer.echo(orjson.dumps(rec.model_dump(mode="json")).decode())
        else:
            _print_decision(rec)


def _served_backend() -> dict[str, Any] | None:
    """What `molt serve` from this MOLT_HOME serves (its status file's backend), the running one first."""
    from molt.status import read_status

    found = [st for st in read_status(_home()) if st.get("component") == "molt-serve"
             and (st.get("state") or {}).get("backend.kind")]
    found.sort(key=lambda st: not st.get("running"))
    return found[0] if found else None


def _replay_backend(kind: str | None, base_url: str | None, model: str | None) -> Any:
    """The backend replay runs with, said on stderr before any model loads: the one asked for, else the
    model `molt serve` serves from this MOLT_HOME, else the local SmolLM2."""
    from molt.backends.model import POLICY_MODEL_NAME

    if kind is not None:
        err_console.print(f"replay model: {model or '(the backend default)'} on the {kind} backend, as --backend "
                          f"says", highlight=False)
        return _backend(kind, base_url, model)
    st = _served_backend()
    if st is None:
        err_console.print(f"replay model: {model or POLICY_MODEL_NAME} on the local backend — no `molt serve` has "
                          f"recorded what it serves in {_home() / 'status'}; give --backend (and --model) to replay "
                          f"with the model your agents use", highlight=False)
        return _backend("local", base_url, model)
    state = st["state"]
    served_kind, served_model = state["backend.kind"], model or state.get("backend.model")
    url = base_url or state.get("backend.upstream_url")
    how = "running" if st.get("running") else "no longer running"
    err_console.print(f"replay model: {served_model} on the {served_kind} backend — what `molt serve` (pid "
                      f"{st.get('pid')}, {how}) serves at {state.get('backend.url')}", highlight=False)
    if served_kind in ("vllm", "openai"):
        # The served endpoint itself, not a second server: replay asks the same model the agents get.
        if not url:
            raise MoltError(f"`molt serve` serves {served_kind} without a recorded upstream URL; give --backend "
                            f"{served_kind} --base-url URL.")
        key = os.environ.get("MOLT_UPSTREAM_API_KEY") if served_kind == "openai" else None
        from molt.backends import create_backend

        return create_backend("openai", base_url=url, model=served_model, **({"api_key": key} if key else {}))
    if served_kind == "local" and state.get("backend.model_path"):
        from molt.backends import create_backend

        return create_backend("local", model=served_model, model_path=Path(state["backend.model_path"]))
    return _backend(served_kind, base_url, served_model)


def _reflector(url: str | None, model: str | None, key: str | None, max_tokens: int, backend: Any) -> Any:
    """The reflector ``--reflector-url`` names (``None``: templates only)."""
    if not url:
        return None
    from molt.control.reflector import Reflector

    if url == "served":
        return Reflector(backend=backend, model=model, max_tokens=max_tokens)
    if not url.startswith(("http://", "https://")):
        raise MoltError(f"--reflector-url {url!r}: give an OpenAI-compatible base URL (http(s)://.../v1) or 'served'.")
    return Reflector(url, model=model or backend.model, api_key=key, max_tokens=max_tokens)


def _backend(kind: str, base_url: str | None, model: str | None) -> Any:
    """The replay backend: a registered kind built like `molt serve` builds it, or ``module:factory``."""
    if ":" in kind and not kind.startswith(("http:", "https:")):
        return _factory(kind, "--backend")(**({"model": model} if model else {}))
    from molt.backends import create_backend
    from molt.backends.model import POLICY_MODEL_NAME

    if kind in ("local", "vllm"):  # what `molt serve --backend local|vllm` serves unless --model names another
        model = model or POLICY_MODEL_NAME
    cfg = {k: v for k, v in {"base_url": base_url, "model": model}.items() if v}
    return create_backend(kind, **cfg)


def _factory(spec: str, option: str) -> Any:
    import importlib

    module, _, attr = spec.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise MoltError(f"{option} {spec!r} does not name an importable module:attribute ({exc}); give e.g. "
                        f"mypackage.backends:make_backend.") from exc


@evolve_app.command("log")
def evolve_log(tenant: TenantOpt = None, agent: AgentOpt = None,
               limit: Annotated[int, typer.Option("--limit", min=1)] = 20, store: StoreOpt = None,
               api_key: KeyOpt = None, operator: OperatorOpt = False, json: JsonOpt = False) -> None:
    """The decision log, newest first: signals, candidates, evidence, the choice and why."""
    from molt.control.log import DecisionLog

    try:
        t = _who(api_key, operator, "read", tenant)
        reg = _registry(store)
        tenants = [t] if t else sorted({p[0] for p in reg.agents()})
        log = DecisionLog(reg.store)
        recs = [d for tt in tenants for d in log.list(tt, agent, limit=limit)]
    except MoltError as exc:
        _fail(exc)
    recs.sort(key=lambda d: d.created_at, reverse=True)
    if json:
        for d in recs[:limit]:
            typer.echo(orjson.dumps(d.model_dump(mode="json")).decode())
        return
    for d in recs[:limit]:
        _print_decision(d, when=True)


def _print_decision(d: Any, when: bool = False) -> None:
    """One decision in full — the choice, why, each candidate's replay evidence and each rejected
    candidate's reason — never cut to a column: the reasons are what an operator acts on."""
    head = f"{d.created_at.strftime('%Y-%m-%d %H:%M:%S')}  " if when else ""
    console.print(f"{head}[bold]{d.tenant_id}/{d.agent_id}[/bold]: {d.choice} — {d.reason}"
                  + (f" → {d.applied_version}" if d.applied_version else ""), highlight=False, soft_wrap=True)
    ev = (d.signals or {}).get("evidence") or {}
    agent = ev.get("agent") or {}
    if agent:
        flips = ev.get("flip_rate") or {}
        verdict = "significant" if agent.get("significant") else "not significant"
        console.print(f"  test: {agent.get('test', 'the agent against its tolerated failure rate')} — "
                      f"{agent.get('k')} of {agent.get('n')} failed, p={float(agent.get('p_value') or 1):.3g} at "
                      f"level {float(agent.get('level') or 0):.3g} ({verdict}); clusters: {ev.get('clusters', '')}; "
                      f"reward flip rate {float(flips.get('rate') or 0):.2f}", highlight=False, soft_wrap=True)
    from molt.control.change import canary_state_text, canary_view

    guard = (d.signals or {}).get("guard")
    if isinstance(guard, dict):
        view = canary_view(guard)
        console.print(f"  guarded canary: {view['setup'] if view else ''}", highlight=False, soft_wrap=True)
    state = (d.signals or {}).get("canary")
    if isinstance(state, dict) and state.get("threshold"):
        console.print(f"  canary {state.get('version')} sequential state: {canary_state_text(state)}",
                      highlight=False, soft_wrap=True)
    for c in d.candidates:
        console.print(f"  candidate {c.get('kind')}{_delta(c)}: {c.get('description') or ''}", highlight=False,
                      soft_wrap=True)
    for c in d.rejected:
        what = c.get("description") or c.get("cluster") or ""
        console.print(f"  rejected {c.get('kind')}{' (' + what + ')' if what else ''}: {c.get('rejected')}",
                      highlight=False, soft_wrap=True)


def _delta(c: dict[str, Any]) -> str:
    r = (c.get("evidence") or {}).get("replay") or {}
    d, ci = r.get("success_delta"), r.get("success_delta_ci")
    if not isinstance(d, int | float):
        return ""
    return (f" {d:+.0%}" + (f" (95% interval {ci[0]:+.0%} to {ci[1]:+.0%})" if ci else "") + " on replay"
            + (f" with {r['model']}" if r.get("model") else ""))


# ------------------------------------------------------------------------------------------- adapters


@adapters_app.command("ls")
def adapters_ls(tenant: TenantOpt = None, store: StoreOpt = None, api_key: KeyOpt = None,
                operator: OperatorOpt = False, json: JsonOpt = False) -> None:
    """List adapters per tenant: whose data trained them (tenants, trajectories, subjects: counts), the
    tenants they may serve, their manifest (verified against the files and the store now) and which
    versions hold them."""
    from molt.errors import LineageError
    from molt.lineage import LineageLog, load_manifest

    try:
        t = _who(api_key, operator, "read", tenant)
        reg = _registry(store)
        recs = [r for r in LineageLog(reg.store).records(kind="adapter", status=None)
                if t is None or r.tenant_id == t or t in r.detail.get("share_with", ())]
        held: dict[str, list[str]] = {}
        for tt, a in reg.agents(t):
            for v in reg.list(tt, a):
                if v.parts.model.adapter and v.status in ("live", "canary", "previous", "proposed"):
                    held.setdefault(v.parts.model.adapter, []).append(f"{v.version_id} ({v.status})")
    except MoltError as exc:
        _fail(exc)
    rows = []
    for r in sorted(recs, key=lambda r: (r.tenant_id or "", r.created_at)):
        path = r.detail.get("path")
        if r.status == "retired":
            check = "retired (erasure)"
        elif not path:
            check = "no directory recorded"
        else:
            try:
                load_manifest(path, tenant=r.tenant_id, store=reg.store)
                check = "ok"
            except LineageError as exc:
                check = f"refused: {exc.reason}"
        rows.append({**r.summary(), "tenant_id": r.tenant_id, "agent_id": r.agent_id,
                     "serves": [r.tenant_id, *r.detail.get("share_with", ())],
                     "manifest_id": r.detail.get("manifest_id"),
                     "manifest": check, "path": path, "versions": held.get(r.artifact_id, [])})
    if json:
        for row in rows:
            typer.echo(orjson.dumps(row, default=str).decode())
        return
    tbl = Table("tenant", "adapter", "status", "serves", "trained on", "manifest", "versions")
    for row in rows:
        tbl.add_row(str(row["tenant_id"]), row["artifact"], row["status"], ", ".join(str(x) for x in row["serves"]),
                    f"{row['trajectories']} trajectories, {row['subjects']} subjects of "
                    f"{', '.join(str(x) for x in row['tenants']) or '-'}", row["manifest"],
                    ", ".join(row["versions"]) or "-")
    console.print(tbl)


# ------------------------------------------------------------------------------------------- erase


def erase_command(
    tenant: Annotated[str | None, typer.Option("--tenant", help="The tenant (all of its data, its adapters' files "
                                                                "included, or the subject's data within it).")] = None,
    subject: Annotated[str | None, typer.Option("--subject", help="A data subject id (metadata.consent.subject_id): "
                                                                  "its data and every learned artifact whose "
                                                                  "lineage holds it.")] = None,
    scope: Annotated[str, typer.Option(help="Subject erasure: 'trajectory' (every event of the subject's "
                                            "trajectories) or 'events'.")] = "trajectory",
    api_key: Annotated[str | None, typer.Option("--api-key", envvar="MOLT_API_KEY", show_envvar=False,
                                                help="An admin API key of the tenant (or $MOLT_API_KEY).")] = None,
    keys: Annotated[Path | None, typer.Option("--keys", help="Key file (default: $MOLT_KEYS or "
                                                             "$MOLT_HOME/keys.toml).")] = None,
    operator: OperatorOpt = False,
    spool: Annotated[list[Path] | None, typer.Option("--spool", help="Recorder spool directories to scrub "
                                                                     "(default: $MOLT_HOME/spool if present).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would be erased, retired, rolled back and "
                                                            "retrained; change nothing.")] = False,
    yes: Annotated[bool, typer.Option("--yes", help="Confirm a whole-tenant erasure.")] = False,
    json: JsonOpt = False,
    store: StoreOpt = None,
) -> None:
    """Erase a tenant's data or a data subject's (right to be forgotten), physically, chains intact, and
    follow it into what was learned: memories and skills retired (regenerated when the rest of their
    evidence still clears the bar), versions holding them superseded, adapters trained on it rolled back
    and retrained without it (molt.control.forget)."""
    from molt.control.forget import erase_subject_everywhere, erase_tenant_everywhere
    from molt.governance.cli import run_erase

    run_erase(erase_subject_everywhere, erase_tenant_everywhere, tenant=tenant, subject=subject, scope=scope,
              api_key=api_key, keys=keys, operator=operator, spool=spool, dry_run=dry_run, yes=yes, as_json=json,
              store=store)
