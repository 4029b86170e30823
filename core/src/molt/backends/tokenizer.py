"""The policy tokenizer on the gateway side: chat → exact prompt token ids, token ids → text.

The ``vllm`` and ``local`` backends build the prompt tokens here and send them as tokens, so what is
recorded is exactly what the model saw; the completion tokens come back as ids and are decoded here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from molt.backends.chat_format import template_messages
from molt.errors import BackendError

__all__ = ["ModelTokenizer"]


class ModelTokenizer:
    """A Hugging Face tokenizer loaded from a local model directory (never from the hub).

    Args:
        path: the model directory (``ensure_policy_model()`` for the default policy).
        name: what events record as ``TokenTrace.tokenizer`` (default: the directory name).
    """

    def __init__(self, path: str | os.PathLike[str], *, name: str | None = None):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            from transformers import AutoTokenizer
        except ImportError as exc:
            err = BackendError(f"The policy tokenizer needs transformers: {exc}.")
            err.add_note("Install it with: pip install 'transformers<5.11'")
            raise err from exc
        self.path = Path(path)
        self.name = name or self.path.name
        self.hf: Any = AutoTokenizer.from_pretrained(str(self.path))
        template = self.hf.chat_template or ""
        #: Whether the chat template renders a ``tools`` list itself (else the Hermes prompt is used).
        self.native_tools = "tools" in template
        self.eos_ids: set[int] = {i for i in (self.hf.eos_token_id,) if i is not None}
        self.special_ids: set[int] = set(self.hf.all_special_ids)
        self._piece_cache: dict[int, str] = {}

    def chat_prompt(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        """The chat template applied to ``messages`` (and ``tools``), assistant turn opened."""
        msgs = template_messages(messages, tools, native_tools=self.native_tools)
        kwargs: dict[str, Any] = {"tools": tools} if (tools and self.native_tools) else {}
        text: str = self.hf.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, **kwargs)
        return text

    def chat_prompt_ids(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
        """Token ids of :meth:`chat_prompt` (special tokens in the template are parsed as such)."""
        return self.encode(self.chat_prompt(messages, tools))

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without added BOS/EOS (templates carry their own)."""
        return list(self.hf.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int], *, skip_special: bool = True) -> str:
        """Text of ``ids``; special tokens (EOS, …) are dropped by default, as servers do."""
        return str(self.hf.decode(ids, skip_special_tokens=skip_special))

    def piece(self, token_id: int) -> str:
        """The text of one token, as logprob listings show it."""
        s = self._piece_cache.get(token_id)
        if s is None:
            s = self._piece_cache[token_id] = str(self.hf.decode([token_id], skip_special_tokens=False))
        return s
