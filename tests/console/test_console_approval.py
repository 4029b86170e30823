"""Approval mode and the change view in a real headless browser: a real control-plane cycle (the desk
example's scripted model) proposes a memory for two tenants; the console shows each proposal, decision
and version with the same evidence — the diff, the replay's model, linked example runs, intervals, the
regression check —; approving starts a canary the gateway serves, rejecting leaves the live version
untouched, and another tenant's admin can neither see nor act on a proposal.

Screenshots of each page go to ``$MOLT_SCREENSHOTS`` when it is set (a directory).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from molt.gateway.loopback import ServerThread

pytestmark = pytest.mark.slow

KEYS = {"sk-acme-admin": ("acme", "admin"), "sk-acme-reader": ("acme", "reader"),
        "sk-initech-admin": ("initech", "admin"), "sk-globex-admin": ("globex", "admin"),
        "sk-acme-agent": ("acme", "agent_writer"), "sk-initech-agent": ("initech", "agent_writer")}


@dataclass
class Approval:
    url: str
    proposal: dict[str, str] = field(default_factory=dict)   # tenant → proposed version id
    live: dict[str, str] = field(default_factory=dict)       # tenant → live version id before
    memory: dict[str, str] = field(default_factory=dict)     # tenant → the proposed memory's text
    cycle: dict[str, str] = field(default_factory=dict)      # tenant → the cycle that proposed it
    store: Any = None


def _shot(page: Any, name: str) -> None:
    where = os.environ.get("MOLT_SCREENSHOTS")
    if where:
        Path(where).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(where) / f"{name}.png"), full_page=True)


@pytest.fixture(scope="module")
def approval(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Approval]:
    from molt.backends import StubBackend
    from molt.console import create_console_app
    from molt.control.memory import MemoryStore, RetrievalHarness
    from molt.control.plane import ControlPlane, PlaneSettings
    from molt.gateway import Gateway, create_app
    from molt.gateway.binding import GatewayBinding
    from molt.governance.access import KeyRing
    from molt.replay import save_trajectories
    from molt.store import Store
    from molt_desk.scenarios import Traffic, base_parts, record_traffic
    from molt_desk.world import AGENT, FACTS, DeskModel, World

    home = tmp_path_factory.mktemp("approval-home")
    store = Store.open(home / "store", auto_compact=False)
    plane = ControlPlane(store, DeskModel(), live_tools=World().live_tools(), base_parts=base_parts(),
                         settings=PlaneSettings(approval="context"))
    out = Approval(url="", store=store)
    f = FACTS["refund window"]
    # The plane runs its cycles with asyncio.run: in a thread of its own, as the browser's Playwright loop
    # may already run in this one.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(_propose, out, plane, store, f, Traffic, record_traffic, save_trajectories, MemoryStore, World,
                    AGENT, base_parts).result()


    ring = KeyRing.from_mapping(KEYS)

    class Seen(StubBackend):
        def __init__(self) -> None:
            super().__init__("stub-0", model="desk-model")
            self.systems: list[str] = []

        def _answer(self, req: Any) -> Any:
            m = req.messages[0]
            self.systems.append(m["content"] if m.get("role") == "system" else "")
            return super()._answer(req)

    backend = Seen()
    gw = Gateway([backend], store=store, keyring=ring, harness=RetrievalHarness(MemoryStore(store)))
    GatewayBinding(gw, plane.registry, model="desk-model").sync()
    app = create_app(gw)
    app.mount("/console", create_console_app(store, ring, versions=plane.registry))
    app.state.seen = backend
    with ServerThread(app) as srv:
        out.url = srv.url
        yield out
    store.close()


def _propose(out: Approval, plane: Any, store: Any, f: Any, Traffic: Any, record_traffic: Any,
             save_trajectories: Any, MemoryStore: Any, World: Any, AGENT: str, base_parts: Any) -> None:
    for tenant in ("acme", "initech"):
        out.live[tenant] = plane.registry.ensure_base(tenant, AGENT, base_parts()).version_id
        items = [Traffic(tenant, AGENT, f"{f.questions[i % 3]} (ticket {i})", "kb_question", f.text) for i in range(8)]
        items += [Traffic(tenant, AGENT, f"Where is order A-{1000 + i}? (ticket {i})", "status") for i in range(12)]
        save_trajectories(store, asyncio.run(record_traffic(items, plane.registry, plane, World(), plane.backend)))
        res = plane.run_cycle(tenant, AGENT)
        assert res.version is not None and res.version.status == "proposed", res.record.reason
        out.proposal[tenant] = res.version.version_id
        out.cycle[tenant] = res.record.cycle_id
        out.memory[tenant] = MemoryStore(store).memories(tenant, list(res.version.parts.memory_ids))[0].text


def _login(page: Any, a: Approval, key: str, then: str) -> None:
    page.goto(a.url + then)
    page.fill("#api_key", key)
    page.click("#login")
    page.wait_for_url(f"**{then}")


def _check_change(section: Any, a: Approval, tenant: str) -> None:
    """The change view of the tenant's memory proposal: what every page must show."""
    text = section.inner_text()
    assert a.memory[tenant] in section.locator("table.diff").inner_text()           # the diff, full text
    assert section.locator(".replay-model").inner_text() == "desk-model"             # the model that replayed
    assert "DeskModel" in section.locator("p.replay").inner_text()
    links = section.locator("table.examples a[href*='/console/trajectories/']")
    assert links.count() >= 1                                                         # linked example runs
    assert "correction:" in section.locator("table.examples").inner_text()
    assert "95% interval" in section.locator("p.replay").inner_text()                # intervals
    assert section.locator("p.regression").inner_text().startswith("Regression check:")
    assert "no regression" in text or "not run" in text or "skipped" in text.lower()
    assert "Why this change:" in text
    gates = section.locator("table.gates").inner_text()
    assert "safety" in gates and "replay" in gates


def test_a_proposal_appears_with_its_evidence(page: Any, approval: Approval) -> None:
    _login(page, approval, "sk-acme-admin", "/console/proposals")
    prop = page.locator(f".proposal[data-version='{approval.proposal['acme']}']")
    assert prop.count() == 1
    _check_change(prop.locator("section.change"), approval, "acme")
    assert approval.proposal["initech"] not in page.content()
    _shot(page, "proposals")
    # an example run opens in the console
    first = prop.locator("table.examples a").first
    tid = first.inner_text()
    first.click()
    page.wait_for_url(f"**/console/trajectories/{tid}")
    assert page.locator("#tree").count() == 1


def test_a_decision_and_a_version_show_the_same_change(page: Any, approval: Approval) -> None:
    _login(page, approval, "sk-acme-reader", "/console/decisions")
    page.click(f"#decisions tr[data-cycle='{approval.cycle['acme']}'] a.open")
    page.wait_for_url(f"**/console/decisions/{approval.cycle['acme']}")
    _check_change(page.locator("section.change"), approval, "acme")
    _shot(page, "decision")
    page.goto(approval.url + "/console/versions?agent=molt-support-desk")
    row = page.locator(f"table.versions tr[data-version='{approval.proposal['acme']}']")
    assert "proposed" in row.inner_text()
    assert "95% interval" in page.locator(f"table.versions tr[data-version='{approval.live['acme']}']").inner_text()
    # only a base version was ever live: nothing to roll back to, so no rollback is offered
    assert page.locator("form.rollback").count() == 0
    _shot(page, "versions")
    row.locator("a").first.click()
    page.wait_for_url("**/console/versions/**")
    _check_change(page.locator("section.change"), approval, "acme")
    assert approval.live["acme"] in page.locator("#lineage").inner_text()
    # what its memory was made from: the tenant and counts of the cluster's trajectories, nothing more
    learned = page.locator("#learned-from tr[data-kind='memory']")
    assert learned.count() == 1
    cells = learned.locator("td").all_inner_texts()
    assert cells[2] == "acme" and int(cells[3]) >= 3 and "initech" not in page.locator("#learned-from").inner_text()
    _shot(page, "version")


def test_signals_show_the_windows_success_with_the_decisions_on_it(page: Any, approval: Approval) -> None:
    """A burst of traffic is still a curve (not a single dot), each point with its interval, and the cycle's
    decision — made after the traffic — is placed on the chart."""
    _login(page, approval, "sk-acme-reader", "/console/signals")
    page.wait_for_selector("#chart polyline[data-agent=molt-support-desk]", state="attached")
    points = page.locator("#chart circle")
    assert points.count() >= 3
    assert page.locator("#chart line.interval").count() == points.count()
    decisions = page.locator("#chart line.decision")
    assert decisions.count() >= 1
    width = float(page.evaluate("() => document.getElementById('chart').clientWidth"))
    for i in range(decisions.count()):
        assert 0 <= float(decisions.nth(i).get_attribute("x1") or -1) <= width
    _shot(page, "signals")


def test_approval_starts_a_canary_that_serves(page: Any, approval: Approval) -> None:
    vid = approval.proposal["acme"]
    _login(page, approval, "sk-acme-admin", "/console/proposals")
    form = page.locator(f".proposal[data-version='{vid}'] form.approve")
    form.locator("input[name=comment]").fill("matches our policy page")
    form.locator("button").click()
    page.wait_for_selector("#flash")
    assert f"Approved {vid}" in page.locator("#flash").inner_text()
    assert page.locator(f".proposal[data-version='{vid}']").count() == 0
    assert "matches our policy page" in page.locator("#decided").inner_text()
    _shot(page, "proposals-approved")
    # the gateway serves the canary to its share of new sessions, with the memory in the prompt
    served = set()
    with httpx.Client(base_url=approval.url) as client:
        for i in range(40):
            r = client.post("/v1/chat/completions", headers={
                "authorization": "Bearer sk-acme-agent", "x-molt-agent": "molt-support-desk",
                "x-molt-session": f"s-{i}"}, json={"model": "desk-model", "messages": [
                    {"role": "user", "content": "How long is the refund window?"}]})
            assert r.status_code == 200, r.text
            served.add(r.headers["x-molt-policy-version"])
    assert served == {vid, approval.live["acme"]}
    from molt.control.versions import VersionRegistry
    from molt.governance.access import Principal, Role
    from molt.governance.audit import Audit

    assert VersionRegistry(approval.store).get(vid).status == "canary"
    rows = Audit(approval.store, Principal(tenant_id="acme", role=Role.ADMIN)).entries(kinds=["approval"])
    assert [r.detail["target"] for r in rows] == [vid] and rows[0].actor.startswith("console:")
    assert rows[0].detail["comment"] == "matches our policy page"


def test_rejection_leaves_live_untouched(page: Any, approval: Approval) -> None:
    vid, live = approval.proposal["initech"], approval.live["initech"]
    _login(page, approval, "sk-initech-admin", "/console/proposals")
    form = page.locator(f".proposal[data-version='{vid}'] form.reject")
    form.locator("input[name=comment]").fill("our refund window differs by region")
    form.locator("button").click()
    page.wait_for_selector("#flash")
    assert f"Rejected {vid}" in page.locator("#flash").inner_text()
    assert "our refund window differs by region" in page.locator("#decided").inner_text()
    _shot(page, "proposals-rejected")
    with httpx.Client(base_url=approval.url) as client:
        for i in range(20):
            r = client.post("/v1/chat/completions", headers={
                "authorization": "Bearer sk-initech-agent", "x-molt-agent": "molt-support-desk",
                "x-molt-session": f"s-{i}"}, json={"model": "desk-model", "messages": [
                    {"role": "user", "content": "How long is the refund window?"}]})
            assert r.headers["x-molt-policy-version"] == live
    from molt.control.versions import VersionRegistry

    reg = VersionRegistry(approval.store)
    assert reg.live("initech", "molt-support-desk").version_id == live and reg.get(vid).status == "rejected"


def test_another_tenants_admin_cannot_see_or_act(page: Any, approval: Approval) -> None:
    vid = approval.proposal["acme"]
    _login(page, approval, "sk-globex-admin", "/console/proposals")
    assert page.locator(".proposal").count() == 0 and vid not in page.content()
    assert "molt-support-desk" not in page.content()
    resp = page.goto(approval.url + f"/console/versions/{vid}")
    assert resp is not None and resp.status == 404
    resp = page.goto(approval.url + f"/console/decisions/{approval.cycle['acme']}")
    assert resp is not None and resp.status == 404
    # a forged form with globex's own session and CSRF token, naming acme's proposal
    page.goto(approval.url + "/console/proposals")
    csrf = page.locator("input[name=csrf]").first.get_attribute("value")
    status = page.evaluate("""([csrf, vid]) => fetch('/console/proposals/reject', {method: 'POST',
        headers: {'content-type': 'application/x-www-form-urlencoded'},
        body: new URLSearchParams({csrf, version_id: vid, comment: 'mine now'})}).then(r => r.status)""", [csrf, vid])
    assert status == 404
    from molt.control.versions import VersionRegistry

    assert VersionRegistry(approval.store).get(vid).status in ("proposed", "canary")
    # a reader of acme may not approve, and a form without the session's CSRF token is refused
    r = httpx.post(approval.url + "/console/proposals/approve", data={"version_id": vid},
                   headers={"authorization": "Bearer sk-acme-reader"})
    assert r.status_code == 403
    ctx = page.context.browser.new_context()
    try:
        reader = ctx.new_page()
        _login(reader, approval, "sk-acme-reader", "/console/trajectories")
        assert reader.locator("header >> text=Proposals").count() == 0
        resp = reader.goto(approval.url + "/console/proposals")
        assert resp is not None and resp.status == 403
    finally:
        ctx.close()
