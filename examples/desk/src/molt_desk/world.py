"""The support-desk world the built-in scenarios, tests, bench and demo run in.

A real tool-using agent (:func:`support_desk`, registered as ``@replayable("molt-support-desk")``)
answers customers with three tools — ``lookup_order``, ``refund`` and ``search_kb`` — driven by
:class:`DeskModel`, a scripted policy that *reads its context* the way an instruction-following model
does, so that non-weight interventions change what it does:

- it answers a policy question from a memory in its system message that shares two content words
  with the question, else it searches the knowledge base (which may not know the fact);
- it fills ``order_id`` with the full id (``A-1001``) only when the tool's parameter description says
  to keep the prefix, else with the digits it sees as "the order number" (a confusing schema);
- it follows a skill patch whose name or trigger matches the request and which names tools in order
  (look the order up, then refund the total); without one it refunds straight away most of the time;
- it answers in JSON when its system prompt asks for JSON;
- it obeys a system prompt that forbids tools, and a served adapter named ``*-broken`` garbles answers
  (the two regressions a bad promotion can bring);
- it cannot do arithmetic (a capability gap no context fixes).

Its choices are deterministic in the request (a hash of the question seeds the few sampled ones), so a
recording and its replay agree. The verifier checks answers against the world's data; tool errors
carry realistic messages, which is what the control plane diagnoses.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

import orjson

from molt.backends import StubBackend
from molt.backends.base import ChatRequest, ToolCallOut
from molt.backends.chat_format import text_content
from molt.replay import LiveTools, ToolFailed, replayable

__all__ = [
    "AGENT",
    "FACTS",
    "LEGACY_AGENT",
    "ORDERS",
    "DeskModel",
    "Fact",
    "World",
    "desk_tools",
    "live_tools",
    "seed",
    "support_desk",
    "support_desk_legacy",
    "verify",
]

AGENT = "molt-support-desk"
LEGACY_AGENT = "molt-support-desk-legacy"

ORDERS: dict[str, dict[str, Any]] = {
    f"A-{1000 + i}": {"state": ("shipped", "processing", "delivered", "returned")[i % 4], "total": 20 + 7 * i}
    for i in range(60)
}


@dataclass(frozen=True)
class Fact:
    """A policy fact the knowledge base may lack: ``topic`` words appear in questions about it."""

    topic: str
    text: str
    answer: str
    questions: tuple[str, ...]


FACTS: dict[str, Fact] = {f.topic: f for f in [
    Fact("refund window", "Acme's refund window is 45 days from delivery.", "45 days",
         ("What is the refund window?", "How long is the refund window for my purchase?",
          "Could you tell me the refund window please?")),
    Fact("warranty period", "The warranty period on Acme devices is 24 months.", "24 months",
         ("What is the warranty period on my device?", "How long is the warranty period?",
          "Tell me the warranty period for Acme products.")),
    Fact("support hours", "Acme support hours are 8am to 6pm CET on weekdays.", "8am to 6pm",
         ("What are your support hours?", "When are the support hours?", "Which support hours do you keep?")),
    Fact("shipping countries", "Acme ships to all shipping countries in the EU and to Norway.", "Norway",
         ("Which shipping countries do you serve?", "List your shipping countries.",
          "Do your shipping countries include Norway?")),
    Fact("exchange policy", "Under the exchange policy an item can be exchanged once within 30 days.", "once",
         ("What is the exchange policy?", "Explain the exchange policy to me.",
          "How does the exchange policy work?")),
    Fact("returns", "Returns are accepted for unused items.", "unused items",
         ("What is your policy on returns of unused items?", "Are returns of unused items possible?",
          "Tell me about returns for unused items.")),
    Fact("loyalty points", "Loyalty points expire 12 months after they are earned.", "12 months",
         ("When do loyalty points expire?", "How long do my loyalty points last?",
          "Do loyalty points expire?")),
    Fact("invoice address", "The invoice address can be changed until the order ships.", "until the order ships",
         ("Can I change the invoice address?", "Until when may the invoice address change?",
          "How do I update my invoice address?")),
]}

#: What the knowledge base knows (every other fact is missing from it).
KB_DOCS = {"returns unused items": "Returns are accepted for unused items.",
           "contact": "Write to the help centre through the contact form."}

_WORD = re.compile(r"[a-z]{5,}")
_ORDER = re.compile(r"\bA-(\d{4})\b")


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def seed(*parts: str) -> float:
    """A number in [0, 1) from the parts (the scripted policy's deterministic "sampling")."""
    h = hashlib.blake2b("\x00".join(parts).encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") / 2**64


# --------------------------------------------------------------------------- tools


def desk_tools(*, clear_ids: bool = True) -> list[dict[str, Any]]:
    """The agent's tool schemas. ``clear_ids=False`` is the confusing ``lookup_order`` schema."""
    id_desc = ("The order id exactly as the customer wrote it, keeping the 'A-' prefix (e.g. A-1001)."
               if clear_ids else "The order number.")
    return [
        {"type": "function", "function": {
            "name": "lookup_order", "description": "Look up an order's state and total.",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string", "description": id_desc}},
                           "required": ["order_id"]}}},
        {"type": "function", "function": {
            "name": "refund", "description": "Refund an order.",
            "parameters": {"type": "object", "properties": {
                "order_id": {"type": "string", "description": id_desc},
                "amount": {"type": "number", "description": "The amount to refund."}},
                "required": ["order_id", "amount"]}}},
        {"type": "function", "function": {
            "name": "search_kb", "description": "Search the help-centre knowledge base.",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}},
    ]


class ValidationError(Exception):
    """A tool rejected its arguments."""


class RefundError(Exception):
    """A refund that breaks the procedure."""


class TransientError(Exception):
    """A flaky backend (retryable)."""


@dataclass
class World:
    """Live tool implementations (deterministic; ``flaky`` makes a share of lookups fail transiently)."""

    kb: dict[str, str] = field(default_factory=lambda: dict(KB_DOCS))
    flaky: float = 0.0
    refunds: list[tuple[str, float]] = field(default_factory=list)

    def lookup_order(self, order_id: str) -> dict[str, Any]:
        if not isinstance(order_id, str) or not order_id.startswith("A-"):
            raise ValidationError(f"order_id {order_id!r} is not an order id: it must keep the 'A-' prefix, "
                                  f"e.g. 'A-1001'")
        if self.flaky and seed("flaky", order_id) < self.flaky:
            raise TransientError("upstream order service timed out; retry later")
        order = ORDERS.get(order_id)
        if order is None:
            raise LookupError(f"no order {order_id}")
        return {"order_id": order_id, **order}

    def refund(self, order_id: str, amount: Any = None) -> dict[str, Any]:
        order = self.lookup_order(order_id)
        if not isinstance(amount, int | float) or float(amount) != float(order["total"]):
            raise RefundError("amount does not match the order total; look the order up first and refund its total")
        self.refunds.append((order_id, float(amount)))
        return {"order_id": order_id, "refunded": float(amount)}

    def search_kb(self, query: str) -> Any:
        q = _words(query)
        hits = [text for key, text in self.kb.items() if q & _words(key + " " + text)]
        return hits or "no results"

    def live_tools(self) -> LiveTools:
        """These tools as replay's sandboxed live tools."""
        live = LiveTools()
        live.register("lookup_order", self.lookup_order)
        live.register("refund", self.refund)
        live.register("search_kb", self.search_kb)
        return live


def live_tools() -> LiveTools:
    """A fresh world's tools as replay's live tools (``molt evolve run --live-tools molt_desk.world:live_tools``)."""
    return World().live_tools()


# --------------------------------------------------------------------------- the scripted policy


class DeskModel(StubBackend):
    """The context-reading scripted policy (see the module docstring)."""

    def __init__(self, name: str | None = None, *, model: str = "desk-model", explore: float = 0.15):
        super().__init__(name, model=model)
        self.explore = explore

    def _answer(self, req: ChatRequest) -> tuple[str | None, list[ToolCallOut] | None, str]:
        self.calls += 1
        msgs = req.messages
        system = text_content(msgs[0].get("content")) if msgs and msgs[0].get("role") == "system" else ""
        question = next((text_content(m.get("content")) for m in msgs if m.get("role") == "user"), "")
        results = [m for m in msgs if m.get("role") == "tool"]
        tools = {t["function"]["name"]: t["function"] for t in (req.tools or [])}
        if "do not use tools" in system.lower():
            tools = {}
        text, calls = self._decide(system, question, results, tools, msgs)
        if text is not None:
            if str(req.model or "").endswith("-broken"):
                text = text[::-1]
            if "JSON" in system:
                text = orjson.dumps({"answer": text}).decode()
            return text, None, text
        out = [ToolCallOut(id=f"call_{self.calls}_{i}", name=n, arguments=orjson.dumps(a).decode())
               for i, (n, a) in enumerate(calls or [])]
        return None, out, "".join(f"<tool_call>{c.name} {c.arguments}</tool_call>" for c in out)

    # One decision per call, from what the context says.
    def _decide(self, system: str, question: str, results: list[dict[str, Any]], tools: dict[str, Any],
                msgs: list[dict[str, Any]]) -> tuple[str | None, list[tuple[str, dict[str, Any]]] | None]:
        q = question.lower()
        m = _ORDER.search(question)
        last = _result(results[-1]) if results else None
        if m is None:  # a policy question
            for fact in _memories(system):
                if len(_words(fact) & _words(question)) >= 2:
                    return fact, None
            if "search_kb" in tools and not results:
                return None, [("search_kb", {"query": question})]
            if isinstance(last, list) and last:
                return str(last[0]), None
            return "I am not sure; I could not find that in the knowledge base.", None
        oid = self._order_arg(tools, "lookup_order" if "lookup_order" in tools else "refund", m)
        if isinstance(last, dict) and last.get("error"):
            return f"Sorry, I could not complete that: {last['error']}", None
        if "refund" in q:
            skill = _skill_for(system, question)
            looked = _looked_up(msgs)
            if looked is None and (skill or seed("explore", question) < self.explore) and "lookup_order" in tools:
                return None, [("lookup_order", {"order_id": oid})]
            if isinstance(last, dict) and "refunded" in last:
                return f"Refunded {last['refunded']:.2f} for order {last['order_id']}.", None
            if "refund" not in tools:
                return "I cannot issue refunds.", None
            amount = looked.get("total") if looked else None
            args: dict[str, Any] = {"order_id": self._order_arg(tools, "refund", m)}
            if amount is not None:
                args["amount"] = amount
            return None, [("refund", args)]
        if not results and "lookup_order" in tools:
            return None, [("lookup_order", {"order_id": oid})]
        if isinstance(last, dict) and "state" in last:
            if "cents" in q:  # the capability gap: it cannot do the arithmetic
                return f"Order {last['order_id']} costs {int(last['total'])} cents with tax.", None
            return f"Order {last['order_id']} is {last['state']}.", None
        return "I cannot look orders up right now.", None

    @staticmethod
    def _order_arg(tools: dict[str, Any], tool: str, m: re.Match[str]) -> str:
        fn = tools.get(tool) or {}
        desc = str(((fn.get("parameters") or {}).get("properties") or {}).get("order_id", {}).get("description", ""))
        return m.group(0) if ("prefix" in desc.lower() or "A-" in desc) else m.group(1)


def _result(msg: dict[str, Any]) -> Any:
    raw = text_content(msg.get("content"))
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {"error": raw}


def _looked_up(msgs: list[dict[str, Any]]) -> dict[str, Any] | None:
    for m in msgs:
        if m.get("role") == "tool":
            r = _result(m)
            if isinstance(r, dict) and "total" in r:
                return r
    return None


def _memories(system: str) -> list[str]:
    if "Relevant memories:" not in system:
        return []
    block = system.split("Relevant memories:", 1)[1].split("\n\n", 1)[0]
    return [ln.removeprefix("- ").strip() for ln in block.splitlines() if ln.startswith("- ")]


def _skill_for(system: str, question: str) -> bool:
    """Whether a skill in the system message applies to ``question`` and says to look the order up first."""
    if "Skills:" not in system:
        return False
    for chunk in system.split("Skills:", 1)[1].split("## ")[1:]:
        name, _, body = chunk.partition("\n")
        if not (_words(name + " " + body) & _words(question)):
            continue
        low = body.lower()
        if "lookup_order" in low and "refund" in low and low.index("lookup_order") < low.rindex("refund"):
            return True
    return False


# --------------------------------------------------------------------------- the agent


def verify(answer: Any, ctx: Any) -> None:
    """The desk's verifier: the answer must hold what the world's data says (JSON-wrapped for json tasks)."""
    text = str(answer or "")
    task = ctx.task or ""
    if task.endswith("_json"):
        try:
            obj = orjson.loads(text)
        except orjson.JSONDecodeError:
            raise AssertionError("format: the answer is not a JSON object with an 'answer' key") from None
        assert isinstance(obj, dict) and "answer" in obj, "format: the answer is not a JSON object with an 'answer' key"
        text = str(obj["answer"])
    m = _ORDER.search(ctx.input)
    if m is None:
        fact = next((f for f in FACTS.values() if f.topic in ctx.input.lower()), None)
        assert fact is not None, "unknown question"
        assert fact.answer.lower() in text.lower(), f"wrong answer: expected the {fact.topic}"
        return
    order = ORDERS[m.group(0)]
    if "refund" in ctx.input.lower():
        assert "Refunded" in text, "the refund was not issued"
    elif "cents" in ctx.input.lower():
        expected = round(order["total"] * 107)
        assert str(expected) in text, f"wrong amount: expected {expected} cents"
    else:
        assert order["state"] in text, "wrong or missing order state"


def _desk(input: str, model: Any, tools: Any, offered: list[dict[str, Any]]) -> Any:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are Acme's support assistant."},
                                      {"role": "user", "content": input}]
    reply = None
    for _ in range(5):
        reply = model.chat(messages, tools=offered, temperature=0)
        messages.append(reply.message)
        if not reply.tool_calls:
            return reply.text
        for c in reply.tool_calls:
            try:
                out: Any = tools.call(c["name"], **c["arguments"])
            except ToolFailed as exc:
                err = exc.outcome.error
                out = {"error": f"{err.type}: {err.message}" if err else str(exc)}
            # A recording captured at the gateway holds the tool message text itself: pass it through.
            content = out if isinstance(out, str) else orjson.dumps(out).decode()
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": content})
    return reply.text if reply else None


@replayable(name=AGENT, verifier=verify)
def support_desk(input: str, model: Any, tools: Any) -> Any:
    """The support agent: a system prompt, the desk tools, up to five model calls."""
    return _desk(input, model, tools, desk_tools())


@replayable(name=LEGACY_AGENT, verifier=verify)
def support_desk_legacy(input: str, model: Any, tools: Any) -> Any:
    """The same agent deployed with the legacy integration's confusing ``lookup_order`` schema."""
    return _desk(input, model, tools, desk_tools(clear_ids=False))
