"""The web console in a real headless browser (Debian's chromium through Playwright).

Troubleshooting: a page that shows "Log in" where a table was expected means the session cookie was
not kept (check its Path is /console); a 500 page means the server log has the traceback.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from .conftest import Served, login

pytestmark = pytest.mark.slow


def test_pages_load_after_logging_in_with_the_form(page: Any, served: Served) -> None:
    login(page, served, "sk-acme-admin")
    assert page.locator("#tenant").inner_text() == "acme"
    rows = page.locator("#trajectories tbody tr")
    assert rows.count() == 3
    page.select_option("select[name=outcome]", "failure")
    page.click("form.filters button")
    page.wait_for_url("**outcome=failure**")
    assert page.locator("#trajectories tbody tr").count() == 1
    page.select_option("select[name=outcome]", "")
    page.select_option("select[name=agent]", "sales")
    page.click("form.filters button")
    page.wait_for_url("**agent=sales**")
    assert page.locator("#trajectories tbody tr").count() == 1

    page.click("header >> text=Versions")
    assert page.locator("table.versions tr.live").count() == 2  # support and rollback-bot
    assert "harness edit: refund window" in page.content()
    page.locator("table.versions[data-agent=support] >> text=diff with parent").click()
    assert "harness.system_prompt" in page.locator("#diff").inner_text()

    page.click("header >> text=Decisions")
    assert "refund-window failures cluster" in page.locator("#decisions").inner_text()

    page.click("header >> text=Quarantine")
    assert "no trajectory id" in page.locator("#quarantine").inner_text()

    page.click("header >> text=Signals")
    page.wait_for_selector("#chart polyline[data-agent=support]", state="attached")  # drawn from /api/signals
    assert page.locator("#chart polyline").count() == 2
    assert "support" in page.locator("#totals").inner_text()

    page.click("header >> text=Log out")
    page.wait_for_url("**/console/login")
    page.goto(served.url + "/console/trajectories")
    assert "/console/login" in page.url


def test_a_trajectory_opens_with_redactions_rewards_and_provenance(page: Any, served: Served) -> None:
    tid = served.world.trajectories["acme_redacted"]
    login(page, served, "sk-acme-reader")
    page.click(f"#trajectories tr[data-trajectory='{tid}'] a")
    page.wait_for_url(f"**/console/trajectories/{tid}")
    marks = page.locator("mark.redacted")
    assert marks.count() >= 1 and marks.first.inner_text() == "<EMAIL_ADDRESS_1>"
    assert "jane.doe@example.com" not in page.content()
    # the causal tree: user → model call → tool call → answer, each nested under its parent
    tree = page.locator("#tree")
    assert tree.locator(":scope > li > ul > li > ul > li > ul > li > .ev[data-kind=model_call]").count() == 1
    rewards = page.locator("#rewards").inner_text()
    assert "user_correction (late)" in rewards and "-0.5" in rewards and "inline" in rewards
    assert "support@v1" in page.locator("#provenance").inner_text()
    assert page.locator("#chain").inner_text() == "verifies"
    assert page.locator("#total-reward").inner_text() == "0.5"


def test_a_reader_of_one_tenant_never_sees_the_other(page: Any, served: Served) -> None:
    other = served.world.trajectories["globex_secret"]
    login(page, served, "sk-acme-reader")
    listed = page.locator("#trajectories").inner_text()
    assert other not in listed and "billing" not in listed
    resp = page.goto(f"{served.url}/console/trajectories/{other}")
    assert resp is not None and resp.status == 404
    assert "globex-only-secret" not in page.content()
    for path in ("/console/versions", "/console/decisions", "/console/signals"):
        page.goto(served.url + path)
        assert "globex" not in page.content().lower(), path
    resp = page.goto(f"{served.url}/console/versions/diff?a={served.world.versions['globex/billing/base']}"
                     f"&b={served.world.versions['globex/billing/v2']}")
    assert resp is not None and resp.status == 404
    # the signals JSON the chart polls is scoped too
    data = page.evaluate("() => fetch('/console/api/signals').then(r => r.json())")
    assert set(data["series"]) == {"support", "sales"} and "billing" not in data["totals"]
    # a reader may not see quarantine or roll back
    assert page.locator("header >> text=Quarantine").count() == 0
    resp = page.goto(served.url + "/console/quarantine")
    assert resp is not None and resp.status == 403
    page.goto(served.url + "/console/versions")
    assert page.locator("form.rollback").count() == 0


def test_the_rollback_button_restores_the_previous_version(page: Any, served: Served) -> None:
    base, v2 = (served.world.versions[f"acme/rollback-bot/{k}"] for k in ("base", "v2"))
    login(page, served, "sk-acme-admin", then="/console/versions?agent=rollback-bot")
    table = page.locator("table.versions[data-agent=rollback-bot]")
    assert table.locator("tr.live").get_attribute("data-version") == v2
    page.once("dialog", lambda d: d.accept())
    page.click("form.rollback[data-agent=rollback-bot] button")
    page.wait_for_selector("#flash")
    assert f"{base} is live again" in page.locator("#flash").inner_text()
    assert table.locator("tr.live").get_attribute("data-version") == base
    pointer_log = table.locator("xpath=following-sibling::details[1]").text_content() or ""
    assert "rollback button in the console" in pointer_log
    # the support agent was not touched
    page.goto(served.url + "/console/versions?agent=support")
    assert page.locator("table.versions tr.live").get_attribute("data-version") == \
        served.world.versions["acme/support/v2"]


def test_rollback_needs_the_admin_role_and_a_form_from_the_console(page: Any, served: Served) -> None:
    url = served.url + "/console/versions/rollback"
    r = httpx.post(url, data={"agent_id": "support"}, headers={"authorization": "Bearer sk-acme-reader"})
    assert r.status_code == 403
    r = httpx.post(url, data={"agent_id": "support"})
    assert r.status_code == 303 and "/console/login" in r.headers["location"]
    # a logged-in admin's browser posting without the page's CSRF token (another site's form) is refused
    login(page, served, "sk-acme-admin")
    status = page.evaluate("""() => fetch('/console/versions/rollback', {method: 'POST',
        headers: {'content-type': 'application/x-www-form-urlencoded'}, body: 'agent_id=support&csrf=forged'})
        .then(r => r.status)""")
    assert status == 403
    # globex's admin rolls back only globex's agent: acme/support keeps its live version
    r = httpx.post(url, data={"agent_id": "support"}, headers={"authorization": "Bearer sk-globex-admin"})
    assert r.status_code == 400  # globex has no agent "support" with an earlier live version
    page.goto(served.url + "/console/versions?agent=support")
    assert page.locator("table.versions tr.live").get_attribute("data-version") == \
        served.world.versions["acme/support/v2"]


def test_bearer_keys_and_the_login_form_refuse_unknown_or_writer_keys(page: Any, served: Served) -> None:
    r = httpx.get(served.url + "/console/trajectories", headers={"authorization": "Bearer sk-acme-reader"})
    assert r.status_code == 200 and "text/html" in r.headers["content-type"]
    r = httpx.get(served.url + "/console/trajectories", headers={"authorization": "Bearer nope"})
    assert r.status_code == 401
    r = httpx.get(served.url + "/console/api/signals", headers={"authorization": "Bearer sk-globex-reader"})
    assert set(r.json()["series"]) == {"billing"}
    page.goto(served.url + "/console/login")
    page.fill("#api_key", "sk-wrong")
    page.click("#login")
    assert "not known" in page.locator("#error").inner_text()
    page.fill("#api_key", "sk-acme-writer")
    page.click("#login")
    assert "may not read" in page.locator("#error").inner_text()
    cookies = page.context.cookies()
    assert not cookies
    login(page, served, "sk-acme-reader")
    [cookie] = page.context.cookies()
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/console"
    assert "sk-acme-reader" not in cookie["value"]
