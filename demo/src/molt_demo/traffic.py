"""The demo's traffic: who sends it (two tenants, their API keys, the public model name) and what each round
asks (a fixed mix per tenant with every failure kind present every round, plus ``molt-math``'s questions
under ``--train``)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

__all__ = ["KEYS", "MATH_TASK_KEY", "MODEL", "TENANT_KEYS", "Task", "math_module", "math_traffic", "round_traffic"]

MODEL = "desk-model"
KEYS = {"sk-demo-acme": ("acme", "agent_writer"), "sk-demo-globex": ("globex", "agent_writer"),
        "sk-demo-acme-admin": ("acme", "admin"), "sk-demo-globex-admin": ("globex", "admin")}
TENANT_KEYS = {"acme": "sk-demo-acme", "globex": "sk-demo-globex"}
MATH_TASK_KEY = "arithmetic"  # molt_demo.math_agent.MATH_TASK (not imported: the quick demo never loads it)


@dataclass(frozen=True)
class Task:
    tenant: str
    agent: str
    task: str
    input: str
    correction: str | None = None


def round_traffic(rnd: int, per_tenant: int) -> list[Task]:
    """The round's requests: a fixed mix per tenant (every failure kind present every round)."""
    from molt_desk.world import AGENT, FACTS, LEGACY_AGENT, ORDERS

    rng = random.Random(f"demo-{rnd}")
    ids = sorted(ORDERS)
    out: list[Task] = []

    def ticket() -> str:
        return f"(ticket {rng.randrange(10**6)})"

    def refund_q() -> str:
        return f"Please refund order {rng.choice(ids)}. {ticket()}"

    for tenant, agent, fact in (("acme", AGENT, "refund window"), ("globex", LEGACY_AGENT, "warranty period")):
        f = FACTS[fact]
        mix: list[Task] = []
        for i in range(per_tenant):
            kind = i % 6
            if kind == 0:
                mix.append(Task(tenant, agent, "kb_question", f"{rng.choice(f.questions)} {ticket()}", f.text))
            elif kind == 1:
                task = "status_json" if tenant == "acme" else "status"
                mix.append(Task(tenant, agent, task, f"Where is order {rng.choice(ids)}? {ticket()}"))
            elif kind in (2, 5) and tenant == "acme":
                mix.append(Task(tenant, agent, "refund", refund_q()))
            elif kind == 3:
                oid = rng.choice(ids)
                mix.append(Task(tenant, agent, "capability",
                                f"What is the total of order {oid} in cents including 7% tax? {ticket()}"))
            elif kind == 4:
                r = FACTS["returns"]
                mix.append(Task(tenant, agent, "kb_question", f"{rng.choice(r.questions)} {ticket()}"))
            else:
                task = "status" if tenant == "acme" else "kb_question"
                q = (f"Where is order {rng.choice(ids)}? {ticket()}" if tenant == "acme"
                     else f"{rng.choice(f.questions)} {ticket()}")
                mix.append(Task(tenant, agent, task, q, None if tenant == "acme" else f.text))
        out.extend(mix)
    rng.shuffle(out)
    return out


def math_module() -> Any:
    """:mod:`molt_demo.math_agent`, imported only when a run has math traffic (the quick demo never loads it)."""
    from molt_demo import math_agent

    return math_agent


def math_traffic(rnd: int, per_tenant: int) -> list[Task]:
    """The ``molt-math`` agent's questions of the round (none without ``--train``)."""
    if not per_tenant:
        return []
    m = math_module()
    return [Task(t, m.MATH_AGENT, m.MATH_TASK, q) for t in TENANT_KEYS for q in m.questions(rnd, t, per_tenant)]
