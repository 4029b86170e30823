"""Test helper: a tiny random peft LoRA adapter for the SmolLM2 policy (no download, no training)."""

from __future__ import annotations

from pathlib import Path


def make_lora(model_dir: Path, out_dir: Path, *, rank: int = 8, seed: int = 0, scale: float = 0.5) -> Path:
    """Save a LoRA adapter with random (non-zero) weights on q/k/v/o so it visibly changes the model."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    cfg = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                     init_lora_weights=False, lora_dropout=0.0, task_type="CAUSAL_LM")
    model = get_peft_model(base, cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.mul_(scale)
    model.save_pretrained(str(out_dir))
    return out_dir
