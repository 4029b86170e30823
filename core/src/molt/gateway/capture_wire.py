"""The capture pipe's wire: length-prefixed frames of one kind byte each, and a model call's compact form.

The gateway (:class:`~molt.gateway.capture_process.CaptureProcess`) writes frames into its capture
child's stdin; the child (:mod:`molt.gateway.capture_child`) answers flush and stats requests on its
stdout in the same framing. A frame is ``<u32 length><kind><payload>``, the length counting the kind.
"""

from __future__ import annotations

import struct
from typing import Any

import orjson

from molt.atdp.models import OutcomeStatus
from molt.backends.base import Choice, Result, TokenCounts, TokenLogprob, ToolCallOut
from molt.gateway.call_record import CallRecord
from molt.gateway.router import Route, VersionSpec

__all__ = ["CALL", "EVENT", "FINAL", "FLUSH", "FRESH", "HOLDS_SPOOL", "LEN", "QUIT", "RECORDS", "REWARD", "STATS",
           "WireError", "call_from_wire", "call_to_wire", "frame", "read_exact", "split_frames"]

CALL, EVENT, REWARD, FRESH, FLUSH, STATS, QUIT = b"C", b"E", b"R", b"N", b"F", b"S", b"Q"
LEN = struct.Struct("<I")
RECORDS = frozenset((CALL, EVENT, REWARD))  # what counts towards recycling the child
FINAL = "final"  # id of the stats a child sends as it exits
#: The frame a child sends once it holds the spool. A child is replaced only after it sent it:
#: otherwise, under load, several replacements start before their predecessors took the spool and
#: race for it, and a loser that never gets it dies with the records in its pipe.
HOLDS_SPOOL = orjson.dumps({"id": "holds-spool", "ok": True, "stats": {}})


def call_to_wire(rec: CallRecord) -> bytes:
    """A call record as compact JSON (what crosses the pipe)."""
    res = rec.result
    result = None
    if res is not None:
        result = {
            "model": res.model, "prompt_ids": res.prompt_ids, "tokenizer": res.tokenizer,
            "usage": [res.usage.prompt_tokens, res.usage.completion_tokens] if res.usage else None,
            "choices": [{"i": c.index, "text": c.text, "finish": c.finish_reason, "ids": c.token_ids,
                         "calls": [[t.id, t.name, t.arguments] for t in c.tool_calls] if c.tool_calls else None,
                         "lps": [lp.logprob for lp in c.logprobs] if c.logprobs else None}
                        for c in res.choices],
        }
    d = rec.decision
    return orjson.dumps({
        "endpoint": rec.endpoint, "event_ids": rec.event_ids, "tid": rec.trajectory_id, "sid": rec.session_id,
        "parent": rec.parent_id, "tenant": rec.tenant_id, "agent": rec.agent_id, "model": rec.public_model,
        "version": d.version.model_dump(mode="json", exclude={"harness"}) if d else None,
        "backend": d.backend if d else None, "started": rec.started, "messages": rec.messages, "tools": rec.tools,
        "prompt": rec.prompt, "sampling": rec.sampling, "harness": rec.harness_fingerprint,
        "new_tools": rec.new_tools, "result": result, "status": rec.status.value,
        "error": [type(rec.error).__name__, str(rec.error)] if rec.error is not None else None,
        "latency_ms": rec.latency_ms, "key": rec.key_name, "task": rec.task,
    })


class WireError(Exception):
    """An error as it was, rebuilt on the other side of the pipe (its type name is kept)."""

    def __init__(self, type_name: str, message: str):
        super().__init__(message)
        self.type_name = type_name


def call_from_wire(data: bytes) -> CallRecord:
    """The call record back from :func:`call_to_wire`."""
    d = orjson.loads(data)
    result = None
    if d["result"] is not None:
        r = d["result"]
        choices = [Choice(index=c["i"], text=c["text"], finish_reason=c["finish"], token_ids=c["ids"],
                          tool_calls=[ToolCallOut(*t) for t in c["calls"]] if c["calls"] else None,
                          logprobs=[TokenLogprob(token="", logprob=x) for x in c["lps"]] if c["lps"] else None)
                   for c in r["choices"]]
        result = Result(choices=choices, model=r["model"], prompt_ids=r["prompt_ids"], tokenizer=r["tokenizer"],
                        usage=TokenCounts(*r["usage"]) if r["usage"] else None)
    decision = None
    if d["version"] is not None:
        decision = Route(VersionSpec.model_validate(d["version"]), d["backend"])
    error: BaseException | None = None
    if d["error"] is not None:
        error = WireError(*d["error"])
    return CallRecord(endpoint=d["endpoint"], event_ids=d["event_ids"], trajectory_id=d["tid"], session_id=d["sid"],
                      parent_id=d["parent"], tenant_id=d["tenant"], agent_id=d["agent"], public_model=d["model"],
                      decision=decision, started=d["started"], messages=d["messages"], tools=d["tools"],
                      prompt=d["prompt"], sampling=d["sampling"], harness_fingerprint=d["harness"],
                      new_tools=[tuple(t) for t in d["new_tools"]], result=result, status=OutcomeStatus(d["status"]),
                      error=error, latency_ms=d["latency_ms"], key_name=d["key"], task=d.get("task"))


def frame(kind: bytes, payload: bytes) -> bytes:
    """One frame of ``kind`` carrying ``payload``."""
    return LEN.pack(len(payload) + 1) + kind + payload


def split_frames(buf: bytes) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """The whole frames at the start of ``buf`` as ``(kind, payload)``, and the incomplete rest."""
    out = []
    while len(buf) >= 4:
        (n,) = LEN.unpack_from(buf)
        if len(buf) < 4 + n:
            break
        out.append((buf[4:5], buf[5:4 + n]))
        buf = buf[4 + n:]
    return out, buf


def read_exact(stream: Any, n: int) -> bytes | None:
    """``n`` bytes from ``stream``, or None when it ends first."""
    buf = b""
    while len(buf) < n:
        piece = stream.read(n - len(buf))
        if not piece:
            return None
        buf += piece
    return buf
