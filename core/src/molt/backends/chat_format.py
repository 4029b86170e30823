"""Chat formatting for token-level backends (vllm, local, stub): messages and tools → prompt text,
generated text → content and tool calls.

These backends sample from a token prompt they build themselves, so the recorded prompt ids are
exactly what the model saw. Tools are rendered natively when the tokenizer's chat template knows
about them, and otherwise in the Hermes convention (the tool list in the system message, calls as
``<tool_call>{"name": …, "arguments": …}</tool_call>``), which is also how calls are parsed back.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from typing import Any

import orjson

from molt.backends.base import ToolCallOut

__all__ = [
    "TOOL_SYSTEM_PROMPT",
    "new_tool_call_id",
    "parse_tool_calls",
    "render_chatml",
    "template_messages",
    "text_content",
]

TOOL_SYSTEM_PROMPT = (
    "You may call one or more functions to assist with the user query. The available functions are "
    "listed in <tools></tools>:\n<tools>\n{tools}\n</tools>\n"
    "To call a function, answer with one JSON object per call inside <tool_call></tool_call> tags:\n"
    '<tool_call>\n{{"name": <function-name>, "arguments": <arguments-object>}}\n</tool_call>'
)

_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


def new_tool_call_id() -> str:
    """A fresh OpenAI-style tool call id."""
    return "call_" + uuid.uuid4().hex[:24]


def text_content(content: Any) -> str:
    """The text of a message's ``content``: a string, or the text parts of a content-part list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, dict) and p.get("type") in ("text", "input_text", "output_text"):
                parts.append(str(p.get("text", "")))
            elif isinstance(p, str):
                parts.append(p)
        return "".join(parts)
    return str(content)


def _call_json(call: dict[str, Any]) -> str:
    fn = call.get("function") or {}
    args: Any = fn.get("arguments", {})
    if isinstance(args, str):
        with contextlib.suppress(orjson.JSONDecodeError):
            args = orjson.loads(args) if args.strip() else {}
    return orjson.dumps({"name": fn.get("name", ""), "arguments": args}).decode()


def template_messages(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, *,
                      native_tools: bool = False) -> list[dict[str, str]]:
    """Messages as a plain-text chat template expects them (every ``content`` a string).

    Assistant tool calls become ``<tool_call>`` blocks and tool results ``<tool_response>`` blocks;
    unless ``native_tools`` (the template renders ``tools`` itself), the tool list is put into the
    system message.
    """
    out: list[dict[str, str]] = []
    for m in messages:
        role = str(m.get("role", "user"))
        text = text_content(m.get("content"))
        if role == "developer":
            role = "system"
        if role == "assistant" and m.get("tool_calls"):
            blocks = "\n".join(f"<tool_call>\n{_call_json(c)}\n</tool_call>" for c in m["tool_calls"])
            text = f"{text}\n{blocks}" if text else blocks
        elif role == "tool":
            text = f"<tool_response>\n{text}\n</tool_response>"
        out.append({"role": role, "content": text})
    if tools and not native_tools:
        listing = "\n".join(orjson.dumps(t.get("function", t)).decode() for t in tools)
        prompt = TOOL_SYSTEM_PROMPT.format(tools=listing)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{prompt}"}
        else:
            out.insert(0, {"role": "system", "content": prompt})
    return out


def render_chatml(messages: list[dict[str, str]]) -> str:
    """A ChatML rendering with the assistant turn opened (the stub's stand-in for a chat template)."""
    body = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return body + "<|im_start|>assistant\n"


def parse_tool_calls(text: str, tool_names: set[str] | None) -> tuple[str | None, list[ToolCallOut] | None]:
    """Split generated text into content and tool calls.

    Recognizes ``<tool_call>{…}</tool_call>`` blocks (an unterminated last block too) and, when the
    whole answer is one JSON object naming a known tool, that object. Blocks that are not valid calls
    stay in the content. Returns ``(content or None, calls or None)``.
    """
    calls: list[ToolCallOut] = []
    if "<tool_call>" in text:
        kept: list[str] = []
        pos = 0
        for m in _CALL_RE.finditer(text):
            call = _as_call(m.group(1), tool_names)
            if call is None:
                continue
            kept.append(text[pos:m.start()])
            pos = m.end()
            calls.append(call)
        kept.append(text[pos:])
        content = "".join(kept).strip() if calls else text
    else:
        stripped = text.strip()
        call = _as_call(stripped, tool_names) if stripped.startswith("{") and tool_names else None
        if call is not None:
            calls.append(call)
            content = ""
        else:
            content = text
    return (content or None), (calls or None)


def _as_call(blob: str, tool_names: set[str] | None) -> ToolCallOut | None:
    try:
        obj = orjson.loads(blob)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    if tool_names is not None and obj["name"] not in tool_names:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    arguments = args if isinstance(args, str) else orjson.dumps(args if args is not None else {}).decode()
    return ToolCallOut(id=new_tool_call_id(), name=obj["name"], arguments=arguments)
