"""The local backend and the policy model conversion (slow: loads SmolLM2 in-process)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from molt.backends import ChatRequest, CompletionRequest, Delta, LocalBackend, StreamEnd
from molt.backends.model import find_policy_gguf

from .lora import make_lora

pytestmark = pytest.mark.slow


def test_policy_model_directory(policy_model_dir: Path) -> None:
    assert find_policy_gguf().suffix == ".gguf"
    names = {p.name for p in policy_model_dir.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", ".molt-converted"} <= names
    cfg = json.loads((policy_model_dir / "config.json").read_text())
    assert cfg["model_type"] == "llama" and cfg["eos_token_id"] == 2
    tok = json.loads((policy_model_dir / "tokenizer_config.json").read_text())
    assert tok["eos_token"] == "<|im_end|>"


def test_local_backend_tokens_stream_and_lora(policy_model_dir: Path, tmp_path: Path) -> None:
    async def go() -> None:
        b = LocalBackend(model_path=policy_model_dir, model="smollm2")
        await b.start()
        assert b.tokenizer is not None
        req = ChatRequest(model="smollm2", messages=[{"role": "user", "content": "What is 2+2?"}], temperature=0.0,
                          max_tokens=12, logprobs=True, top_logprobs=2)
        r = await b.chat(req)
        c = r.choices[0]
        assert c.token_ids and len(c.token_ids) <= 12 and len(c.logprobs or []) == len(c.token_ids)
        assert b.tokenizer.decode(c.token_ids) == c.text
        assert r.prompt_ids == b.tokenizer.chat_prompt_ids(req.messages, None)
        assert all(lp.logprob <= 0 and lp.top and len(lp.top) == 2 for lp in c.logprobs or [])
        # Greedy: the top alternative is the sampled token.
        assert all(lp.top[0][0] == lp.token for lp in c.logprobs or [] if lp.top)
        items: list[Any] = [x async for x in b.stream_chat(req)]
        deltas = [i for i in items if isinstance(i, Delta)]
        assert "".join(d.text or "" for d in deltas) == c.text
        assert [t for d in deltas for t in d.token_ids or []] == c.token_ids
        assert isinstance(items[-1], StreamEnd) and items[-1].prompt_ids == r.prompt_ids
        done = await b.complete(CompletionRequest(model="smollm2", prompt="The capital of France is",
                                                  max_tokens=3, temperature=0.0))
        assert done.choices[0].finish_reason == "length" and len(done.choices[0].token_ids or []) == 3

        adapter = make_lora(policy_model_dir, tmp_path / "lora")
        await b.load_adapter("smollm2@lora", str(adapter))
        assert await b.models() == ["smollm2", "smollm2@lora"]
        lr = await b.chat(ChatRequest(model="smollm2@lora", messages=req.messages, temperature=0.0, max_tokens=12,
                                      logprobs=True))
        base_lp = [lp.logprob for lp in c.logprobs or []]
        assert [lp.logprob for lp in lr.choices[0].logprobs or []][:1] != base_lp[:1]  # the adapter changes the policy
        again = await b.chat(req)  # and the base model is unchanged
        assert again.choices[0].token_ids == c.token_ids
        assert [lp.logprob for lp in again.choices[0].logprobs or []] == pytest.approx(base_lp, abs=1e-5)

    asyncio.run(go())


def test_adapters_load_and_evict_under_an_lru_bound(policy_model_dir: Path, tmp_path: Path) -> None:
    """Three adapters registered, two resident at most: a request for an evicted adapter loads it again
    (evicting the least recently used one) and is answered by *its* weights, the base model's answers never
    change, and the counts say what happened."""
    async def go() -> None:
        b = LocalBackend(model_path=policy_model_dir, model="smollm2", max_adapters=2)
        await b.start()
        msgs = [{"role": "user", "content": "What is 2+2?"}]

        async def first_logprob(model: str) -> float:
            r = await b.chat(ChatRequest(model=model, messages=msgs, temperature=0.0, max_tokens=1, logprobs=True))
            return (r.choices[0].logprobs or [])[0].logprob

        base = await first_logprob("smollm2")
        for i in range(3):
            await b.load_adapter(f"t{i}", str(make_lora(policy_model_dir, tmp_path / f"lora{i}", seed=i)))
        assert await b.models() == ["smollm2", "t0", "t1", "t2"]  # all three servable
        assert b.resident_adapters() == ["t1", "t2"]               # two resident: t0 was evicted by t2
        assert b.adapter_stats() == {"registered": 3, "resident": 2, "max_adapters": 2, "loads": 3,
                                          "evictions": 1, "hits": 0}
        seen = {}
        # t1 is resident (a hit, now most recent); t0 comes back evicting t2, the least recently used; t2
        # comes back evicting t1; t1 comes back evicting t0
        for name in ("t1", "t0", "t2", "t1"):
            seen.setdefault(name, []).append(await first_logprob(name))
        assert b.resident_adapters() == ["t2", "t1"]
        st = b.adapter_stats()
        assert (st["loads"], st["evictions"], st["hits"]) == (6, 4, 1)
        assert seen["t1"][0] == pytest.approx(seen["t1"][1], abs=1e-5)  # …and a reloaded adapter is the same one
        values = [seen["t0"][0], seen["t1"][0], seen["t2"][0], base]
        assert len({round(v, 4) for v in values}) == 4, values  # each adapter answers with its own weights
        assert await first_logprob("smollm2") == pytest.approx(base, abs=1e-5)  # the base model is untouched
        await b.unload_adapter("t2")
        assert b.resident_adapters() == ["t1"] and "t2" not in await b.models()

    asyncio.run(go())
