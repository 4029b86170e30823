"""The control plane on a real model: does it pick the intervention that fixes a cluster, and is the
cheapest fix cheaper than training? (issue 20; the seed's question)

Windows are produced by SmolLM2-135M itself: the generic OpenAI tool-calling loop of
``tests/e2e/test_generic_agent.py`` (it knows a base URL only; unmodified, no task labels) runs through
an in-process Molt gateway (real capture, real store, live versions bound to the router) over a local
SmolLM2 backend, in four domains the repo uses nowhere else — item 4's mixed-failure suite:

- ``library-desk`` (Pinecrest, a public library's help desk), a **missing fact**: the late fine; users
  correct the wrong answers, each signing with their name and email (personal data the memory must not
  keep);
- ``tallyworks-desk`` (a bookkeeping firm's assistant), a **capability gap**: three-digit multiplication;
  users correct each answer with its product;
- ``kestrel-marina`` (a marina's assistant), a **schema confusion**: the berth-booking tool's description
  and parameter say the boat's length is in feet, the marina's API takes metres; users correct the unit.
  SmolLM2-135M makes no tool call in this loop at all (probed: the Hermes prompt, SmolLM2's own
  function-calling prompt, few-shot calls; 0 calls), so the confusion shows in its answers, which repeat
  what the schema says, not in a malformed call;
- ``larchwood-camp`` (a campground's booking assistant), a **format requirement**: the booking widget
  parses every reply as JSON with an ``"answer"`` key and returns a verifier verdict saying so (no
  correction: the content is free).

Ground truth is decided by applying each family's context interventions **by hand**, cheapest first, and
measuring fresh traffic with the gateway's harness code (the fine as a memory; the self-check rule; the
unit as a memory, then the tool's description and parameter edited; the format rule): the cheapest one
that lifts fresh success by ≥ 0.5 is the family's truth; a family none of them fixes is a weight update.

Printed in one run:

1. the plane's choice per family vs the ground truth — templates only, and templates + SmolLM2 itself as
   the reflector — beside the "always weights" and "always no-op" baselines; the reflector's cost and how
   many of its candidates were valid; the live fix rate of the templates' choice on fresh traffic;
2. the seed's question on the mixed suite: Molt's plane (one cycle per family) vs a weight-only loop
   trained on every family's failing prompts together (one adapter for the agent's traffic) — GRPO with
   a LoRA adapter (molt_trainer: K samples per prompt, the verifier's reward, one optimiser step, the
   adapter hot-loaded and each family re-measured), as agent-lightning and ART evolve agents —
   CPU-seconds (process time: every thread of this process, the model included), trained tokens, wall
   time, and each family's success curve under each.

Sizes are flags (printed at the top): 6 failing asks per family, 4 fresh asks per measurement, 2 GRPO steps
of 4 samples per prompt. The weight-only loop is run for its steps and stopped, not to convergence: it is
the honest lower bound of its cost. A full run takes about an hour on a loaded 2-core box; ``--families``,
``--weight-loop-on``, ``--no-weight-loop`` and ``--no-reflector`` run a part of it (the README says which
run gave which figure).

    .venv/bin/python bench/bench_evolve.py --threads 1 --alpha 0.2
    .venv/bin/python bench/bench_evolve.py --threads 1 --alpha 0.2 --families kestrel-marina,larchwood-camp \
        --no-weight-loop --no-reflector
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from test_generic_agent import Agent  # noqa: E402  (the generic loop: one agent loop in the repo)

MODEL = "smollm2-135m-instruct"

PEOPLE = [("Nadia Haddad", "nadia.h@example.com"), ("Owen Price", "owen.price@mailbox.org"),
          ("Ingrid Sola", "ingrid.sola@example.net"), ("Kofi Mensah", "kofi.m@example.com"),
          ("Elena Rossi", "elena.rossi@example.it"), ("Marek Novak", "marek.novak@example.cz"),
          ("Yuki Sato", "yuki.sato@example.jp"), ("Pablo Ruiz", "pablo.ruiz@example.es")]

LIBRARY = {
    "agent": "library-desk",  # "pinecrest-help" reads as a person to the NER model: the gateway redacts it
    "system": "You are the help desk of Pinecrest Public Library. Answer the patron's question in one or two "
              "sentences.",
    "tools": [{"type": "function", "function": {
        "name": "book_status", "description": "Look up a book by ISBN: title, copies on the shelf, due dates.",
        "parameters": {"type": "object", "properties": {"isbn": {"type": "string"}}, "required": ["isbn"]}}}],
    "functions": {"book_status": lambda isbn="": orjson.dumps({"isbn": isbn, "on_shelf": 2}).decode()},
    "fact": "The late fine at Pinecrest Public Library is 35 cents per day.",
    "before": ["How much is the late fine at Pinecrest Public Library?",
               "What is the Pinecrest library late fine per day?",
               "My Pinecrest library book is overdue. How much is the late fine?",
               "Tell me the late fine for an overdue Pinecrest Public Library book.",
               "What late fine does Pinecrest Public Library charge?",
               "How large is the daily late fine at the Pinecrest library?",
               "Pinecrest Public Library late fine: how much per day?",
               "What do I pay per day in late fines at Pinecrest Public Library?"],
    "after": ["What's the late fine at Pinecrest Public Library?",
              "If I return a Pinecrest library book late, what is the fine per day?",
              "Could you tell me the Pinecrest Public Library late fine?",
              "How much will Pinecrest Public Library charge me as a late fine?",
              "What is the per-day late fine at Pinecrest library?",
              "Does Pinecrest Public Library have a late fine, and how much is it?"],
}
PAIRS = [(487, 356), (623, 418), (739, 257), (812, 364), (574, 691), (938, 472), (365, 829), (246, 713),
         (691, 538), (457, 926), (318, 745), (864, 293)]
TALLY = {
    "agent": "tallyworks-desk",
    "system": "You are the assistant of Tallyworks, a bookkeeping firm. Answer with the number only.",
    "tools": [{"type": "function", "function": {
        "name": "client_file", "description": "Open a client's file by client number.",
        "parameters": {"type": "object", "properties": {"client": {"type": "string"}}, "required": ["client"]}}}],
    "functions": {"client_file": lambda client="": orjson.dumps({"client": client, "open": True}).decode()},
    "before": [f"What is {a} times {b}?" for a, b in PAIRS[:8]],
    "after": [f"Please compute {a} multiplied by {b}." for a, b in PAIRS[8:]],
}
# A schema confusion: the booking tool's description is stale (the marina's berth API takes the boat's
# length in metres; its description and parameter still say feet), and the agent tells boaters what it
# read there. SmolLM2-135M calls no tool at all in this loop (probed with the Hermes prompt, SmolLM2's
# own function-calling prompt and few-shot calls in the system prompt: 0 calls in every case), so the
# confusion cannot show as a malformed call; it shows in the answer, which repeats the schema's unit.
BERTH_FEET = {"type": "object", "properties": {"length": {"type": "number",
                                                          "description": "the boat's length in feet"}},
              "required": ["length"]}
BERTH_METRES = {"type": "object", "properties": {"length": {"type": "number",
                                                            "description": "the boat's length in metres"}},
                "required": ["length"]}
MARINA = {
    "agent": "kestrel-marina",
    "system": "You are the assistant of Kestrel Bay Marina. Answer the boater's question in one sentence.",
    "tools": [{"type": "function", "function": {
        "name": "book_berth", "description": "Book a visitor berth for one night. Give the boat's length in feet.",
        "parameters": BERTH_FEET}}],
    "functions": {"book_berth": lambda length=0: orjson.dumps({"booked": True, "length_m": length}).decode()},
    "fact": "Berth bookings at Kestrel Bay Marina take the boat's length in metres, not feet.",
    "before": ["What unit do I give my boat's length in when I book a berth at Kestrel Bay Marina?",
               "Should I enter my boat length in feet or metres to book a Kestrel Bay berth?",
               "Booking a berth at Kestrel Bay Marina: is the boat length in feet or in metres?",
               "Which unit does the Kestrel Bay Marina berth booking use for boat length?",
               "For a Kestrel Bay Marina berth booking, do you want my boat's length in feet?",
               "In which unit should the boat length be for a visitor berth at Kestrel Bay Marina?",
               "Kestrel Bay Marina berth form: boat length in metres or feet?",
               "When reserving a berth at Kestrel Bay Marina, what unit is the boat length?"],
    "after": ["I want to book a Kestrel Bay Marina berth: which unit for my boat's length?",
              "Does the Kestrel Bay Marina berth booking take boat length in feet or metres?",
              "What length unit does Kestrel Bay Marina use when booking a visitor berth?",
              "Is my boat's length for a Kestrel Bay berth booking given in metres?",
              "For booking a berth at Kestrel Bay Marina, which unit is boat length measured in?",
              "Kestrel Bay Marina visitor berths: do I state the boat length in feet?"],
    "hand": [("memory_insert", {"memories": ("Berth bookings at Kestrel Bay Marina take the boat's length in metres, "
                                             "not feet.",)}),
             ("tool_schema_edit", {"tool_rewrites": {"book_berth": {
                 "description": "Book a visitor berth for one night. Give the boat's length in metres.",
                 "parameters": BERTH_METRES}}})],
}
# A format requirement: the campground's booking widget parses every reply as JSON with an "answer" key
# and says so in its verdict (a verifier reward with the reason, no correction). The content is free.
CAMP = {
    "agent": "larchwood-camp",
    "system": "You are the booking assistant of Larchwood Campground. Answer the camper's question in one sentence.",
    "tools": [{"type": "function", "function": {
        "name": "site_availability", "description": "Free pitches for a night.",
        "parameters": {"type": "object", "properties": {"night": {"type": "string"}}, "required": ["night"]}}}],
    "functions": {"site_availability": lambda night="": orjson.dumps({"night": night, "free": 4}).decode()},
    "verdict": 'format: the answer is not a JSON object with an "answer" key',
    "before": ["Are dogs allowed at Larchwood Campground?", "What time is check-in at Larchwood Campground?",
               "Can I have a campfire at my pitch at Larchwood?", "Is there hot water in the Larchwood shower block?",
               "How far is the nearest shop from Larchwood Campground?", "Does Larchwood Campground rent out tents?",
               "Can I arrive late at Larchwood Campground?", "Is there a playground at Larchwood Campground?"],
    "after": ["Do you have electric hook-ups at Larchwood Campground?", "When is check-out at Larchwood Campground?",
              "Is Larchwood Campground open in winter?", "Can I bring my own firewood to Larchwood?",
              "Are there quiet hours at Larchwood Campground?", "Does Larchwood Campground take caravans?"],
    "hand": [("harness_edit", {"system_prompt": 'Output format: every answer must be a JSON object with an "answer" '
                                                'key, for example {"answer": "Check-in starts at 2 pm."}'})],
}
OTHER = ["Write a two-line poem about rain.", "Translate 'thank you' into Spanish.", "Name a green vegetable."]
SELF_CHECK = "Before answering, re-check every figure and computation step by step."
LIBRARY["hand"] = [("memory_insert", {"memories": (LIBRARY["fact"],)})]
TALLY["hand"] = [("harness_edit", {"system_prompt": SELF_CHECK})]
FAMILIES = {f["agent"]: f for f in (LIBRARY, TALLY, MARINA, CAMP)}


def _expected(family: dict[str, Any], question: str) -> str:
    if family is LIBRARY:
        return "35"
    nums = [int(x) for x in re.findall(r"\d+", question)]
    return str(nums[0] * nums[1])


def _json_answer(answer: str) -> bool:
    try:
        obj = orjson.loads(answer.strip())
    except orjson.JSONDecodeError:
        return False
    return isinstance(obj, dict) and isinstance(obj.get("answer"), str)


def _ok(family: dict[str, Any], question: str, answer: str) -> bool:
    if family is MARINA:
        a = answer.lower()
        return ("metre" in a or "meter" in a) and "feet" not in a and "foot" not in a
    if family is CAMP:
        return _json_answer(answer)
    want = _expected(family, question)
    return re.search(rf"(?<!\d){want}(?!\d)", answer.replace(",", "")) is not None


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--asks", type=int, default=6, help="failing asks per family in the window")
    p.add_argument("--fresh", type=int, default=4, help="fresh asks per live measurement")
    p.add_argument("--grpo-steps", type=int, default=2)
    p.add_argument("--k", type=int, default=4, help="GRPO samples per prompt")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--families", default=",".join(FAMILIES),
                   help="the families to run (comma-separated; default all: " + ", ".join(FAMILIES) + ")")
    p.add_argument("--no-weight-loop", action="store_true", help="skip the weight-only loop (item 4's comparison)")
    p.add_argument("--weight-loop-on", default="",
                   help="families whose failing prompts the weight-only loop trains on, together "
                        "(comma-separated; default every family run)")
    p.add_argument("--no-reflector", action="store_true")
    p.add_argument("--reflector-on", default=",".join(FAMILIES),
                   help="families whose cycle is also run with SmolLM2 as the reflector")
    p.add_argument("--reflector-tokens", type=int, default=160)
    p.add_argument("--alpha", type=float, default=0.01,
                   help="the evidence bar's family-wise false-alarm rate (a window of 4 failures cannot reach 1%%)")
    p.add_argument("--model-home", default=os.environ.get("MOLT_TEST_MODEL_HOME", str(ROOT / ".molt" / "test-models")))
    return p.parse_args()


class World:
    """The gateway over SmolLM2, its store and registry, and the agents as its clients."""

    def __init__(self, work: Path, model_dir: Path, threads: int):
        from molt.backends import LocalBackend
        from molt.capture import Recorder
        from molt.control.memory import MemoryStore, RetrievalHarness
        from molt.control.versions import VersionRegistry
        from molt.gateway import Gateway, GatewayConfig, create_app
        from molt.gateway.binding import GatewayBinding
        from molt.gateway.loopback import ServerThread
        from molt.store import Store

        self.store = Store.open(work / "store", auto_compact=False)
        self.recorder = Recorder(self.store, spool_dir=work / "spool", fsync="never")
        self.backend = LocalBackend(model_path=model_dir, threads=threads)
        self.gateway = Gateway([self.backend], recorder=self.recorder, store=self.store,
                               harness=RetrievalHarness(MemoryStore(self.store)),
                               config=GatewayConfig(health_interval_s=0, backend_timeout_s=600))
        self.registry = VersionRegistry(self.store)
        self.binding = GatewayBinding(self.gateway, self.registry, model=self.backend.model)
        self._server = ServerThread(create_app(self.gateway), name="bench-evolve-gateway", start_timeout_s=600)
        self.url = self._server.__enter__().url
        self.http = httpx.Client(base_url=self.url, timeout=120)

    def agent(self, family: dict[str, Any]) -> Agent:
        return Agent(self.url + "/v1", agent=family["agent"], system=family["system"], tools=family["tools"],
                     functions=family["functions"], max_tokens=28)

    def reward(self, tid: str, ok: bool, correction: str | None, verdict: str | None = None) -> None:
        if verdict is not None:  # a consumer that checks every answer: a verifier's outcome, with its reason
            body = {"trajectory_id": tid, "value": 1.0 if ok else 0.0, "source": "verifier",
                    **({} if ok else {"reason": verdict})}
        else:
            body = ({"trajectory_id": tid, "value": 1.0, "source": "user_feedback"} if ok or correction is None else
                    {"trajectory_id": tid, "value": 0.0, "source": "user_correction", "reason": correction})
        self.http.post("/v1/molt/rewards/trajectory", json=body).raise_for_status()

    def flush(self) -> None:
        assert self.recorder.flush(timeout=300, deliver=True)

    def close(self) -> None:
        self.http.close()
        self._server.__exit__(None, None, None)
        self.recorder.close()
        self.store.close()


def fresh_rate(world: World, family: dict[str, Any], n: int) -> tuple[float, str]:
    world.binding.sync()
    agent = world.agent(family)
    qs = family["after"][:n]
    wins, version = 0, ""
    for q in qs:
        answer, _, version = agent.ask(q)
        wins += _ok(family, q, answer)
    return wins / len(qs), version


def hand_rate(model_dir: Path, family: dict[str, Any], parts_change: dict[str, Any], n: int, threads: int) -> float:
    """Fresh traffic with a context change applied by hand (the ground truth's measurement): the same
    agent loop's first request, with the change applied by the gateway's harness code."""
    from molt.backends import LocalBackend
    from molt.harness import ToolRewrite
    from molt.replay import Overrides, ReplayAgent

    backend = LocalBackend(model_path=model_dir, threads=threads)
    change = dict(parts_change)
    if "tool_rewrites" in change:
        change["tool_rewrites"] = {k: ToolRewrite(**v) for k, v in change["tool_rewrites"].items()}

    async def run() -> float:
        pol = ReplayAgent(backend, Overrides(**change))
        wins = 0
        for q in family["after"][:n]:
            msgs: list[dict[str, Any]] = [{"role": "system", "content": family["system"]},
                                          {"role": "user", "content": q}]
            d = await pol.decide(msgs, family["tools"], {"temperature": 0, "max_tokens": 28})
            wins += _ok(family, q, d.text or "")
        await backend.aclose()
        return wins / n

    return asyncio.run(run())


def window(world: World, family: dict[str, Any], asks: int, pii: bool) -> list[bool]:
    agent = world.agent(family)
    results = []
    for i, q in enumerate(family["before"][:asks]):
        answer, tid, _ = agent.ask(q)
        ok = _ok(family, q, answer)
        results.append(ok)
        if family is CAMP:
            world.reward(tid, ok, None, verdict=family["verdict"])
            continue
        if family is LIBRARY:
            name, email = PEOPLE[i % len(PEOPLE)]
            corr = f"Hello, this is {name}. {family['fact']} You can reach me at {email}." if pii else family["fact"]
        elif family is MARINA:
            corr = family["fact"]
        else:
            corr = f"The answer is {_expected(family, q)}."
        world.reward(tid, ok, None if ok else corr)
    for q in OTHER:
        agent.ask(q)
    return results


def _timed_backend(model_dir: Path, threads: int) -> Any:
    """The local SmolLM2 backend, counting each chat call's CPU-seconds (process time: the model's
    threads included) as a reflection (the reflector's system prompt) or a replay call."""
    from molt.backends import LocalBackend

    class Timed(LocalBackend):
        spent: dict[str, list[float]]

        async def chat(self, request: Any) -> Any:
            c0 = time.process_time()
            try:
                return await super().chat(request)
            finally:
                first = (request.messages or [{}])[0]
                text = first.get("content") if isinstance(first, dict) else getattr(first, "content", "")
                tag = "reflector" if str(text or "").startswith("You improve an AI agent") else "replay"
                got = self.spent.setdefault(tag, [0, 0.0])
                got[0] += 1
                got[1] += time.process_time() - c0

    b = Timed(model_path=model_dir, threads=threads)
    b.spent = {}
    return b


def _tried(c: dict[str, Any]) -> str:
    """One candidate of the decision record, as the bench prints it: kind, what it was, what replay found."""
    r = (c.get("evidence") or {}).get("replay") or {}
    found = (f"rejected: {c['rejected'][:100]}" if c.get("rejected") else
             f"replay {r['success_delta']:+.2f}" if r.get("success_delta") is not None else "not replayed")
    return f"{c.get('kind')}: {(c.get('description') or '')[:90]} -> {found}"


def plane_cycle(store: Any, model_dir: Path, family: dict[str, Any], threads: int, reflector: bool,
                asks: int, alpha: float, reflector_tokens: int = 160) -> dict[str, Any]:
    from molt.control.embed import default_embedder
    from molt.control.plane import ControlPlane, PlaneSettings
    from molt.control.reflector import Reflector
    from molt.control.versions import AgentConfig, ModelPart

    for name in ("events", "rewards"):  # what the gateway's recorder wrote since this handle last read
        store.table(name).checkout_latest()
    backend = _timed_backend(model_dir, threads)
    refl = (Reflector(backend=backend, max_tokens=reflector_tokens, timeout_s=900, max_candidates=3)
            if reflector else None)
    asked: list[str] = []
    # The gateway's own store (what it promotes, the gateway serves), or a copy of it.
    # The window is small (``asks`` failures of one tenant): a gap that context changes were tried on
    # and did not fix is large enough for weights at that size here (the default, 12, is for real windows).
    # With the reflector every candidate is replayed (replay_all), to say how many of its candidates work.
    plane = ControlPlane(store, backend, base_parts=AgentConfig(model=ModelPart(base=backend.model)),
                         settings=PlaneSettings(promote_directly=True, replay_sample=4, regression_sample=3,
                                                min_weight_cluster=max(2, asks - 1), alpha=alpha,
                                                replay_all=reflector),
                         reflector=refl, trainer=lambda t, a, c: asked.append(a) or "bench-request")
    # One-time loads (a serving plane loads them once per process): the model, the embedder, the redactor.
    c0 = time.process_time()
    asyncio.run(backend.start())
    default_embedder().embed(["warm up"])
    plane.redactor.redact("warm up Jane Doe")
    load_cpu = time.process_time() - c0
    c0, w0 = time.process_time(), time.perf_counter()
    res = plane.run_cycle("default", family["agent"])
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    rec = res.record
    calls = sum((c.get("evidence") or {}).get("replay", {}).get("model_calls") or 0
                for c in rec.candidates + rec.rejected)
    mine = [c for c in rec.candidates + rec.rejected if (c.get("payload") or {}).get("source") == "reflector"]

    def clears(c: dict[str, Any], bar: float) -> bool:
        r = (c.get("evidence") or {}).get("replay") or {}
        ci = r.get("success_delta_ci")
        return not c.get("rejected") and (r.get("success_delta") or 0) >= bar and bool(ci) and ci[0] > 0

    out = {"choice": res.choice, "reason": rec.reason, "cpu_s": cpu, "wall_s": wall, "load_cpu_s": load_cpu,
           "replay_model_calls": calls, "spent": {k: list(v) for k, v in backend.spent.items()},
           "chosen": res.chosen.description if res.chosen else None,
           "source": (res.chosen.payload.get("source", "template") if res.chosen else None),
           "reflector": dict(refl.usage) if refl else None,
           "reflector_valid": len(mine),
           "reflector_replayed": sum(1 for c in mine if ((c.get("evidence") or {}).get("replay") or {}).get("scored")),
           "reflector_clears": sum(clears(c, plane.settings.min_gain) for c in mine),
           "reflector_sufficient": sum(clears(c, plane.settings.sufficient_gain) for c in mine),
           "reflector_kinds": [c.get("kind") for c in mine],
           "reflector_rejected": [r["rejected"][:90] for r in rec.rejected if r.get("kind") == "reflection"],
           "tried": [_tried(c) for c in rec.candidates + rec.rejected if c.get("kind") != "reflection"],
           "notes": [f"{cl.get('key')} ({cl.get('size')} failure(s)): {n}"
                     for cl in rec.signals.get("clusters", []) for n in (cl.get("notes") or [])]}
    asyncio.run(backend.aclose())
    return out


def weight_only(model_dir: Path, families: list[dict[str, Any]], asks: int, steps: int, k: int, fresh: int,
                threads: int, work: Path) -> dict[str, Any]:
    """GRPO + LoRA on every family's failing prompts at once, as a weight-only evolution loop would (one
    adapter for the agent's whole traffic): K samples per prompt at temperature 1, the verifier's reward,
    one optimiser step, the adapter hot-loaded, each family's fresh traffic re-measured. CPU-seconds are
    this process's (sampling, training and evaluation; evaluation is reported apart)."""
    from molt.backends import LocalBackend
    from molt.backends.base import ChatRequest
    from molt_trainer.algos import AlgoSettings
    from molt_trainer.data import Sample, assign_groups, collate
    from molt_trainer.policy import LoraSettings, PolicyModel
    from molt_trainer.publish import Publisher
    from molt_trainer.step import train_step

    backend = LocalBackend(model_path=model_dir, threads=threads)
    loop = asyncio.new_event_loop()
    c0, w0 = time.process_time(), time.perf_counter()
    eval_cpu = 0.0  # measuring fresh traffic is not the loop's work (the plane's figure leaves it out too)
    policy = PolicyModel.load(LoraSettings(rank=8, micro_batch=8, threads=threads), model_dir)
    # No publish target: the adapter is hot-loaded into this loop's backend below, as a BackendTarget would.
    publisher = Publisher(model="smollm2", out_dir=work / "adapters", targets=[])
    settings = AlgoSettings(advantage="grpo", policy_loss="vanilla")
    model = MODEL
    prompts = [(fam, q) for fam in families for q in fam["before"][:asks]]
    curve: list[tuple[float, float, dict[str, float]]] = []
    trained = 0
    signal_groups = 0

    async def sample(fam: dict[str, Any], q: str, temperature: float, n: int) -> list[Any]:
        msgs = [{"role": "system", "content": fam["system"]}, {"role": "user", "content": q}]
        return [await backend.chat(ChatRequest(model=model, messages=msgs, tools=fam["tools"],
                                               temperature=temperature, max_tokens=28, logprobs=True))
                for _ in range(n)]

    async def evaluate() -> dict[str, float]:
        nonlocal eval_cpu
        e0 = time.process_time()
        rates = {}
        for fam in families:
            wins = 0
            for q in fam["after"][:fresh]:
                r = (await sample(fam, q, 0.0, 1))[0]
                wins += _ok(fam, q, r.choices[0].text or "")
            rates[fam["agent"]] = wins / fresh
        eval_cpu += time.process_time() - e0
        return rates

    def shown(rates: dict[str, float]) -> str:
        return ", ".join(f"{a} {v:.2f}" for a, v in rates.items())

    asyncio.set_event_loop(loop)
    loop.run_until_complete(backend.start())
    load_cpu = time.process_time() - c0
    curve.append((0.0, time.perf_counter() - w0, loop.run_until_complete(evaluate())))
    print(f"weight-only loop: {len(prompts)} prompts of {len(families)} families; before training: "
          f"{shown(curve[-1][2])}", flush=True)
    for step in range(steps):
        samples = []
        for i, (fam, q) in enumerate(prompts):
            for j, r in enumerate(loop.run_until_complete(sample(fam, q, 1.0, k))):
                ch = r.choices[0]
                if not ch.token_ids or not ch.logprobs or not r.prompt_ids:
                    continue
                samples.append(Sample(prompt_ids=list(r.prompt_ids), completion_ids=list(ch.token_ids),
                                      rollout_logprobs=[lp.logprob for lp in ch.logprobs],
                                      reward=float(_ok(fam, q, ch.text or "")), trajectory_id=f"s{step}-{i}-{j}",
                                      event_id=f"e{step}-{i}-{j}", turn=0, turns=1, group=f"p{i}"))
        groups: dict[str, set[float]] = {}
        for s in samples:
            groups.setdefault(s.group, set()).add(s.reward)
        signal_groups += sum(len(v) > 1 for v in groups.values())
        kept, index, rewards = assign_groups(samples)
        batch = collate(kept, rewards, index, pad_id=policy.pad_id)
        train_step(policy, batch, settings)
        trained += batch.num_tokens
        result = publisher.publish(policy, step=step + 1)

        # The adapter is served under its version name.
        model = result.version
        loop.run_until_complete(backend.load_adapter(model, str(result.path)))
        rates = loop.run_until_complete(evaluate())
        curve.append((time.process_time() - c0 - eval_cpu, time.perf_counter() - w0, rates))
        print(f"weight-only step {step + 1}: {batch.num_tokens} trained tokens, groups with signal so far "
              f"{signal_groups}, success {shown(rates)} at {curve[-1][0]:.0f} CPU-s, "
              f"{curve[-1][1]:.0f} s wall", flush=True)
    loop.run_until_complete(backend.aclose())
    loop.close()
    cpu = time.process_time() - c0 - eval_cpu
    return {"cpu_s": cpu, "load_cpu_s": load_cpu, "step_cpu_s": cpu - load_cpu, "eval_cpu_s": eval_cpu,
            "wall_s": time.perf_counter() - w0, "trained_tokens": trained, "prompts": len(prompts),
            "samples_per_step": len(prompts) * k, "groups_with_signal": signal_groups, "curve": curve}


def main() -> None:
    args = _args()
    from molt.backends.model import ensure_policy_model

    model_dir = ensure_policy_model(Path(args.model_home))
    work = Path(tempfile.mkdtemp(prefix="bench-evolve-"))
    print(f"bench_evolve: SmolLM2-135M ({model_dir.name}), {args.asks} failing asks per family + {len(OTHER)} "
          f"others, {args.fresh} fresh asks per measurement, GRPO {args.grpo_steps} step(s) x {args.k} samples "
          f"per prompt, {args.threads} threads; work dir {work}", flush=True)
    t0 = time.perf_counter()
    fams = [FAMILIES[n] for n in args.families.split(",") if n]
    loop_fams = [FAMILIES[n] for n in args.weight_loop_on.split(",") if n] or fams
    if any(f not in fams for f in loop_fams):
        sys.exit("--weight-loop-on names a family that is not among --families")
    run_loop = not args.no_weight_loop
    world = World(work, model_dir, args.threads)
    rows: dict[str, dict[str, Any]] = {}
    wo: dict[str, Any] | None = None
    try:
        for fam in fams:
            w = window(world, fam, args.asks, fam is LIBRARY)
            rows[fam["agent"]] = {"window_success": sum(w) / len(w)}
            print(f"{fam['agent']}: window {sum(w)}/{len(w)} right ({time.perf_counter() - t0:.0f} s)", flush=True)
        world.flush()
        for fam in fams:
            copy = work / f"store-{fam['agent']}-reflector"
            shutil.copytree(work / "store", copy)
            row = rows[fam["agent"]]
            # Ground truth: the cheapest hand-applied change that fixes fresh traffic (+0.5 over none);
            # a family none of them fixes is a weight update.
            row["hand_base"] = hand_rate(model_dir, fam, {}, args.fresh, args.threads)
            row["hand_all"] = {}
            row["truth"], row["hand"] = "weight_update", 0.0
            for kind, change in fam["hand"]:
                row["hand_all"][kind] = got = hand_rate(model_dir, fam, change, args.fresh, args.threads)
                print(f"{fam['agent']}: {kind} by hand {row['hand_base']:.2f} -> {got:.2f} "
                      f"({time.perf_counter() - t0:.0f} s)", flush=True)
                if got >= row["hand_base"] + 0.5:
                    row["truth"], row["hand"] = kind, got
                    break
            else:
                row["hand"] = max(row["hand_all"].values())
            print(f"{fam['agent']}: truth {row['truth']}", flush=True)
            # The plane shares the gateway's store: the gateway serves what it promotes.
            row["templates"] = plane_cycle(world.store, model_dir, fam, args.threads, False, args.asks, args.alpha)
            print(f"{fam['agent']}: templates -> {row['templates']['choice']}: {row['templates']['reason'][:160]} "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)
            row["live_before"] = rows[fam["agent"]]["window_success"]
            if row["templates"]["choice"] not in ("noop", "weight_update", "environment_fault"):
                row["live_after"], row["live_version"] = fresh_rate(world, fam, args.fresh)
                print(f"{fam['agent']}: live {row['live_before']:.2f} -> {row['live_after']:.2f} on fresh asks "
                      f"({time.perf_counter() - t0:.0f} s)", flush=True)
            if not args.no_reflector and fam["agent"] in args.reflector_on.split(","):
                from molt.store import Store

                with Store.open(copy, auto_compact=False) as copied:
                    row["reflector"] = plane_cycle(copied, model_dir, fam, args.threads, True, args.asks, args.alpha,
                                                   args.reflector_tokens)
                print(f"{fam['agent']}: templates + reflector -> {row['reflector']['choice']} "
                      f"({row['reflector']['source']}); reflector {row['reflector']['reflector']}, "
                      f"rejected {row['reflector']['reflector_rejected']} ({time.perf_counter() - t0:.0f} s)",
                      flush=True)
        if run_loop:
            wo = weight_only(model_dir, loop_fams, args.asks, args.grpo_steps, args.k, args.fresh, args.threads, work)
    finally:
        world.close()

    # Every figure below, raw (a summary that fails to print loses nothing).
    print("rows:", orjson.dumps(rows, default=str).decode(), flush=True)
    print("\n== plane's choice vs ground truth (SmolLM2-135M windows, gateway capture, no labels) ==")
    print(f"{'family':18} {'truth (by hand)':28} {'templates':16} {'+reflector':16} {'always-weights':15} always-noop")
    hits = {"templates": 0, "reflector": 0, "weights": 0, "noop": 0}
    for name, r in rows.items():
        refl = r.get("reflector", {}).get("choice", "-")
        hits["templates"] += r["templates"]["choice"] == r["truth"]
        hits["reflector"] += refl == r["truth"]
        hits["weights"] += r["truth"] == "weight_update"
        hits["noop"] += r["truth"] == "noop"
        truth = f"{r['truth']} ({r['hand_base']:.2f}->{r['hand']:.2f})"
        print(f"{name:18} {truth:28} "
              f"{r['templates']['choice']:16} {refl:16} {'weight_update':15} noop")
        if len(r["hand_all"]) > 1 or r["truth"] == "weight_update":
            tried = ", ".join(f"{k} {v:.2f}" for k, v in r["hand_all"].items())
            print(f"{'':18} by hand: none {r['hand_base']:.2f}, {tried}")
    n = len(rows)
    print(f"{'match':18} {'':28} {hits['templates']}/{n:<14} {hits['reflector']}/{n:<14} {hits['weights']}/{n:<13} "
          f"{hits['noop']}/{n}")
    for name, r in rows.items():
        if "live_after" in r:
            print(f"live fix ({name}, templates' {r['templates']['choice']}): {r['live_before']:.2f} on the window -> "
                  f"{r['live_after']:.2f} on {args.fresh} fresh asks (version {r['live_version']})")
        if "reflector" in r:
            x = r["reflector"]
            u = x["reflector"]
            print(f"reflector ({name}, SmolLM2-135M): {u['calls']:.0f} call(s), {u['prompt_tokens']:.0f}+"
                  f"{u['completion_tokens']:.0f} tokens, {u['seconds']:.1f} s, "
                  f"{x['spent'].get('reflector', [0, 0.0])[1]:.1f} CPU-s; candidates valid {x['reflector_valid']} "
                  f"({', '.join(x['reflector_kinds']) or '-'}), replayed {x['reflector_replayed']}, clearing the bar "
                  f"{x['reflector_clears']}, sufficient {x['reflector_sufficient']}; rejected: "
                  f"{x['reflector_rejected']}")
    print("\n== what each cycle tried (the decision record's candidates and the clusters' notes) ==")
    for name, r in rows.items():
        for which in ("templates", "reflector"):
            for line in (r.get(which) or {}).get("tried", []):
                print(f"{name:18} {which:10} {line}")
            for note in (r.get(which) or {}).get("notes", []):
                print(f"{name:18} {which:10} note: {note[:160]}")
    print("\n== where the plane's cycle spends its CPU (warm: model, embedder, redactor loaded once per process) ==")
    for name, r in rows.items():
        for which in ("templates", "reflector"):
            x = r.get(which)
            if not x:
                continue
            sp = x["spent"]
            rep, refl = sp.get("replay", [0, 0.0]), sp.get("reflector", [0, 0.0])
            print(f"{name:18} {which:10} cycle {x['cpu_s']:.1f} CPU-s ({x['wall_s']:.0f} s wall): replay "
                  f"{rep[0]:.0f} model call(s) {rep[1]:.1f} CPU-s, reflector {refl[0]:.0f} call(s) "
                  f"{refl[1]:.1f} CPU-s, "
                  f"the rest {x['cpu_s'] - rep[1] - refl[1]:.1f} CPU-s; one-time loads {x['load_cpu_s']:.1f} CPU-s; "
                  f"-> {x['choice']}")
    if wo is None:
        print("\n(the weight-only loop was not run: --no-weight-loop)")
        print(f"\ntotal {time.perf_counter() - t0:.0f} s")
        shutil.rmtree(work, ignore_errors=True)
        return
    seed_question(rows, wo, loop_fams, args)
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")
    shutil.rmtree(work, ignore_errors=True)


def seed_question(rows: dict[str, dict[str, Any]], wo: dict[str, Any], loop_fams: list[dict[str, Any]],
                  args: argparse.Namespace, target: float = 0.5) -> None:
    """Item 4's figure: Molt's plane (one templates cycle per family) beside the weight-only loop trained on
    the same families' failing prompts together."""
    names = [f["agent"] for f in loop_fams]
    print(f"\n== the seed's question on {len(names)} families ({', '.join(names)}): Molt's plane vs a weight-only "
          "loop (GRPO + LoRA) ==")
    print("CPU-seconds are process time (every thread, the model's included); measuring fresh traffic is left out "
          "of both; one-time loads (models) are shown apart")
    molt_cpu = molt_load = 0.0
    escalated = []
    for name in names:
        r = rows[name]
        t = r["templates"]
        molt_cpu += t["cpu_s"]
        molt_load += t["load_cpu_s"]
        after = r.get("live_after")
        if t["choice"] == "weight_update":
            escalated.append(name)
        shown = (f"{r['live_before']:.2f} on the window -> {after:.2f} fresh" if after is not None else
                 f"{r['hand_base']:.2f} fresh (nothing applied)")
        print(f"Molt plane, {name:16}: 1 cycle, {t['cpu_s']:.1f} CPU-s (+{t['load_cpu_s']:.1f} loads), "
              f"{t['wall_s']:.0f} s wall, 0 trained tokens -> {t['choice']}; success {shown}")
    print(f"Molt plane, all: {molt_cpu:.1f} CPU-s (+{molt_load:.1f} loads), 0 trained tokens; "
          f"escalated to a weight update: {', '.join(escalated) or 'none'} (their training is not in this figure: "
          f"{sum(len(FAMILIES[e]['before'][:args.asks]) for e in escalated)} of the loop's {wo['prompts']} prompts)")
    first, last = wo["curve"][0][2], wo["curve"][-1][2]
    print(f"weight-only loop: {args.grpo_steps} GRPO step(s), {wo['samples_per_step']} samples/step, "
          f"{wo['trained_tokens']} trained tokens, {wo['step_cpu_s']:.1f} CPU-s (+{wo['load_cpu_s']:.1f} loads), "
          f"{wo['wall_s']:.1f} s wall; groups with any reward signal: {wo['groups_with_signal']} of "
          f"{args.grpo_steps * wo['prompts']}")
    for name in names:
        curve = " -> ".join(f"{rates[name]:.2f}@{c:.0f}cpu-s" for c, _, rates in wo["curve"])
        r = rows[name]
        # On the fresh asks both sides are measured on: what the plane applied, else the unchanged agent.
        molt_after = r.get("live_after", r["hand_base"])
        print(f"  {name:16} loop {curve}; Molt {molt_after:.2f}; target {target:.2f}: Molt "
              f"{'reached' if molt_after >= target else 'not reached'}, loop "
              f"{'reached' if last[name] >= target else 'not reached'}"
              f"{'; the loop keeps more than Molt here' if last[name] > molt_after else ''}"
              f"{'; the loop regressed it' if last[name] < first[name] else ''}")
    print(f"ratio: Molt's cycles used {molt_cpu / max(wo['step_cpu_s'], 1e-9):.3f}x the CPU-seconds of "
          f"{args.grpo_steps} weight-only step(s) without loads, "
          f"{(molt_cpu + molt_load) / max(wo['cpu_s'], 1e-9):.3f}x with them (goal <= 0.1x of the loop's compute "
          f"to the target; where the loop has not reached it, the ratio is an upper bound)")


if __name__ == "__main__":
    main()
