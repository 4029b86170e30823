"""Building blocks of ``molt serve`` (the command itself is :mod:`molt.serve`, which adds the console,
the control plane and the trainer): backends by kind, the gateway over a recording store, process tuning.

Examples of the command::

    molt serve --backend stub                                    # no model: tests, demos, benchmarks
    molt serve --backend vllm                                    # starts vLLM (.venv-vllm) on SmolLM2
    molt serve --backend vllm --upstream-url http://127.0.0.1:8100/v1      # an already running vLLM
    molt serve --backend openai --upstream-url https://api.example.com/v1 --model gpt-x
    molt serve --backend openai --upstream-url https://api.example.com/v1 --passthrough responses
    molt serve --backend anthropic --upstream-url https://api.anthropic.com/v1 --model claude-x
    molt serve --backend local --keys keys.toml --host 0.0.0.0 --port 8000

Events go through a Recorder (spool in ``$MOLT_HOME/spool``) into the store (``$MOLT_HOME/store``);
``--no-record`` turns capture off. Without ``--keys`` the gateway is open (every caller is tenant
``default``): keep it on loopback, which is the default.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from molt.backends import BACKENDS, POLICY_MODEL_NAME, BaseBackend, create_backend
from molt.gateway.agents import AgentDirectory
from molt.gateway.router import RoutingTable, VersionSpec
from molt.gateway.service import Gateway, GatewayConfig

__all__ = ["build_gateway", "is_loopback", "make_backend", "tune_process"]

log = logging.getLogger("molt.gateway")


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    if host in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def tune_process() -> None:
    """Process settings for a gateway worker: hand the GIL back to the event loop after 1 ms rather
    than 5 ms, so the Recorder's threads (sealing, store writes) never hold a request up for long."""
    sys.setswitchinterval(0.001)


def make_backend(kind: str, *, model: str | None = None, upstream_url: str | None = None,
                 upstream_key: str | None = None, start_vllm: bool | None = None, max_model_len: int = 1024,
                 timeout_s: float = 120.0, passthrough: tuple[str, ...] = ()) -> BaseBackend:
    """One backend of ``kind`` with the ``molt serve`` options (``passthrough``: the client APIs the
    ``openai`` upstream serves itself, ``("responses",)``; the ``anthropic`` backend always passes
    ``/v1/messages`` through)."""
    BACKENDS.get(kind)  # unknown kinds list the known ones
    if passthrough and kind != "openai":
        raise ValueError(f"--passthrough is for the openai backend (the {kind} backend passes "
                         f"{', '.join(sorted(BACKENDS.get(kind).passthrough)) or 'nothing'} through).")
    if kind == "stub":
        return create_backend("stub", model=model or "stub")
    if kind == "openai":
        return create_backend("openai", base_url=upstream_url, api_key=upstream_key, model=model,
                              timeout_s=timeout_s, passthrough=passthrough)
    if kind == "anthropic":
        return create_backend("anthropic", base_url=upstream_url, api_key=upstream_key, model=model,
                              timeout_s=timeout_s)
    if kind == "local":
        return create_backend("local", model=model or POLICY_MODEL_NAME)
    if kind == "vllm":
        from molt.backends.vllm import VLLMServer

        server = None
        if start_vllm or (start_vllm is None and not upstream_url):
            server = VLLMServer(served_model_name=model or POLICY_MODEL_NAME, max_model_len=max_model_len)
        return create_backend("vllm", base_url=upstream_url, server=server, model=model or POLICY_MODEL_NAME,
                              max_model_len=max_model_len, timeout_s=max(timeout_s, 300.0))
    return create_backend(kind, model=model)


def build_gateway(backend: BaseBackend | list[BaseBackend], *, model: str | None = None, record: bool = True,
                  home: Path | None = None, store_uri: str | None = None, keys: str | None = None,
                  config: GatewayConfig | None = None, capture_process: bool = True,
                  governance: str | None = "default", dedupe_ids: int = 200_000,
                  capture_recycle: int | None = None) -> tuple[Gateway, Any, Any]:
    """A gateway over ``backend`` recording into the store (unless ``record`` is off).

    With ``capture_process`` (the default) events are built, governed and written by a child
    process (:class:`~molt.gateway.capture_process.CaptureProcess`), otherwise by a Recorder in
    this process. ``governance`` is ``"default"`` (the built-in policy), a policy file, or ``None`` (off). Returns
    ``(gateway, recorder, store)``; the caller closes the recorder, then the store, after the
    gateway. ``model`` is the public model name (default: the backend's model name). ``dedupe_ids``:
    the Recorder's (event ids remembered to drop retried records). The Recorder remembers the chain
    heads of as many trajectories as the gateway remembers sessions (``config.max_sessions``).
    ``capture_recycle``: records after which the capture process is replaced by a fresh one (default
    :data:`~molt.gateway.capture_process.RECYCLE_AFTER`; 0: never).
    """
    backends = backend if isinstance(backend, list) else [backend]
    config = config or GatewayConfig()
    home = home or Path(os.environ.get("MOLT_HOME", "~/.molt")).expanduser()
    recorder: Any = None
    store: Any = None
    if record and capture_process:
        from molt.gateway.capture_process import RECYCLE_AFTER, CaptureProcess

        uri = str(store_uri or home / "store")
        recorder = CaptureProcess(uri, home / "spool", governance=governance, dedupe_ids=dedupe_ids,
                                  chain_heads=config.max_sessions,
                                  recycle_after=RECYCLE_AFTER if capture_recycle is None else capture_recycle)
        from molt.store import FOLLOWER_CACHES, Store

        # read side (reward lookups for forgotten calls; molt serve's console and control plane):
        # it follows what the capture process appends
        store = Store.open(uri, auto_compact=False, **FOLLOWER_CACHES)
    elif record:
        from molt.capture import Recorder
        from molt.store import FOLLOWER_CACHES, Store

        store = Store.open(store_uri or home / "store", **FOLLOWER_CACHES)
        pipeline: Any = None
        if governance:  # the Recorder stores each decision with its event (GovernancePipeline.sink_for)
            from molt.governance import GovernancePipeline

            pipeline = GovernancePipeline.from_file(governance)
        recorder = Recorder(store, spool_dir=home / "spool", name="molt-gateway", dedupe_ids=dedupe_ids,
                            chain_heads=config.max_sessions, hook=pipeline)
    keyring = None
    if keys:
        from molt.governance.access import KeyRing

        keyring = KeyRing.from_file(keys)
    public = model or backends[0].model
    table = RoutingTable.single(public, VersionSpec(version=f"{public}@base", backends=tuple(b.name for b in backends)))
    # agents named by fingerprint (no X-Molt-Agent) and their operator-chosen names: `molt agents`
    gw = Gateway(backends, table, recorder=recorder, keyring=keyring, config=config, store=store,
                 agents=AgentDirectory(home, redact=_label_redactor() if record and governance else None))
    return gw, recorder, store


def _label_redactor() -> Callable[[str], str]:
    """The fast redaction pass for agent labels, built on first use (a new agent is rare, and the
    parent process otherwise never loads the detectors: the capture child governs the records)."""
    from functools import cache

    from molt.governance.envelope import redact_name
    from molt.governance.redaction import Redactor

    redactor = cache(Redactor)
    return lambda text: redact_name(redactor(), text)
