"""Feedback is rate-limited per key, and bad feedback is refused whole (issue 42): one key cannot speak
for many users, and a correction that is too large, not text, or about another tenant's call is refused
with a clear error and nothing stored."""

from __future__ import annotations

from typing import Any

import httpx

from .conftest import Served

W = {"authorization": "Bearer sk-acme-writer"}
G = {"authorization": "Bearer sk-globex-writer"}


def _chat(served: Served, text: str, key: str = "sk-acme-writer") -> Any:
    return served.client(key).chat.completions.with_raw_response.create(
        model="stub", messages=[{"role": "user", "content": text}])


def _correct(served: Served, call_id: str, reason: Any, headers: dict[str, str] = W) -> httpx.Response:
    return httpx.post(served.url + "/v1/molt/rewards/call", headers=headers,
                      json={"call_id": call_id, "value": 0.0, "source": "user_correction", "reason": reason})


def test_feedback_per_key_is_rate_limited_and_other_keys_are_not(serve: Any) -> None:
    served = serve(feedback_per_minute=5)
    raw = _chat(served, "what is the refund window?")
    cid = raw.parse().id
    codes = [_correct(served, cid, f"The refund window is {30 + i} days.").status_code for i in range(8)]
    assert codes[:5] == [200] * 5 and codes[5:] == [429] * 3, codes
    r = _correct(served, cid, "once more")
    assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limit_exceeded"
    assert "sk-acme-writer" not in r.text and "feedback_per_minute" in r.json()["error"]["message"]
    # another tenant's key has its own bucket
    other = _chat(served, "hello", key="sk-globex-writer").parse().id
    assert _correct(served, other, "The refund window is 30 days.", G).status_code == 200
    served.flush()
    assert len(served.store.rewards(raw.headers["x-molt-trajectory"])) == 5  # the refused ones stored nothing


def test_bad_corrections_are_refused_whole(served: Served) -> None:
    raw = _chat(served, "what is the refund window?")
    cid, tid = raw.parse().id, raw.headers["x-molt-trajectory"]
    big = _correct(served, cid, "x" * (1 << 20))
    assert big.status_code == 400 and "reason" in big.json()["error"]["message"], big.text
    for bad in (12345, {"text": "The refund window is 30 days."}, ["a", "b"]):
        r = _correct(served, cid, bad)
        assert r.status_code == 400 and "reason" in r.json()["error"]["message"], (bad, r.text)
    foreign = _chat(served, "hello", key="sk-globex-writer").parse().id
    r = _correct(served, foreign, "The refund window is 30 days.")
    assert r.status_code == 404 and "acme" in r.json()["error"]["message"]
    served.flush()
    assert served.store.rewards(tid) == []
