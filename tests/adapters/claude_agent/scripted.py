"""A scripted Claude Code CLI behind the SDK's ``Transport`` interface: no ``claude`` binary, no network.

:class:`ScriptedCLI` plays the CLI side of the SDK's stream-JSON control protocol: it answers
``initialize`` (remembering which hook callback ids the SDK registered for which event), and on the
user's prompt runs the conformance story — fires the hooks as ``hook_callback`` control requests and
waits for each answer, as the CLI does, streams the assistant and user messages, runs the tools
``lookup`` (text with the marker) and ``explode`` (raises; reported through ``PostToolUseFailure``),
and ends with a ``result`` whose text is ``done: <marker>``.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

from claude_agent_sdk import ClaudeAgentOptions, ResultMessage, query
from claude_agent_sdk._internal.transport import Transport

from molt.testing import HUGE_TEXT_CHARS, Script, huge_blob

MODEL = "claude-scripted-1"


class ScriptedCLI(Transport):
    """The CLI side of one session (one ``query()``)."""

    def __init__(self, script: Script):
        self.script = script
        self.session = f"sess-{script.marker}-{uuid.uuid4().hex[:8]}"
        self._out: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._hooks: dict[str, list[tuple[str | None, str]]] = {}  # event -> (matcher, callback id)
        self._ready = False
        self._task: asyncio.Task[None] | None = None
        self._n = 0

    # ------------------------------------------------------------------ Transport

    async def connect(self) -> None:
        self._ready = True

    def is_ready(self) -> bool:
        return self._ready

    async def write(self, data: str) -> None:
        for line in data.splitlines():
            if line.strip():
                self._handle(json.loads(line))

    def read_messages(self) -> AsyncIterator[dict[str, Any]]:
        return self._read()

    async def _read(self) -> AsyncIterator[dict[str, Any]]:
        while True:
            msg = await self._out.get()
            if msg is None:
                return
            yield msg

    async def end_input(self) -> None:
        self._out.put_nowait(None)

    async def close(self) -> None:
        self._ready = False
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._out.put_nowait(None)

    # ------------------------------------------------------------------ protocol

    def _handle(self, msg: dict[str, Any]) -> None:
        if msg.get("type") == "control_request" and msg["request"].get("subtype") == "initialize":
            for event, matchers in (msg["request"].get("hooks") or {}).items():
                self._hooks[event] = [(m.get("matcher"), cid) for m in matchers for cid in m.get("hookCallbackIds", [])]
            self._send(
                {
                    "type": "control_response",
                    "response": {"subtype": "success", "request_id": msg["request_id"], "response": {"commands": []}},
                }
            )
        elif msg.get("type") == "control_response":
            resp = msg["response"]
            fut = self._pending.pop(resp["request_id"], None)
            if fut is not None and not fut.done():
                fut.set_result(resp)
        elif msg.get("type") == "user" and self._task is None:
            prompt = msg["message"]["content"]
            self._task = asyncio.get_running_loop().create_task(self._turn(prompt))

    def _send(self, msg: dict[str, Any]) -> None:
        self._out.put_nowait(msg)

    async def _hook(self, event: str, tool_use_id: str | None = None, **fields: Any) -> None:
        data = {
            "session_id": self.session,
            "transcript_path": "/dev/null",
            "cwd": "/",
            "hook_event_name": event,
            **fields,
        }
        if tool_use_id is not None:
            data["tool_use_id"] = tool_use_id
        for matcher, cid in self._hooks.get(event, []):
            if matcher and not re.fullmatch(matcher, str(fields.get("tool_name", ""))):
                continue  # the CLI matches tool names against the matcher (a regex, "A|B")
            self._n += 1
            rid = f"cli_req_{self._n}"
            fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
            self._pending[rid] = fut
            self._send(
                {
                    "type": "control_request",
                    "request_id": rid,
                    "request": {
                        "subtype": "hook_callback",
                        "callback_id": cid,
                        "input": data,
                        "tool_use_id": tool_use_id,
                    },
                }
            )
            await asyncio.wait_for(fut, 10)

    def _assistant(self, content: list[dict[str, Any]], n_in: int, n_out: int) -> None:
        self._send(
            {
                "type": "assistant",
                "session_id": self.session,
                "parent_tool_use_id": None,
                "message": {
                    "id": f"msg_{uuid.uuid4().hex[:12]}",
                    "role": "assistant",
                    "model": MODEL,
                    "content": content,
                    "stop_reason": "tool_use",
                    "usage": {"input_tokens": n_in, "output_tokens": n_out},
                },
            }
        )

    async def _turn(self, prompt: str) -> None:
        m = self.script.marker
        self._send(
            {
                "type": "system",
                "subtype": "init",
                "session_id": self.session,
                "model": MODEL,
                "tools": ["lookup", "explode"],
                "cwd": "/",
            }
        )
        await self._hook("UserPromptSubmit", prompt=prompt)
        calls = [
            ("toolu_" + uuid.uuid4().hex[:12], "lookup", {"query": m}),
            ("toolu_" + uuid.uuid4().hex[:12], "explode", {"reason": m}),
        ]
        self._assistant(
            [{"type": "text", "text": "Let me look."}]
            + [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in calls],
            20,
            12,
        )
        results = []
        for call_id, name, args in calls:
            await self._hook("PreToolUse", call_id, tool_name=name, tool_input=args)
            try:
                output = self._run_tool(name, args)
            except Exception as exc:
                err = f"{type(exc).__name__}: {exc}"
                await self._hook(
                    "PostToolUseFailure", call_id, tool_name=name, tool_input=args, error=err, duration_ms=0
                )
                results.append({"type": "tool_result", "tool_use_id": call_id, "content": err, "is_error": True})
            else:
                await self._hook(
                    "PostToolUse", call_id, tool_name=name, tool_input=args, tool_response=output, duration_ms=0
                )
                results.append(
                    {"type": "tool_result", "tool_use_id": call_id, "content": str(output.get("text", ""))[:200]}
                )
        self._send(
            {
                "type": "user",
                "session_id": self.session,
                "parent_tool_use_id": None,
                "message": {"role": "user", "content": results},
            }
        )
        answer = f"done: {m}"
        self._assistant([{"type": "text", "text": answer}], 60, 5)
        await self._hook("Stop", stop_hook_active=False, last_assistant_message=answer)
        self._send(
            {
                "type": "result",
                "subtype": "success",
                "duration_ms": 3,
                "duration_api_ms": 2,
                "is_error": False,
                "num_turns": 2,
                "session_id": self.session,
                "result": answer,
                "total_cost_usd": 0.0,
                "usage": {"input_tokens": 80, "output_tokens": 17},
            }
        )

    def _run_tool(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        if name == "explode":
            raise ValueError(args["reason"])
        text = f"found {args['query']}"
        if self.script.huge_output:
            return {"text": text + " " + "x" * HUGE_TEXT_CHARS, "image": huge_blob()}
        return {"text": text}


async def run_query(options: ClaudeAgentOptions, script: Script) -> str:
    """Run one ``query()`` against a :class:`ScriptedCLI`; return the result text."""
    prompt = f"help {script.marker}" + (" huge" if script.huge_output else "")
    result = None
    async for msg in query(prompt=prompt, options=options, transport=ScriptedCLI(script)):
        if isinstance(msg, ResultMessage):
            result = msg.result
    return str(result)
