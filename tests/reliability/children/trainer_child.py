"""Child process of the trainer-crash check: an online trainer killed in the middle of a step.

Usage: ``python trainer_child.py STORE GATEWAY_URL MODEL_DIR ADAPTERS``. The trainer reads the
governance training queue of tenant ``acme`` from the store (which the parent's gateway keeps
writing), publishes to the parent's gateway, and talks on stdin/stdout:

1. it trains until its first step is published, then prints ``step 1`` and waits for a line on stdin;
2. it arms the fault — the process SIGKILLs itself in the second micro-batch of its next step, after
   the first one's gradients accumulated — and keeps ticking until that kills it (``step 2`` is
   printed only if the fault did not fire, which fails the parent's check).

The settings are those of ``test_trainer_fault.py``: 8 samples a step, 4 a micro-batch.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any


def main() -> None:
    from molt.governance import GovernancePolicy, Principal, TrainingQueue
    from molt.governance.access import Role
    from molt.store import Store
    from molt_trainer.algos import AlgoSettings
    from molt_trainer.policy import LoraSettings, PolicyModel
    from molt_trainer.publish import GatewayTarget, Publisher
    from molt_trainer.service import GovernedSource, OnlineTrainer, TrainerSettings

    store_uri, url, model_dir, adapters = sys.argv[1:5]
    settings = TrainerSettings(algo=AlgoSettings(), lora=LoraSettings(rank=2, micro_batch=4), min_samples=8,
                               max_batch=8, poll_s=0.05, throttle_s=0.05)
    policy = GovernancePolicy.model_validate(
        {"name": "trainer-fault", "tenants": {"acme": {"training": {"opt_in": True, "require_consent": False}}}})
    store = Store.open(store_uri, auto_compact=False)
    pub = Publisher(model="stub", out_dir=adapters, store=store, tenant_id="acme", retries=1,
                    targets=[GatewayTarget(url, "sk-platform-operator", "stub", weight=0.1)])
    queue = TrainingQueue(store, policy, Principal("acme", Role.TRAINER))
    trainer = OnlineTrainer(PolicyModel.load(settings.lora, model_dir), pub, GovernedSource(queue), settings,
                            base_version="stub")
    deadline = time.monotonic() + 300
    while trainer.step < 1 and time.monotonic() < deadline:
        if trainer.tick() is None:
            time.sleep(0.05)
    print(f"step {trainer.step}", flush=True)
    sys.stdin.readline()

    calls = {"n": 0}
    forward = trainer.policy.token_logprobs

    def dying(batch: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return forward(batch)

    trainer.policy.token_logprobs = dying  # type: ignore[method-assign]
    deadline = time.monotonic() + 300
    while trainer.step < 2 and time.monotonic() < deadline:
        if trainer.tick() is None:
            time.sleep(0.05)
    print(f"step {trainer.step}", flush=True)


if __name__ == "__main__":
    main()
