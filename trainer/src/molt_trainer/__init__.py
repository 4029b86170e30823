"""Molt online RL trainer: samples from recorded token traces, verl's advantages and losses, peft LoRA
updates on CPU or GPU, adapters hot-loaded into vLLM or the local backend and registered as versions.

Names are imported on first use (torch, peft and verl are heavy).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "ADVANTAGES",
    "AlgoSettings",
    "Batch",
    "DataError",
    "GatewayTarget",
    "GovernedSource",
    "LoraSettings",
    "OnlineTrainer",
    "POLICY_LOSSES",
    "PolicyModel",
    "PublishError",
    "Publisher",
    "RequestTrainer",
    "RunSettings",
    "Sample",
    "SloGate",
    "Staleness",
    "StoreSource",
    "TrainedAdapter",
    "TrainerError",
    "TrainerSettings",
    "VLLMTarget",
    "__version__",
    "build_samples",
    "collate",
    "train_step",
]

__version__ = "0.1.0"

_WHERE = {
    "ADVANTAGES": "algos", "POLICY_LOSSES": "algos", "AlgoSettings": "algos",
    "Batch": "data", "Sample": "data", "Staleness": "data", "build_samples": "data", "collate": "data",
    "DataError": "errors", "PublishError": "errors", "TrainerError": "errors",
    "GatewayTarget": "publish", "Publisher": "publish", "VLLMTarget": "publish",
    "GovernedSource": "service", "OnlineTrainer": "service", "StoreSource": "service", "TrainerSettings": "service",
    "RequestTrainer": "requests", "RunSettings": "requests", "SloGate": "requests", "TrainedAdapter": "requests",
    "LoraSettings": "policy", "PolicyModel": "policy", "train_step": "step",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'molt_trainer' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"molt_trainer.{module}"), name)
    globals()[name] = value
    return value
