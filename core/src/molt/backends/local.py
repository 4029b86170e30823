"""The ``local`` backend: the policy model in-process with transformers, for tiny runs without vLLM.

Generation is a plain sampling loop with a KV cache, so every sampled token and its log-probability
are known exactly and tokens stream as they are sampled. Log-probabilities are those of the raw
model distribution (before temperature and top-p), the same convention as vLLM's default, so
events from both backends mean the same thing. One generation runs at a time (CPU-bound), in a
worker thread so the event loop stays free. LoRA adapters load through peft and are chosen per
request by model name.

Adapters are registered by name (:meth:`LocalBackend.load_adapter`) and at most ``max_adapters`` of them
are resident in the model at once: a request for a registered adapter that is not resident loads it
from its directory, evicting the least recently used one (each resident LoRA costs memory and a
little time on every forward pass through peft's adapter dispatch, so a server with one adapter per
tenant keeps the busy ones). An evicted adapter stays servable; only its next request pays the load.
:meth:`LocalBackend.adapter_stats` counts loads, evictions and hits.

Example::

    backend = LocalBackend()                      # the SmolLM2 policy from ensure_policy_model()
    await backend.start()
"""

from __future__ import annotations

import asyncio
import os
import threading
import warnings
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, ClassVar

from molt.backends.base import (
    BackendCapabilities,
    BaseBackend,
    ChatRequest,
    Choice,
    CompletionRequest,
    Delta,
    Result,
    StreamEnd,
    StreamItem,
    TokenCounts,
    TokenLogprob,
    ToolCallDelta,
)
from molt.backends.chat_format import parse_tool_calls
from molt.backends.model import POLICY_MODEL_NAME, ensure_policy_model
from molt.backends.tokenizer import ModelTokenizer
from molt.errors import BackendError, BackendUnavailable, InvalidRequest

__all__ = ["LocalBackend"]

_DONE = object()


class LocalBackend(BaseBackend):
    """The policy model in this process.

    Args:
        model_path: a transformers model directory (default: the converted SmolLM2 policy).
        model: the name it is served as (default ``smollm2-135m-instruct``).
        max_new_tokens: the cap when a request gives no ``max_tokens`` (default 256).
        max_context: prompt plus completion tokens allowed (default 2,048).
        threads: torch CPU threads (default: torch's choice).
        device: where the model runs (default: the first CUDA device when there is one, else the CPU);
            float32 on the CPU, the model's own dtype (bfloat16 / float16 checkpoints) on a GPU.
        max_adapters: LoRA adapters resident in the model at once (default 8; the least recently used
            is evicted to load another, see the module docstring).
    """

    kind: ClassVar[str] = "local"
    capabilities = BackendCapabilities(token_ids=True, logprobs=True, streaming=True, tools=True, lora=True)

    def __init__(self, name: str | None = None, *, model_path: str | os.PathLike[str] | None = None,
                 model: str = POLICY_MODEL_NAME, max_new_tokens: int = 256, max_context: int = 2048,
                 threads: int | None = None, device: str | None = None, max_adapters: int = 8):
        super().__init__(name, model=model)
        if max_adapters < 1:
            raise ValueError(f"max_adapters must be at least 1, got {max_adapters}.")
        self.max_adapters = max_adapters
        self.device = device
        self.model_path = Path(model_path) if model_path is not None else None
        self.max_new_tokens = max_new_tokens
        self.max_context = max_context
        self.threads = threads
        self.tokenizer: ModelTokenizer | None = None
        self._model: Any = None
        self._adapters: dict[str, str] = {}  # every registered adapter: name → directory
        self._resident: OrderedDict[str, None] = OrderedDict()  # loaded in the model, least recently used first
        self._adapter_counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._start_lock = asyncio.Lock()

    async def start(self) -> None:
        """Load the tokenizer and the model (in a worker thread)."""
        async with self._start_lock:
            if self._model is None:
                await asyncio.to_thread(self._load)

    def _load(self) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        if self.threads:
            torch.set_num_threads(self.threads)
        path = self.model_path or ensure_policy_model()
        self.model_path = path
        self.tokenizer = ModelTokenizer(path, name=self.model)
        self.device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
        # CPU matmuls are fast in float32 only; on a GPU the checkpoint's dtype ("auto") is what it was made for.
        dtype: Any = torch.float32 if self.device == "cpu" else "auto"
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype)
        model.to(self.device)  # type: ignore[arg-type]  # transformers types .to as its own wrapper
        model.eval()  # type: ignore[no-untyped-call]
        self._model = model

    # ------------------------------------------------------------------ sampling

    def _sample(self, prompt_ids: list[int], *, max_new: int, temperature: float, top_p: float,
                seed: int | None, adapter: str | None, top_k_logprobs: int,
                on_token: Callable[[int, float, list[tuple[int, float]]], bool]) -> str:
        """Sample until EOS, ``max_new`` tokens, or ``on_token`` returns False. Returns the finish reason."""
        import torch

        assert self.tokenizer is not None
        model = self._model
        dev = self._model.device
        gen = torch.Generator(device=dev).manual_seed(seed) if seed is not None else None
        with self._lock, torch.inference_mode():
            if adapter is not None:
                self._make_resident(adapter)
                model.enable_adapters()
                model.set_adapter(adapter)
            elif self._resident:
                model.disable_adapters()
            ids = torch.tensor([prompt_ids], device=dev)
            past = None
            for _ in range(max_new):
                out = model(input_ids=ids, past_key_values=past, use_cache=True)
                past = out.past_key_values
                logits = out.logits[0, -1].float()                       # (V,)
                logp = torch.log_softmax(logits, dim=-1)                 # raw model distribution
                if temperature <= 0.0:
                    tok = int(torch.argmax(logits))
                else:
                    probs = torch.softmax(logits / temperature, dim=-1)
                    if top_p < 1.0:
                        sorted_p, order = torch.sort(probs, descending=True)
                        keep = torch.cumsum(sorted_p, 0) - sorted_p < top_p
                        probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_p[keep])
                    tok = int(torch.multinomial(probs, 1, generator=gen))
                top: list[tuple[int, float]] = []
                if top_k_logprobs:
                    vals, idx = torch.topk(logp, top_k_logprobs)
                    top = list(zip(idx.tolist(), vals.tolist(), strict=True))
                if not on_token(tok, float(logp[tok]), top):
                    return "stop"
                if tok in self.tokenizer.eos_ids:
                    return "stop"
                ids = torch.tensor([[tok]], device=dev)
            return "length"

    def _run(self, prompt_ids: list[int], req: ChatRequest | CompletionRequest, index: int,
             emit: Callable[[int, float, list[tuple[int, float]]], None] | None = None) -> Choice:
        """One choice: sample, apply stop strings, return token ids and logprobs."""
        assert self.tokenizer is not None
        tk = self.tokenizer
        max_new = req.max_tokens or self.max_new_tokens
        if len(prompt_ids) + max_new > self.max_context:
            max_new = self.max_context - len(prompt_ids)
            if max_new <= 0:
                raise InvalidRequest(f"The prompt has {len(prompt_ids)} tokens; this backend allows "
                                     f"{self.max_context} in all. Shorten the conversation.", param="messages")
        ids: list[int] = []
        lps: list[TokenLogprob] = []
        stop = req.stop or []
        want_top = (req.top_logprobs or 0) if isinstance(req, ChatRequest) else (req.logprobs or 0)
        state = {"stopped": False}

        def on_token(tok: int, lp: float, top: list[tuple[int, float]]) -> bool:
            ids.append(tok)
            lps.append(TokenLogprob(token=tk.piece(tok), logprob=lp, token_id=tok,
                                    top=[(tk.piece(t), v) for t, v in top] or None))
            if emit is not None:
                emit(tok, lp, top)
            if stop and any(s in tk.decode(ids) for s in stop):
                state["stopped"] = True
                return False
            return True

        seed = None if req.seed is None else req.seed + index
        finish = self._sample(prompt_ids, max_new=max_new, temperature=1.0 if req.temperature is None else
                              req.temperature, top_p=1.0 if req.top_p is None else req.top_p, seed=seed,
                              adapter=self._adapter_for(req.model), top_k_logprobs=want_top, on_token=on_token)
        text = tk.decode(ids)
        if state["stopped"]:
            cut = min(i for i in (text.find(s) for s in stop) if i >= 0)
            text = text[:cut]
        return Choice(index=index, text=text, finish_reason=finish, token_ids=ids, logprobs=lps)

    def _adapter_for(self, model: str) -> str | None:
        if model in (self.model, "", None) or model not in self._adapters:
            return None
        return model

    def _make_resident(self, name: str) -> None:
        """Load adapter ``name`` into the model if it is not there, evicting the least recently used one
        beyond ``max_adapters``; mark it most recently used. Called with ``_lock`` held."""
        if name in self._resident:
            self._resident.move_to_end(name)
            self._adapter_counts["hits"] += 1
            return
        while len(self._resident) >= self.max_adapters:
            old, _ = self._resident.popitem(last=False)
            self._model.delete_adapter(old)
            self._adapter_counts["evictions"] += 1
        path = self._adapters[name]
        try:
            with warnings.catch_warnings():  # several adapters in one model is what this backend is for
                warnings.filterwarnings("ignore", message="Already found a `peft_config`")
                self._model.load_adapter(path, adapter_name=name)
        except Exception as exc:
            raise BackendError(f"Loading the adapter {name!r} from {path} failed: {exc}.", backend=self.name) from exc
        self._resident[name] = None
        self._adapter_counts["loads"] += 1

    def adapter_stats(self) -> dict[str, int]:
        """Registered and resident adapters, and the loads, evictions and hits (requests served by an
        adapter that was already resident) so far."""
        c = self._adapter_counts
        return {"registered": len(self._adapters), "resident": len(self._resident), "max_adapters": self.max_adapters,
                "loads": c["loads"], "evictions": c["evictions"], "hits": c["hits"]}

    def resident_adapters(self) -> list[str]:
        """The adapters loaded in the model now, least recently used first."""
        return list(self._resident)

    def _check_model(self, model: str) -> None:
        if self._model is None:
            raise BackendUnavailable(f"The local backend {self.name!r} has not started; call start().",
                                     backend=self.name)

    # ------------------------------------------------------------------ the backend protocol

    async def chat(self, request: ChatRequest) -> Result:
        """Sample ``n`` answers; tool calls are parsed from the Hermes ``<tool_call>`` convention."""
        self._check_model(request.model)
        assert self.tokenizer is not None
        prompt_ids = self.tokenizer.chat_prompt_ids(request.messages, request.tools)
        names = {t["function"]["name"] for t in request.tools} if request.tools else None
        choices = []
        for i in range(request.n):
            c = await asyncio.to_thread(self._run, prompt_ids, request, i)
            if names and c.text:
                c.text, c.tool_calls = parse_tool_calls(c.text, names)
                if c.tool_calls:
                    c.finish_reason = "tool_calls"
            choices.append(c)
        return Result(choices=choices, model=request.model, prompt_ids=prompt_ids, tokenizer=self.tokenizer.name,
                      usage=TokenCounts(len(prompt_ids), sum(len(c.token_ids or ()) for c in choices)))

    async def stream_chat(self, request: ChatRequest) -> AsyncIterator[StreamItem]:
        """Stream tokens as they are sampled (with tools, the answer is parsed, then sent whole)."""
        if request.tools or request.n != 1:
            result = await self.chat(request)
            for c in result.choices:
                calls = [ToolCallDelta(index=i, id=t.id, name=t.name, arguments=t.arguments)
                         for i, t in enumerate(c.tool_calls or [])] or None
                yield Delta(index=c.index, text=c.text, tool_calls=calls, token_ids=c.token_ids,
                            logprobs=c.logprobs, finish_reason=c.finish_reason)
            yield StreamEnd(model=result.model, usage=result.usage, prompt_ids=result.prompt_ids,
                            tokenizer=result.tokenizer)
            return
        self._check_model(request.model)
        assert self.tokenizer is not None
        prompt_ids = self.tokenizer.chat_prompt_ids(request.messages, request.tools)
        async for item in self._stream_tokens(prompt_ids, request):
            yield item

    async def _stream_tokens(self, prompt_ids: list[int], request: ChatRequest | CompletionRequest,
                             ) -> AsyncIterator[StreamItem]:
        assert self.tokenizer is not None
        tk = self.tokenizer
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()

        def emit(tok: int, lp: float, top: list[tuple[int, float]]) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, (tok, lp, top))

        task = loop.run_in_executor(None, self._run, prompt_ids, request, 0, emit)
        task.add_done_callback(lambda _: loop.call_soon_threadsafe(queue.put_nowait, _DONE))
        ids: list[int] = []
        sent = ""
        while True:
            item = await queue.get()
            if item is _DONE:
                break
            tok, lp, top = item
            ids.append(tok)
            text = tk.decode(ids)
            if text.endswith("\ufffd"):
                continue  # an incomplete UTF-8 sequence: wait for the next token
            piece, sent = text[len(sent):], text
            yield Delta(index=0, text=piece or None, token_ids=[tok], logprobs=[TokenLogprob(
                token=tk.piece(tok), logprob=lp, token_id=tok, top=[(tk.piece(t), v) for t, v in top] or None)])
        choice = await task  # re-raises a sampling error
        yield Delta(index=0, finish_reason=choice.finish_reason)
        yield StreamEnd(model=request.model, prompt_ids=prompt_ids, tokenizer=tk.name,
                        usage=TokenCounts(len(prompt_ids), len(choice.token_ids or ())))

    async def complete(self, request: CompletionRequest) -> Result:
        """Continue a text or token prompt."""
        self._check_model(request.model)
        assert self.tokenizer is not None
        prompt_ids = request.prompt if isinstance(request.prompt, list) else self.tokenizer.encode(request.prompt)
        choices = [await asyncio.to_thread(self._run, prompt_ids, request, i) for i in range(request.n)]
        return Result(choices=choices, model=request.model, prompt_ids=prompt_ids, tokenizer=self.tokenizer.name,
                      usage=TokenCounts(len(prompt_ids), sum(len(c.token_ids or ()) for c in choices)))

    async def stream_complete(self, request: CompletionRequest) -> AsyncIterator[StreamItem]:
        """Stream a continuation token by token."""
        self._check_model(request.model)
        assert self.tokenizer is not None
        prompt_ids = request.prompt if isinstance(request.prompt, list) else self.tokenizer.encode(request.prompt)
        async for item in self._stream_tokens(prompt_ids, request):
            yield item

    async def models(self) -> list[str]:
        """The base model and registered adapters (resident or not: each is servable)."""
        return [self.model, *self._adapters]

    async def health(self) -> bool:
        """Healthy once the model is loaded."""
        return self._model is not None

    async def load_adapter(self, name: str, path: str) -> None:
        """Register a peft LoRA adapter, served as model ``name``, and load it now (evicting the least
        recently used adapter when ``max_adapters`` are resident), so a broken adapter is refused here
        rather than at its first request. Loading a name again replaces its weights."""
        self._check_model(name)

        def load() -> None:
            with self._lock:
                previous = self._adapters.get(name)
                if name in self._resident:  # new weights under a known name: drop the old ones first
                    del self._resident[name]
                    self._model.delete_adapter(name)
                self._adapters[name] = path
                try:
                    self._make_resident(name)
                except BackendError:
                    if previous is None:
                        del self._adapters[name]
                    else:
                        self._adapters[name] = previous
                    raise

        await asyncio.to_thread(load)

    async def unload_adapter(self, name: str) -> None:
        """Forget adapter ``name`` (its directory is left alone): from now on the name is unknown here, like
        any name this backend never loaded."""
        def unload() -> None:
            with self._lock:
                self._adapters.pop(name, None)
                if name in self._resident:
                    del self._resident[name]
                    self._model.delete_adapter(name)

        await asyncio.to_thread(unload)
