"""Fixtures for the console's browser tests: a store with two tenants' governed trajectories, policy
versions and decisions; the gateway app with the console mounted, served by uvicorn on a loopback
port; and Debian's chromium driven by Playwright.

Troubleshooting: "chromium is absent" skips mean /usr/bin/chromium is missing; scripts/setup.sh
installs it (apt-get install chromium). Never `playwright install`: no browser download.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from molt.gateway.loopback import ServerThread

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
KEYS = {"sk-acme-admin": ("acme", "admin"), "sk-acme-reader": ("acme", "reader"),
        "sk-globex-admin": ("globex", "admin"), "sk-globex-reader": ("globex", "reader"),
        "sk-acme-writer": ("acme", "agent_writer")}
POLICY = {"name": "console-test", "unknown_tenants": "quarantine",
          "tenants": {"acme": {"training": {"opt_in": True}}, "globex": {"training": {"opt_in": True}}}}


@dataclass
class World:
    """What the fixture recorded: trajectory ids by name, and the text that marks each tenant."""

    home: Path
    trajectories: dict[str, str] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)


def _record_world(home: Path) -> World:
    """Two tenants' trajectories through the real governance pipeline (so redactions are real)."""
    from molt.atdp import (
        Event,
        EventKind,
        Generation,
        Outcome,
        Provenance,
        RewardAnnotation,
        RewardSource,
        ToolCall,
        UserMessage,
    )
    from molt.capture import Recorder
    from molt.governance import GovernancePipeline, GovernancePolicy, GovernedSink
    from molt.store import Store

    world = World(home=home)
    store = Store.open(home / "store", auto_compact=False)
    rec = Recorder(GovernedSink(store), spool_dir=home / "spool",
                   pipeline=GovernancePipeline(GovernancePolicy.model_validate(POLICY)))

    def trajectory(name: str, tenant: str, agent: str, text: str, answer: str, reward: float | None,
                   late: float | None = None, version: str = "v1") -> None:
        tid = rec.new_trajectory()
        world.trajectories[name] = tid
        md = {"tenant_id": tenant, "agent_id": agent, "task": "refund"}
        prov = Provenance(policy_version=f"{agent}@{version}", model_checkpoint="smollm2-135m-instruct")
        user = Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE, metadata=md, provenance=prov,
                     action=UserMessage(content=text))
        call = Event(trajectory_id=tid, parent_id=user.event_id, kind=EventKind.MODEL_CALL, metadata=md,
                     provenance=prov, action=Generation(model="smollm2", tool_calls=[
                         {"id": "c1", "name": "lookup_order", "arguments": {"order_id": "A-1"}}]))
        tool = Event(trajectory_id=tid, parent_id=call.event_id, kind=EventKind.TOOL_CALL, name="lookup_order",
                     metadata=md, provenance=prov, action=ToolCall(tool_name="lookup_order", call_id="c1",
                                                                   arguments={"order_id": "A-1"}),
                     outcome=Outcome(output={"state": "shipped"}))
        final = Event(trajectory_id=tid, parent_id=tool.event_id, kind=EventKind.MODEL_CALL, metadata=md,
                      provenance=prov, action=Generation(model="smollm2", text=answer), reward=reward)
        for ev in (user, call, tool, final):
            rec.record(ev)
        if late is not None:
            rec.reward(RewardAnnotation(trajectory_id=tid, event_id=final.event_id, value=late,
                                        source=RewardSource.USER_CORRECTION, reason="the user corrected the answer",
                                        tenant_id=tenant))

    trajectory("acme_redacted", "acme", "support", "Refund me, my email is jane.doe@example.com",
               "Refund issued.", 1.0, late=-0.5)
    trajectory("acme_fail", "acme", "support", "Where is my order?", "No idea.", 0.0)
    trajectory("acme_other_agent", "acme", "sales", "Any discounts?", "10% off today.", 1.0)
    trajectory("globex_secret", "globex", "billing", "globex-only-secret invoice question", "Paid.", 1.0)
    assert rec.flush(timeout=60, deliver=True)
    rec.close()
    store.quarantine("tenant acme sent a record with no trajectory id", stage="validate", tenant_id="acme",
                     kind="model_call")
    store.quarantine("globex-only quarantine reason", stage="validate", tenant_id="globex", kind="model_call")

    from molt.control.log import DecisionLog, DecisionRecord
    from molt.control.versions import AgentConfig, ModelPart, VersionRegistry

    reg = VersionRegistry(store)
    for tenant, agent in (("acme", "support"), ("acme", "rollback-bot"), ("globex", "billing")):
        base = reg.ensure_base(tenant, agent, AgentConfig(model=ModelPart(base="smollm2-135m-instruct")))
        v2 = reg.create(tenant, agent, base.parts.with_system_prompt(f"Refunds within 30 days ({tenant})."),
                        parent=base.version_id, note="harness edit: refund window", created_by="control-plane")
        reg.promote(v2.version_id, actor="control-plane")
        world.versions[f"{tenant}/{agent}/base"] = base.version_id
        world.versions[f"{tenant}/{agent}/v2"] = v2.version_id
    DecisionLog(store).append(DecisionRecord(tenant_id="acme", agent_id="support", choice="harness_edit",
                                             reason="refund-window failures cluster", signals={"success_rate": 0.4},
                                             applied_version=world.versions["acme/support/v2"]))
    DecisionLog(store).append(DecisionRecord(tenant_id="globex", agent_id="billing", choice="memory_insert",
                                             reason="globex-only decision"))
    store.close()
    return world


@dataclass
class Served:
    """The running console: its base URL and what was recorded."""

    url: str
    world: World


@pytest.fixture(scope="session")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The gateway app (stub backend, tenant keys) with the console mounted at /console."""
    from molt.backends import StubBackend
    from molt.console import create_console_app
    from molt.gateway import Gateway, create_app
    from molt.governance.access import KeyRing
    from molt.store import Store

    home = tmp_path_factory.mktemp("console-home")
    world = _record_world(home)
    ring = KeyRing.from_mapping(KEYS)
    store = Store.open(home / "store", auto_compact=False)
    app = create_app(Gateway([StubBackend()], keyring=ring))
    app.mount("/console", create_console_app(store, ring))
    with ServerThread(app) as srv:
        yield Served(url=srv.url, world=world)
    store.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Debian chromium (skipped only when /usr/bin/chromium is absent).

    Module-scoped on purpose: Playwright's sync API runs an event loop in the main thread while it is
    open, so a browser kept for the whole session would make every later ``asyncio.run`` in the suite
    fail ("cannot be called from a running event loop")."""
    if not os.path.exists(CHROMIUM):
        pytest.skip("chromium is absent: /usr/bin/chromium is missing; run scripts/setup.sh (it installs Debian's "
                    "chromium with apt) to run the console's browser tests")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh browser context (no cookies) and page."""
    ctx = browser.new_context()
    pg = ctx.new_page()
    pg.set_default_timeout(20_000)
    yield pg
    ctx.close()


def login(page: Any, served: Served, key: str, then: str = "/console/trajectories") -> None:
    """Log in through the form (the browser keeps the HttpOnly session cookie)."""
    page.goto(served.url + then)
    assert "/console/login" in page.url
    page.fill("#api_key", key)
    page.click("#login")
    page.wait_for_url(f"**{then}")
