"""The online RL loop on CPU, end to end: a gateway serving SmolLM2 (local backend or vLLM), a scripted
agent with a programmatic verifier, the trainer reading the recorded trajectories and publishing each
adapter back through the gateway's admin API.

The task: answer arithmetic questions with the number first ("7", not "The answer is 7"). SmolLM2
usually opens with prose, so the format reward starts low and is learnable in a few steps.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

KEYS = {"sk-acme-writer": ("acme", "agent_writer"), "sk-acme-admin": ("acme", "admin"),
        "sk-evals-writer": ("evals", "agent_writer"), "sk-platform-operator": ("platform", "operator")}
ADMIN = "sk-platform-operator"  # loading an adapter into the shared backend is the platform operator's


def train_prompts(seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [f"What is {rng.randint(1, 20)} + {rng.randint(1, 20)}?" for _ in range(200)]


def heldout_prompts() -> list[str]:
    # other numbers and other wording than training: never trained on
    return [f"How much is {a} plus {b}?" for a, b in [(31, 4), (12, 27), (8, 45), (23, 23), (50, 6), (17, 38),
                                                       (9, 9), (40, 13), (26, 5), (33, 11), (14, 48), (7, 36)]]


def verify(text: str | None) -> float:
    """1.0 when the reply opens with a number (the required format), else 0.0."""
    return 1.0 if re.match(r"^\s*-?\d", text or "") else 0.0


@dataclass
class Agent:
    """A scripted agent: asks the gateway, verifies, and rewards each trajectory."""

    url: str
    model: str
    key: str = "sk-acme-writer"
    max_tokens: int = 3
    versions: list[str] = field(default_factory=list)

    def ask(self, prompt: str, *, temperature: float = 1.0, seed: int | None = None) -> tuple[str, str, str]:
        """(text, trajectory id, served policy version)."""
        body: dict[str, Any] = {"model": self.model, "messages": [{"role": "user", "content": prompt}],
                                "max_tokens": self.max_tokens, "temperature": temperature, "logprobs": True}
        if seed is not None:
            body["seed"] = seed
        r = httpx.post(self.url + "/v1/chat/completions", json=body, timeout=300,
                       headers={"authorization": f"Bearer {self.key}", "x-molt-session": f"s-{time.time_ns()}"})
        r.raise_for_status()
        version = r.headers["x-molt-policy-version"]
        self.versions.append(version)
        return r.json()["choices"][0]["message"]["content"] or "", r.headers["x-molt-trajectory"], version

    def reward(self, trajectory_id: str, value: float) -> None:
        r = httpx.post(self.url + "/v1/molt/rewards/trajectory", timeout=30,
                       headers={"authorization": f"Bearer {self.key}"},
                       json={"trajectory_id": trajectory_id, "value": value, "source": "verifier"})
        r.raise_for_status()

    def episode(self, prompts: list[str], k: int) -> float:
        """``k`` sampled answers per prompt, each its own trajectory, rewarded; returns the success rate."""
        scores = []
        for p in prompts:
            for _ in range(k):
                text, tid, _ = self.ask(p)
                score = verify(text)
                self.reward(tid, score)
                scores.append(score)
        return sum(scores) / len(scores)

    def evaluate(self, prompts: list[str], k: int) -> float:
        """Held-out success: ``k`` samples per prompt (no rewards: these are never trained on)."""
        agent = Agent(self.url, self.model, key="sk-evals-writer", max_tokens=self.max_tokens)
        scores = [verify(agent.ask(p, seed=1000 * i + j)[0]) for i, p in enumerate(prompts) for j in range(k)]
        self.versions += agent.versions
        return sum(scores) / len(scores)


def plot_curve(path: Path, steps: list[int], train: list[float], evals: list[tuple[int, float]], title: str) -> None:
    """The learning curve as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(steps, train, label="training rollouts (on-policy)", alpha=0.6)
    ax.plot([s for s, _ in evals], [v for _, v in evals], "o-", label="held-out prompts")
    ax.set_xlabel("online step")
    ax.set_ylabel("success rate")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title)
    ax.legend(loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def wait(pred: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(0.05)
