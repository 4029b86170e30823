"""The published OpenAPI document (`GET /openapi.json`) covers every feedback route with its body and a
curl example that the gateway accepts as written (ids filled in); a reward without `source` is recorded as
what the control plane reads: a failing one with a reason is the user's correction."""

from __future__ import annotations

import re
import shlex
from typing import Any

import httpx

from molt.atdp import RewardSource
from molt.gateway.openapi import CURL_EXAMPLES

from .conftest import Served

W = {"authorization": "Bearer sk-acme-writer"}


def _chat(served: Served, text: str, session: str) -> Any:
    return served.client("sk-acme-writer").chat.completions.with_raw_response.create(
        model="stub", messages=[{"role": "user", "content": text}], extra_headers={"X-Molt-Session": session})


def test_openapi_document_is_published_with_every_feedback_route(served: Served) -> None:
    r = httpx.get(served.url + "/openapi.json")
    assert r.status_code == 200
    doc = r.json()
    assert doc["openapi"].startswith("3.1")
    feedback = [p for p in doc["paths"] if p.startswith("/v1/molt/")]
    assert set(feedback) == set(CURL_EXAMPLES)
    call = doc["paths"]["/v1/molt/rewards/call"]["post"]
    ref = call["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    body = doc["components"]["schemas"][ref]
    assert {"call_id", "value", "source", "reason"} <= set(body["properties"])
    assert "user_correction" in body["properties"]["source"]["description"]
    assert call["x-codeSamples"][0]["source"].startswith("curl ")


def test_every_curl_example_is_accepted_as_written(served: Served) -> None:
    for path, example in CURL_EXAMPLES.items():
        raw = _chat(served, "How long is the refund window?", "sess-doc")  # each example ends or rewards it
        ids = {"chatcmpl-…": raw.parse().id, "TRAJECTORY_ID": raw.headers["x-molt-trajectory"],
               "SESSION_ID": "sess-doc"}
        args = shlex.split(example)
        url = next(a for a in args if a.startswith("$MOLT_URL")).replace("$MOLT_URL", served.url)
        data = args[args.index("-d") + 1] if "-d" in args else None
        for k, v in ids.items():
            url = url.replace(k, v)
            data = data.replace(k, v) if data else data
        if data and "…" in data:  # the trajectory or session the example names
            data = re.sub(r'"trajectory_id": "…"', f'"trajectory_id": "{ids["TRAJECTORY_ID"]}"', data)
            data = re.sub(r'"session_id": "…"', '"session_id": "sess-doc"', data)
        headers = {**W, "content-type": "application/json"} if data else W
        r = httpx.post(url, headers=headers, content=data.encode() if data else b"")
        assert r.status_code == 200, (path, r.text)


def test_source_defaults_to_what_the_plane_reads(served: Served) -> None:
    raw = _chat(served, "Refund window?", "sess-src")
    cid, tid = raw.parse().id, raw.headers["x-molt-trajectory"]
    r = httpx.post(served.url + "/v1/molt/rewards/call", headers=W,
                   json={"call_id": cid, "value": 0, "reason": "It is 45 days from delivery."})
    assert r.status_code == 200 and r.json()["source"] == "user_correction"
    r = httpx.post(served.url + "/v1/molt/rewards/call", headers=W, json={"call_id": cid, "value": 1})
    assert r.json()["source"] == "user_feedback"
    r = httpx.post(served.url + "/v1/molt/rewards/call", headers=W,
                   json={"call_id": cid, "value": 0, "reason": "slow", "source": "user_feedback"})
    assert r.json()["source"] == "user_feedback"  # given: kept
    served.flush()
    got = sorted((a.source, a.reason or "") for a in served.store.rewards(tid))
    assert (RewardSource.USER_CORRECTION, "It is 45 days from delivery.") in got
    assert (RewardSource.USER_FEEDBACK, "slow") in got
