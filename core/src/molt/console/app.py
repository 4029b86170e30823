"""The web console: a small server-rendered Starlette app, tenant-scoped by the API key that opens it.

==================================  =================================================  ==========
page                                what                                               permission
==================================  =================================================  ==========
GET  /login, POST /login, /logout   log in with an API key (HttpOnly session cookie)   —
GET  /trajectories                  list, filters: agent, outcome                      read
GET  /trajectories/{id}             causal tree, redactions, rewards, provenance       read
GET  /versions, /versions/diff      policy versions per agent, diff of two             read
GET  /versions/{id}                 parts, ancestry, learned-from counts, its change   read
POST /versions/rollback             roll an agent back one version                     admin
GET  /decisions, /decisions/{id}    the control plane's decision log, one decision     read
GET  /proposals                     changes waiting for approval (approval mode)       admin
POST /proposals/approve, /reject    approve (starts the canary) or reject, audited     admin
GET  /signals, /api/signals         success rate over time per agent (live chart)      read
GET  /quarantine                    records governance stopped, with reasons           admin
==================================  =================================================  ==========

Every trajectory, reward and quarantine read goes through :class:`molt.store.scoped.TenantView` for
the caller's tenant, so another tenant's trajectory is a 404 and its rows never reach a list; policy
versions and decisions come from the control plane for the caller's tenant only, and a version of
another tenant is a 404 too. A browser session's forms carry a CSRF token. Every change the plane made
or proposes is shown with the same component (:mod:`molt.console.change`, data from
:func:`molt.control.change.change_view`).

Example::

    from molt.console import create_console_app
    app.mount("/console", create_console_app(store, KeyRing.from_file("keys.toml")))
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import parse_qs, quote

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from molt.console.auth import ConsoleAuth, Session
from molt.console.change import CHANGE_STYLE, CHANGE_TEMPLATE
from molt.console.templates import SCRIPT, STYLE, TEMPLATES
from molt.console.views import (
    causal_tree,
    decision_row,
    diff_rows,
    fmt_ts,
    mark_redactions,
    provenance_rows,
    rate_text,
    success_series,
    version_row,
)
from molt.errors import AuthenticationError, MoltError, NotFound, PermissionDenied
from molt.governance.access import KeyRing, Principal
from molt.store.lance import Store
from molt.store.scoped import TenantView
from molt.store.tables import open_all

__all__ = ["COOKIE", "create_console_app"]

log = logging.getLogger("molt.console")

#: The session cookie's name.
COOKIE = "molt_console"
_MAX_FORM_BYTES = 64 << 10
_HEADERS = {
    "content-security-policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'",
    "x-content-type-options": "nosniff", "referrer-policy": "no-referrer", "cache-control": "no-store",
}


class _Caller:
    """The principal behind a request, and its browser session when it came with the cookie."""

    def __init__(self, principal: Principal, session: Session | None, token: str | None):
        self.principal = principal
        self.session = session
        self.token = token


class Console:
    """State and handlers behind :func:`create_console_app`."""

    def __init__(self, store: Store, auth: ConsoleAuth, *, base: str, versions: Any = None, decisions: Any = None,
                 refresh_s: float = 0.2, list_limit: int = 200):
        self.store = store
        self.auth = auth
        self.base = base.rstrip("/")
        self._versions = versions
        self._decisions = decisions
        self.refresh_s = refresh_s
        self.list_limit = list_limit
        self._refreshed = 0.0
        self.signals_ttl_s = 2.0
        self._signals: dict[tuple[str, str | None, int], tuple[float, dict[str, Any]]] = {}
        self._signals_lock = threading.Lock()
        self._refresh_lock = threading.Lock()
        self.env = jinja2.Environment(loader=jinja2.DictLoader({**TEMPLATES, "change": CHANGE_TEMPLATE}),
                                      autoescape=True,
                                      undefined=jinja2.StrictUndefined)
        self.env.globals.update(fmt_ts=fmt_ts, redact=mark_redactions, base=self.base, rate_text=rate_text)

    # ------------------------------------------------------------------ plumbing

    def fresh(self) -> None:
        """See what other processes (the capture process, the trainer) wrote since the last request:
        a LanceDB table handle stays at the version it read until told to check out the latest."""
        now = time.monotonic()
        if now - self._refreshed < self.refresh_s:
            return
        with self._refresh_lock:
            if now - self._refreshed < self.refresh_s:
                return
            for name, tbl in open_all(self.store).items():
                try:
                    tbl.checkout_latest()
                except Exception as exc:  # a table dropped meanwhile: the next read reports it
                    log.debug("console: refreshing table %s failed: %s", name, exc)
            self._refreshed = time.monotonic()

    def control(self, which: str) -> Any:
        """The control plane's version registry or decision log (``None`` when not installed)."""
        attr = "_versions" if which == "versions" else "_decisions"
        obj = getattr(self, attr)
        if obj is None:
            module, cls = (("molt.control.versions", "VersionRegistry") if which == "versions"
                           else ("molt.control.log", "DecisionLog"))
            try:
                obj = getattr(importlib.import_module(module), cls)(self.store)
            except (ImportError, AttributeError):
                return None
            setattr(self, attr, obj)
        return obj

    def caller(self, request: Request) -> _Caller:
        """The request's principal: from ``Authorization: Bearer`` or the session cookie."""
        header = request.headers.get("authorization")
        if header:
            scheme, _, key = header.partition(" ")
            if scheme.lower() != "bearer":
                raise AuthenticationError("Send the API key as 'Authorization: Bearer <key>'.")
            return _Caller(self.auth.authenticate(key.strip()), None, None)
        token = request.cookies.get(COOKIE)
        s = self.auth.session(token)
        if s is None:
            raise AuthenticationError("Log in with an API key to use the console.")
        return _Caller(s.principal, s, token)

    def render(self, name: str, caller: _Caller | None, status: int = 200, **ctx: Any) -> Response:
        flash = None
        if caller is not None and caller.session is not None and caller.session.flash:
            flash = " ".join(caller.session.flash)
            caller.session.flash.clear()
        html = self.env.get_template(name).render(
            who=caller.principal if caller else None, csrf=caller.session.csrf if caller and caller.session else "",
            flash=flash, page=ctx.pop("page", ""), **ctx)
        return Response(html, status_code=status, media_type="text/html; charset=utf-8", headers=_HEADERS)

    def view(self, caller: _Caller) -> TenantView:
        return TenantView(self.store, caller.principal)

    def agents(self, view: TenantView) -> list[str]:
        col = view.scan("events", columns=["agent_id"]).column("agent_id")
        return sorted({a for a in col.to_pylist() if a})

    # ------------------------------------------------------------------ pages (run in a worker thread)

    def trajectories(self, c: _Caller, q: dict[str, str]) -> Response:
        view = self.view(c)
        agent, outcome = q.get("agent") or None, q.get("outcome") or None
        rows = view.trajectories(agent=agent, outcome=outcome, limit=self.list_limit)
        return self.render("trajectories", c, page="/trajectories", rows=rows, agents=self.agents(view),
                           agent=agent, outcome=outcome, limit=self.list_limit)

    def trajectory(self, c: _Caller, trajectory_id: str) -> Response:
        view = self.view(c)
        traj = view.trajectory(trajectory_id)  # NotFound for another tenant's trajectory
        late: dict[str, list[Any]] = {}
        for r in traj.rewards:
            if r.event_id:
                late.setdefault(r.event_id, []).append(r)
        first = traj.events[0].metadata
        summary = {"agent_id": first.agent_id, "task": first.task}
        return self.render("trajectory", c, page="/trajectories", traj=traj, tree=causal_tree(traj), late=late,
                           seqs={e.event_id: e.seq for e in traj.events}, summary=summary,
                           provenance=provenance_rows(traj), chain=view.verify(trajectory_id))

    # ------------------------------------------------------------------ a change, as a person judges it

    def _memories(self) -> Any:
        if getattr(self, "_memory_store", None) is None:
            try:
                from molt.control.memory import MemoryStore
            except ImportError:
                return None
            self._memory_store = MemoryStore(self.store)
        return self._memory_store

    def proposals_book(self) -> Any:
        if getattr(self, "_proposals", None) is None:
            from molt.control.approval import Proposals
            self._proposals = Proposals(self.store, self.control("versions"))
        return self._proposals

    def change(self, c: _Caller, entry: dict[str, Any], *, cluster: dict[str, Any] | None,
               decision: dict[str, Any] | None, others: Sequence[dict[str, Any]] = (), version: Any = None,
               operator: dict[str, Any] | None = None, canary: dict[str, Any] | None = None) -> dict[str, Any]:
        """The shared view of one change for the caller's tenant (examples read through its TenantView)."""
        from molt.control.change import change_view
        from molt.control.signals import episodes

        reg = self.control("versions")
        tenant = c.principal.tenant_id
        parent = None
        if version is not None and version.parent_id:
            try:
                parent = reg.get(version.parent_id, tenant_id=tenant)
            except NotFound:
                parent = None
        view = self.view(c)

        def read(tid: str) -> Any:
            try:
                return view.trajectory(tid)
            except NotFound:
                return None

        eps = episodes(self.store, tenant, version.agent_id, limit=400) if version is not None else None
        return change_view(entry, cluster=cluster, decision=decision, others=others, version=version, parent=parent,
                           memories=self._memories(), trajectory=read, episodes=eps, operator=operator,
                           canary=canary)

    def _decision_change(self, c: _Caller, d: Any) -> dict[str, Any] | None:
        """The change a decision chose (``None`` for a no-op or a decision without a candidate)."""
        entry = next((x for x in d.candidates if d.chosen_candidate and x.get("candidate_id") == d.chosen_candidate),
                     None) or next((x for x in d.candidates if x.get("kind") == d.choice), None)
        if entry is None:
            return None
        cluster = next((x for x in (d.signals or {}).get("clusters") or [] if x.get("key") == entry.get("cluster")),
                       None)
        others = [x for x in [*d.candidates, *d.rejected]
                  if x.get("cluster") == entry.get("cluster") and x is not entry]
        version = None
        if d.applied_version:
            try:
                version = self.control("versions").get(d.applied_version, tenant_id=c.principal.tenant_id)
            except NotFound:
                version = None
        from molt.control.change import canary_state_of

        return self.change(c, entry, cluster=cluster, others=others, version=version,
                           canary=canary_state_of(d, self.control("decisions")),
                           decision={"cycle_id": d.cycle_id, "choice": d.choice, "reason": d.reason,
                                     "created_at": d.created_at})

    def decision(self, c: _Caller, cycle_id: str) -> Response:
        log_ = self.control("decisions")
        if log_ is None:
            raise NotFound("The control plane is not installed, so no decisions were made.")
        d = log_.get(cycle_id, tenant_id=c.principal.tenant_id)
        if d is None or d.tenant_id != c.principal.tenant_id:
            raise NotFound(f"No decision {cycle_id!r} for tenant {c.principal.tenant_id!r}.")
        return self.render("decision", c, page="/decisions", d=decision_row(d), change=self._decision_change(c, d),
                           rejected=d.rejected, actions=d.actions)

    def version_page(self, c: _Caller, version_id: str) -> Response:
        reg = self.control("versions")
        if reg is None:
            raise NotFound("The control plane is not installed, so there are no versions.")
        v = self._version(reg, c, version_id)
        tenant = c.principal.tenant_id
        lineage, cur, seen = [], v, set()
        while cur is not None and cur.version_id not in seen:
            seen.add(cur.version_id)
            lineage.append(cur)
            try:
                cur = reg.get(cur.parent_id, tenant_id=tenant) if cur.parent_id else None
            except NotFound:
                cur = None
        change = None
        proposal = None
        try:
            proposal = self.proposals_book().get(v.version_id, tenant_id=tenant)
        except NotFound:
            proposal = None
        if proposal is not None:
            change = self._proposal_change(c, proposal)
        else:
            log_ = self.control("decisions")
            made = next((d for d in (log_.list(tenant, v.agent_id, limit=None) if log_ is not None else [])
                         if d.applied_version == v.version_id and d.choice not in ("promote", "rollback")), None)
            change = self._decision_change(c, made) if made is not None else None
        from molt.control.change import version_success
        from molt.control.signals import episodes
        eps = episodes(self.store, tenant, v.agent_id, limit=400)
        success = [(x, version_success(eps, x.version_id)) for x in lineage]
        parts = diff_rows([(k, val, None) for k, val in v.parts.model_dump(mode="json").items()])
        history = [h for h in reversed(reg.history(tenant, v.agent_id)) if h["version_id"] == v.version_id]
        from molt.control.provenance import version_lineage

        # counts and tenants of each learned part's lineage: never trajectory ids of another tenant, nor payloads
        learned = [r.summary() for r in version_lineage(self.store, reg, v)]
        return self.render("version", c, page="/versions", v=version_row(v), parts=parts, lineage=success,
                           change=change, history=history, learned=learned)

    def _proposal_change(self, c: _Caller, p: Any) -> dict[str, Any]:
        ev = p.evidence
        return self.change(c, ev.get("candidate") or {"kind": p.kind}, cluster=ev.get("cluster"),
                           decision=ev.get("decision"), others=ev.get("others") or [], version=p.version,
                           operator=p.decision)

    def proposals(self, c: _Caller, q: dict[str, str]) -> Response:
        c.principal.require("admin")
        if self.control("versions") is None:
            return self.render("proposals", c, page="/proposals", installed=False)
        book = self.proposals_book()
        tenant = c.principal.tenant_id
        every = [p for p in book.list(tenant, status=None) if p.version.tenant_id == tenant]
        waiting = [(p, self._proposal_change(c, p)) for p in every if p.status == "proposed"]
        decided = [p for p in every if p.status != "proposed"][:50]
        return self.render("proposals", c, page="/proposals", installed=True, waiting=waiting, decided=decided)

    def decide(self, c: _Caller, form: dict[str, str], action: str) -> Response:
        c.principal.require("admin")
        if c.session is not None and not _same(form.get("csrf", ""), c.session.csrf):
            raise PermissionDenied("The form is stale or was not sent by this console; reload the page and retry.")
        vid = form.get("version_id", "")
        actor = f"console:{c.principal.key_name or c.principal.role.value}"
        book = self.proposals_book()
        tenant = c.principal.tenant_id
        try:
            if action == "approve":
                v = book.approve(vid, tenant_id=tenant, actor=actor, comment=form.get("comment") or None)
                msg = f"Approved {vid}: its canary serves {v.canary_weight:.0%} of new sessions."
            else:
                v = book.reject(vid, tenant_id=tenant, actor=actor, comment=form.get("comment", ""))
                msg = f"Rejected {vid}; the live version is unchanged."
        except NotFound:
            raise
        except MoltError as exc:
            if c.session is None:
                raise
            c.session.flash.append(f"{action.capitalize()} of {vid} failed: {exc}")
        else:
            log.info("console: %s %sd %s of tenant %s", actor, action, vid, tenant)
            if c.session is None:
                return JSONResponse({"version": v.model_dump(mode="json", exclude={"parts_bytes"})}, headers=_HEADERS)
            c.session.flash.append(msg)
        return RedirectResponse(f"{self.base}/proposals", 303)

    def versions(self, c: _Caller, q: dict[str, str]) -> Response:
        reg = self.control("versions")
        agent = q.get("agent") or None
        if reg is None:
            return self.render("versions", c, page="/versions", installed=False)
        tenant = c.principal.tenant_id
        every = [v for v in reg.list(tenant) if v.tenant_id == tenant]  # defence in depth, like TenantView
        agents = sorted({v.agent_id for v in every if v.agent_id})
        shown = [v for v in every if agent is None or v.agent_id == agent]
        groups: dict[str, list[dict[str, Any]]] = {}
        for v in shown:
            groups.setdefault(v.agent_id, []).append(version_row(v))
        history = {a: list(reversed(reg.history(tenant, a)))[:10] for a in groups}
        from molt.control.change import version_success
        from molt.control.signals import episodes

        for a, rows in groups.items():  # success per version, with its interval, from the runs it served
            eps = episodes(self.store, tenant, a, limit=400)
            for r in rows:
                r["success"] = version_success(eps, r["version_id"])
        rollback_to = {a: reg.rollback_target(tenant, a) for a in groups}
        return self.render("versions", c, page="/versions", installed=True, groups=list(groups.items()),
                           history=history, agents=agents, agent=agent, can_admin=c.principal.can("admin"),
                           rollback_to={a: (t.version_id if t is not None else None) for a, t in rollback_to.items()})

    def _version(self, reg: Any, c: _Caller, version_id: str) -> Any:
        # Asking with the caller's tenant makes another tenant's version a NotFound, like a missing one.
        return reg.get(version_id, tenant_id=c.principal.tenant_id)

    def diff(self, c: _Caller, q: dict[str, str]) -> Response:
        reg = self.control("versions")
        if reg is None:
            raise NotFound("The control plane is not installed, so there are no versions to compare.")
        a, b = self._version(reg, c, q.get("a", "")), self._version(reg, c, q.get("b", ""))
        rows = diff_rows(reg.diff(a.version_id, b.version_id, tenant_id=c.principal.tenant_id))
        return self.render("diff", c, page="/versions", a=a, b=b, rows=rows)

    def rollback(self, c: _Caller, form: dict[str, str]) -> Response:
        c.principal.require("admin")
        if c.session is not None and not _same(form.get("csrf", ""), c.session.csrf):
            raise PermissionDenied("The form is stale or was not sent by this console; reload the page and retry.")
        reg = self.control("versions")
        if reg is None:
            raise NotFound("The control plane is not installed, so there is nothing to roll back.")
        agent = form.get("agent_id", "")
        actor = f"console:{c.principal.key_name or c.principal.role.value}"
        try:
            live = reg.rollback(c.principal.tenant_id, agent, actor=actor, reason="rollback button in the console")
        except MoltError as exc:
            if c.session is None:
                raise
            c.session.flash.append(f"Rollback of agent {agent} failed: {exc}")
        else:
            log.info("console: %s rolled agent %s of tenant %s back to %s", actor, agent, c.principal.tenant_id,
                     live.version_id)
            if c.session is None:
                return JSONResponse({"live": live.model_dump(mode="json", exclude={"parts_bytes"})}, headers=_HEADERS)
            c.session.flash.append(f"Rolled agent {agent} back: {live.version_id} is live again.")
        return RedirectResponse(f"{self.base}/versions" + (f"?agent={quote(agent)}" if agent else ""), 303)

    def decisions(self, c: _Caller, q: dict[str, str]) -> Response:
        log_ = self.control("decisions")
        if log_ is None:
            return self.render("decisions", c, page="/decisions", installed=False)
        tenant, agent = c.principal.tenant_id, q.get("agent") or None
        rows = [decision_row(d) for d in log_.list(tenant, agent_id=agent, limit=self.list_limit)
                if d.tenant_id == tenant]
        reg = self.control("versions")
        agents = sorted({a for t, a in (reg.agents(tenant) if reg is not None else []) if t == tenant}
                        | {r["agent_id"] for r in rows if r["agent_id"]})
        return self.render("decisions", c, page="/decisions", installed=True, rows=rows, agents=agents, agent=agent)

    def signals_json(self, c: _Caller, q: dict[str, str]) -> dict[str, Any]:
        c.principal.require("read")
        bucket = q.get("bucket_s")
        key = (c.principal.tenant_id, q.get("agent") or None, int(bucket) if bucket and bucket.isdigit() else 0)
        now = time.monotonic()
        with self._signals_lock:  # every open chart polls: one store scan per tenant per interval
            hit = self._signals.get(key)
            if hit is not None and hit[0] > now:
                return hit[1]
        data = success_series(self.view(c).trajectories(agent=key[1], limit=None), bucket_s=key[2] or None)
        marks = []
        log_ = self.control("decisions")
        if log_ is not None:
            for d in log_.list(c.principal.tenant_id, limit=self.list_limit):
                if d.tenant_id == c.principal.tenant_id and d.choice.replace("-", "_") not in ("no_op", "noop"):
                    marks.append({"t": d.created_at.timestamp(), "agent": d.agent_id, "choice": d.choice})
        data["decisions"] = marks
        with self._signals_lock:
            if len(self._signals) > 1024:
                self._signals.clear()
            self._signals[key] = (now + self.signals_ttl_s, data)
        return data

    def signals(self, c: _Caller, q: dict[str, str]) -> Response:
        totals = success_series(self.view(c).trajectories(limit=None))["totals"]
        return self.render("signals", c, page="/signals", totals=sorted(totals.items()))

    def quarantine(self, c: _Caller, q: dict[str, str]) -> Response:
        c.principal.require("admin")
        got = self.view(c).scan("quarantine", columns=["ts", "stage", "reason", "kind", "trajectory_id", "event_id"])
        rows = sorted(got.to_pylist(), key=lambda r: r["ts"], reverse=True)[: self.list_limit]
        return self.render("quarantine", c, page="/quarantine", rows=rows, limit=self.list_limit)


def _same(a: str, b: str) -> bool:
    import hmac

    return hmac.compare_digest(a.encode(), b.encode())


class _FormTooLarge(ValueError):
    """A form body over :data:`_MAX_FORM_BYTES` (answered 413)."""


async def _form(request: Request) -> dict[str, str]:
    """The form fields, reading at most :data:`_MAX_FORM_BYTES` (a larger body is refused as it
    arrives, never held in memory)."""
    too_large = _FormTooLarge(f"The form is over {_MAX_FORM_BYTES:,} bytes; a console form is a few hundred.")
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > _MAX_FORM_BYTES):
        raise too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > _MAX_FORM_BYTES:
            raise too_large
        chunks.append(chunk)
    body = b"".join(chunks)
    return {k: v[-1] for k, v in parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True).items()}


def create_console_app(store: Store, keyrings: KeyRing | Sequence[KeyRing] | ConsoleAuth, *,
                       base: str = "/console", versions: Any = None, decisions: Any = None) -> Starlette:
    """The console app over ``store``, for the keys of ``keyrings``; mount it at ``base``.

    ``versions`` / ``decisions`` default to the control plane's
    :class:`~molt.control.versions.VersionRegistry` and :class:`~molt.control.log.DecisionLog` over
    ``store`` when the control plane is installed (the pages say so when it is not).
    """
    auth = keyrings if isinstance(keyrings, ConsoleAuth) else ConsoleAuth(keyrings)
    con = Console(store, auth, base=base, versions=versions, decisions=decisions)

    def is_api(request: Request) -> bool:
        return "/api/" in request.url.path

    def fail(request: Request, caller: _Caller | None, status: int, title: str, message: str) -> Response:
        if is_api(request) or request.headers.get("authorization"):
            return JSONResponse({"error": {"message": message, "status": status}}, status, headers=_HEADERS)
        return con.render("error", caller, status=status, code=status, title=title, message=message)

    def page(handler: Callable[[_Caller, Any], Any], *, write: bool = False
             ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            caller = None
            try:
                caller = con.caller(request)
                form = await _form(request) if write else None
                await run_in_threadpool(con.fresh)
                out = await run_in_threadpool(handler, caller, request if form is None else form)
                return out if isinstance(out, Response) else JSONResponse(out, headers=_HEADERS)
            except AuthenticationError as exc:
                if is_api(request) or request.headers.get("authorization"):
                    return JSONResponse({"error": {"message": exc.message, "status": 401}}, 401, headers=_HEADERS)
                nxt = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                return RedirectResponse(f"{con.base}/login?next={quote(nxt)}", 303)
            except PermissionDenied as exc:
                return fail(request, caller, 403, "Forbidden", exc.message)
            except NotFound as exc:
                return fail(request, caller, 404, "Not found", exc.message)
            except _FormTooLarge as exc:
                return fail(request, caller, 413, "Too large", str(exc))
            except (MoltError, ValueError) as exc:
                log.warning("console: %s %s failed: %s", request.method, request.url.path, exc)
                return fail(request, caller, 400, "Bad request", str(exc))
            except Exception:
                log.exception("console: %s %s failed", request.method, request.url.path)
                return fail(request, caller, 500, "Error", "The console failed on this page; see the server log.")
        return endpoint

    def query(fn: Callable[[_Caller, dict[str, str]], Any]) -> Callable[[_Caller, Request], Any]:
        return lambda c, r: fn(c, dict(r.query_params))

    async def login_page(request: Request) -> Response:
        return con.render("login", None, next=_next(request.query_params.get("next"), con.base), error=None)

    async def login(request: Request) -> Response:
        try:
            form = await _form(request)
        except _FormTooLarge as exc:
            return fail(request, None, 413, "Too large", str(exc))
        nxt = _next(form.get("next"), con.base)
        try:
            token, _ = con.auth.login(form.get("api_key", "").strip())
        except (AuthenticationError, PermissionDenied) as exc:
            return con.render("login", None, status=401 if isinstance(exc, AuthenticationError) else 403,
                              next=nxt, error=exc.message)
        resp = RedirectResponse(nxt, 303)
        resp.set_cookie(COOKIE, token, max_age=int(con.auth.session_ttl_s), path=con.base or "/", httponly=True,
                        samesite="strict", secure=request.url.scheme == "https")
        return resp

    async def logout(request: Request) -> Response:
        token = request.cookies.get(COOKIE)
        s = con.auth.session(token)
        try:
            form = await _form(request)
        except _FormTooLarge as exc:
            return fail(request, None, 413, "Too large", str(exc))
        if s is not None and _same(form.get("csrf", ""), s.csrf):
            con.auth.logout(token)
        resp = RedirectResponse(f"{con.base}/login", 303)
        resp.delete_cookie(COOKIE, path=con.base or "/")
        return resp

    async def home(request: Request) -> Response:
        return RedirectResponse(f"{con.base}/trajectories", 303)

    def static(body: str, media: str) -> Callable[[Request], Awaitable[Response]]:
        async def serve(request: Request) -> Response:
            return Response(body, media_type=media, headers={"cache-control": "max-age=300"})
        return serve

    routes = [
        Route("/", home), Route("/login", login_page), Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/static/console.css", static(STYLE + CHANGE_STYLE, "text/css")),
        Route("/static/console.js", static(SCRIPT, "text/javascript")),
        Route("/trajectories", page(query(con.trajectories))),
        Route("/trajectories/{trajectory_id}", page(lambda c, r: con.trajectory(c, r.path_params["trajectory_id"]))),
        Route("/versions", page(query(con.versions))),
        Route("/versions/diff", page(query(con.diff))),
        Route("/versions/rollback", page(con.rollback, write=True), methods=["POST"]),
        Route("/versions/{version_id:path}", page(lambda c, r: con.version_page(c, r.path_params["version_id"]))),
        Route("/decisions", page(query(con.decisions))),
        Route("/decisions/{cycle_id}", page(lambda c, r: con.decision(c, r.path_params["cycle_id"]))),
        Route("/proposals", page(query(con.proposals))),
        Route("/proposals/approve", page(lambda c, f: con.decide(c, f, "approve"), write=True), methods=["POST"]),
        Route("/proposals/reject", page(lambda c, f: con.decide(c, f, "reject"), write=True), methods=["POST"]),
        Route("/signals", page(query(con.signals))),
        Route("/api/signals", page(query(con.signals_json))),
        Route("/quarantine", page(query(con.quarantine))),
    ]
    app = Starlette(routes=routes)
    app.state.console = con
    return app


def _next(target: str | None, base: str) -> str:
    """A redirect target after login: only a path inside the console (no open redirect)."""
    if target and target.startswith(base + "/") and not target.startswith("//") and "\\" not in target:
        return target
    return f"{base}/trajectories"
