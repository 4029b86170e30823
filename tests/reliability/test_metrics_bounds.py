"""Issue 27 item 4: ``/metrics`` is labelled by route template, so 10,000 requests with random ids
(keyless 401s with 2,000-character ids, another tenant's 404s and refusals) leave it the size it was,
and nothing of tenant B's shows in it when tenant A's key reads it.
"""

from __future__ import annotations

import asyncio
import random
import re
import string
from typing import Any

import httpx

N_REQUESTS = 10_000


def _rid(rng: random.Random, n: int) -> str:
    return "".join(rng.choices(string.ascii_lowercase + string.digits, k=n))


async def _hammer(c: httpx.AsyncClient, rng: random.Random, n: int, sent: set[str]) -> str:
    """``n`` requests on id-bearing paths as tenant globex (or with no key); /metrics as acme reads it."""
    for i in range(n):
        rid = "globex-" + _rid(rng, 2000 if i % 10 == 0 else 12)
        sent.add(rid)
        key = rng.choice([None, "sk-globex-writer", "sk-globex-reader"])
        headers = {"authorization": f"Bearer {key}"} if key else {}
        method, path = rng.choice([("POST", f"/v1/molt/trajectories/{rid}/end"),
                                   ("POST", f"/v1/molt/sessions/{rid}/end"), ("GET", f"/v1/models/{rid}"),
                                   ("DELETE", f"/v1/molt/admin/versions/{rid}"), ("GET", f"/v1/{rid}")])
        r = await c.request(method, path, headers=headers)
        assert r.status_code in (401, 403, 404), (path[:80], r.status_code, r.text[:200])
    metrics = await c.get("/metrics", headers={"authorization": "Bearer sk-acme-reader"})
    assert metrics.status_code == 200
    return metrics.text


def _series(text: str) -> set[str]:
    return {line.rsplit(" ", 1)[0] for line in text.splitlines() if not line.startswith("#")}


def test_metrics_stay_bounded_and_show_no_other_tenants_ids(gateway_app: Any) -> None:
    app, _gw, _rec, _store = gateway_app
    rng, sent = random.Random(27), set[str]()

    async def run() -> tuple[str, str]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
            first = await _hammer(c, rng, 1_000, sent)
            return first, await _hammer(c, rng, N_REQUESTS - 1_000, sent)

    first, text = asyncio.run(run())
    # bounded: after 10,000 requests the same series as after 1,000 (only their counts grew)
    assert _series(text) == _series(first)
    assert len(text) < 1.1 * len(first) and len(text) < 100_000, (len(first), len(text))
    endpoints = set(re.findall(r'endpoint="([^"]*)"', text))
    templates = {getattr(r, "path", "") for r in app.router.routes} | {"unmatched", "other"}
    assert endpoints <= templates, endpoints - templates
    # nothing of tenant B's is visible with tenant A's key
    assert "globex" not in text and not any(i in text for i in sent)
