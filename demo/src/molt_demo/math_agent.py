"""The demo's third agent, ``molt-math``: a calculator front end whose consumers read the reply's leading
number, served by a real policy model (SmolLM2-135M-Instruct on the gateway's local backend).

Its failures are a capability gap of the model itself: SmolLM2 opens most replies with prose ("To solve
this problem…"), and no prompt or memory changes that reliably — the control plane's replay shows it, so
only a weight update closes the gap (``molt demo --train``).

The verifier is the one of the trainer's learning test (``tests/trainer/loop.py``): the reply must open
with a number. It does not check the number: measured on this model, replies that open with the *correct*
sum are 0–4 % before training and stay there after a few LoRA steps (the 135M model echoes ``"3 + 4"``
rather than computing ``7``), so a correctness reward gives the trainer no signal to learn from in a
demo-sized run. :func:`correct` is reported beside it.

Example::

    from molt_demo.math_agent import math_agent, questions
    answer = math_agent.fn(questions(0, "acme", 1)[0], model, tools=None)
"""

from __future__ import annotations

import random
import re
from typing import Any

import molt

__all__ = ["MATH_AGENT", "MATH_MAX_TOKENS", "MATH_MODEL", "MATH_TASK", "check", "correct", "math_agent", "questions"]

MATH_AGENT = "molt-math"
MATH_MODEL = "smollm2-135m-instruct"
MATH_TASK = "arithmetic"
#: Replies are read for their leading number, so a few tokens are enough (and keep CPU serving fast).
MATH_MAX_TOKENS = 4
_NUMBER = re.compile(r"^\s*(-?\d+)")
_QUESTION = re.compile(r"(\d+)\s*\+\s*(\d+)")


def questions(rnd: int, tenant: str, n: int) -> list[str]:
    """The round's arithmetic questions of one tenant (single-digit sums, seeded per round and tenant)."""
    rng = random.Random(f"math-{tenant}-{rnd}")
    return [f"What is {rng.randint(1, 9)} + {rng.randint(1, 9)}?" for _ in range(n)]


def check(answer: Any, ctx: Any) -> None:
    """The verifier: the reply opens with a number (raises ``AssertionError`` with the reason otherwise)."""
    text = str(answer or "")
    assert _NUMBER.match(text), f"the reply does not open with the number: {text[:40]!r}"


def correct(answer: Any, question: str) -> bool:
    """Whether the reply opens with the correct sum (reported, not rewarded; see the module docstring)."""
    m, q = _NUMBER.match(str(answer or "")), _QUESTION.search(question)
    return bool(m and q and int(m.group(1)) == int(q.group(1)) + int(q.group(2)))


@molt.replayable(name=MATH_AGENT, verifier=check)
def math_agent(input: str, model: Any, tools: Any) -> Any:
    """Ask the model once, sampling at temperature 1.0 (the exploration on-policy RL learns from)."""
    reply = model.chat([{"role": "user", "content": input}], temperature=1.0, max_tokens=MATH_MAX_TOKENS)
    return reply.text
