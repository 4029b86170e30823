"""``molt serve``: the whole embedded stack in one process.

What starts, in one process (plus the capture child and, with ``--vllm``, a supervised vLLM server):

- the OpenAI-compatible **gateway** (``/v1``), recording every call into the LanceDB **store** under
  ``$MOLT_HOME`` through the capture process, with the **governance** pipeline on that path: the
  built-in policy unless ``--governance`` names a policy file, so PII is redacted before anything is
  spooled or stored; ``--no-governance`` turns it off (the banner and ``molt doctor`` say so in red);
- the **web console** at ``/console`` (:mod:`molt.console`), tenant-scoped by the API key it is
  opened with;
- the **control plane** every ``--evolve-every`` seconds (``molt.control.scheduler.run_scheduled``) when
  it is installed, with ``--plane-setting KEY=VALUE`` thresholds. It learns which calls failed from the
  reward endpoints (``/v1/molt/rewards/*``: a client's verifier, tests, user feedback and corrections)
  and judges the answers it replays with ``--verifier TASK=SPEC`` / ``--agent-verifier AGENT=SPEC``
  (``contains:…``, ``regex:…``, ``exact:…`` or an importable ``module:function``) — without one, only a
  user's correction (or a judge model) can say whether a context fix works;
- the **weight loop** with ``--train`` (``molt_trainer`` installed): the control plane's weight-update
  decision for a failure cluster of ``tenant/agent`` starts a training run on that agent's traffic
  (:class:`molt_trainer.requests.RequestTrainer` through the plane's hook
  :class:`molt.control.weights.WeightLoop`); the adapter is loaded into this gateway's backends and
  becomes a canary version of that agent, under its routing key, which the plane promotes or aborts on
  the canary delta. Runs read only what the governance training queue finds eligible
  (``--no-governance --train`` refuses to start unless ``--train-on-ungoverned-data`` says to read the
  store as recorded), and each step waits while the gateway's p99 is over the serving budget
  (``--latency-slo-ms``; by default twice the p99 measured while no run trains). On a start, the
  adapters of live and canary versions are loaded again, so a restart serves what the registry says;
- a supervised **vLLM** server with ``--vllm`` (same as ``--backend vllm`` without ``--upstream-url``).

Keys: ``--keys`` (or ``$MOLT_KEYS``) is the tenant key file for the gateway and the console. Without
one the gateway stays open on loopback (every caller is tenant ``default``), and the console gets
its own admin key for tenant ``default``: created on the first start, stored hashed in
``$MOLT_HOME/console-keys.toml`` and printed once (delete that file for a new key).

Faults counted while serving (store write failures and the spool backlog, quarantined records,
backend failures, a background part that stopped with an error, trainer crashes) are written every
``STATUS_INTERVAL_S`` seconds to ``$MOLT_HOME/status/molt-serve-<pid>.json``, which ``molt doctor``
shows (:class:`molt.status.StatusReporter`).

Ctrl-C (SIGINT) or SIGTERM stops serving, stops the control plane and the trainer, then closes the
capture process (every acknowledged event reaches the store) and the store.

One module at ~620 lines because it is one idea: the composition root of ``molt serve``, where each part
is started, wired to the others and stopped in order (split, the start and stop orders would be in files
that must change together).

Examples::

    molt serve                                          # stub model: try the console and the API
    molt serve --vllm --train --governance policy.yaml  # SmolLM2 on vLLM, evolution, weight updates trained
                                                        # on what the policy's training.opt_in tenants allow
    molt serve --backend vllm --model-path /models/qwen2.5-1.5b-instruct --train   # any HF causal LM directory
    molt serve --backend openai --upstream-url https://api.example.com/v1 --model gpt-x --keys keys.toml
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from molt.gateway.capture_process import MIN_RECYCLE_AFTER, RECYCLE_AFTER
from molt.gateway.cli import build_gateway, is_loopback, make_backend, tune_process
from molt.gateway.service import GatewayConfig
from molt.governance.access import KeyRing, Role, generate_key, hash_key

__all__ = ["Stack", "console_keyring", "plane_settings", "register_verifiers", "serve_command", "size_lora_slots"]

log = logging.getLogger("molt.serve")

#: The console's own key file under ``$MOLT_HOME`` (used when no tenant key file is given).
CONSOLE_KEYS = "console-keys.toml"
#: How often (s) the gateway binding looks for version changes made by other processes.
VERSION_POLL_S = 5.0
#: How often (s) the fault counters are written for ``molt doctor``.
STATUS_INTERVAL_S = 5.0
#: How long (s) the server keeps an idle keep-alive connection. uvicorn's default, 5 s, is what httpx
#: (and so the OpenAI SDK) keeps one on the client side: a client that reuses a connection idle for
#: just under 5 s can send its request as the server closes it, and gets a reset instead of an answer
#: (the likely cause of a soak's one ReadError in 390,000 requests: its pool leaves a connection idle
#: for seconds). The server must keep connections longer than its clients do; 75 s also outlasts the
#: 60 s idle timeout of common load balancers in front of it.
KEEP_ALIVE_S = 75


def _recycle_count(value: int) -> int:
    if 0 < value < MIN_RECYCLE_AFTER:
        raise typer.BadParameter(f"must be 0 (never) or at least {MIN_RECYCLE_AFTER:,}, got {value}.")
    return value


def register_verifiers(task_specs: list[str], agent_specs: list[str]) -> list[str]:
    """Register ``NAME=SPEC`` verifiers for the plane's replays in this process: by task label
    (``TASK_VERIFIERS``: traffic sent with ``X-Molt-Task: NAME``) and by agent (``AGENT_VERIFIERS``:
    ``X-Molt-Agent: NAME``, no task label needed). Returns what was registered, for the banner.

    Without a verifier the plane judges a replayed answer only by the users' corrections (or a judge
    model), so a cluster that nobody corrects can neither confirm a context fix nor rule it out; the
    rewards of live traffic still come from the reward endpoints (``/v1/molt/rewards/*``)."""
    from molt.replay.verifiers import register_named_verifiers

    try:
        return register_named_verifiers(task_specs, agent_specs)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc


def plane_settings(items: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs of :class:`molt.control.plane.PlaneSettings` (values read as JSON, else as text)."""
    import orjson

    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"{item!r}: expected KEY=VALUE (e.g. canary_min=6).")
        try:
            out[key.strip()] = orjson.loads(raw)
        except orjson.JSONDecodeError:
            out[key.strip()] = raw
    return out


def console_keyring(home: Path, *, create: bool) -> tuple[KeyRing | None, str | None]:
    """The console key ring in ``home`` and, when this call created it, the new admin key in clear.

    With ``create`` and no key file yet, writes one admin key of tenant ``default`` (hashed, mode
    0600). Returns ``(None, None)`` when there is no file and ``create`` is off.
    """
    path = home / CONSOLE_KEYS
    if path.exists():
        return KeyRing.from_file(path), None
    if not create:
        return None, None
    key = generate_key("sk-molt-console-")
    home.mkdir(parents=True, exist_ok=True)
    text = ("# Console admin key made by `molt serve` (tenant default). Only its digest is kept here;\n"
            "# delete this file to have the next `molt serve` make and print a new key.\n"
            f'[[keys]]\nkey_sha256 = "{hash_key(key)}"\ntenant = "default"\nrole = "admin"\n'
            'name = "console admin"\n')
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return KeyRing.from_file(path), key


@dataclass
class Stack:
    """The parts ``molt serve`` started, and how to stop them in order."""

    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    status: dict[str, str] = field(default_factory=dict)
    #: Background parts by name (``trainer`` once it is built), for the status file.
    parts: dict[str, Any] = field(default_factory=dict)
    #: Background parts that stopped with an error, by name.
    failures: Counter[str] = field(default_factory=Counter)

    def spawn(self, name: str, target: Callable[[], Any]) -> None:
        """Run ``target`` on a daemon thread that logs and counts (never raises) its failure."""
        def run() -> None:
            try:
                target()
            except Exception:
                self.failures[name] += 1
                log.exception("%s stopped with an error; the gateway keeps serving.", name)

        t = threading.Thread(target=run, name=f"molt-{name}", daemon=True)
        self.threads.append(t)
        t.start()

    def fault_status(self) -> dict[str, dict[str, Any]]:
        """Fault counters of the background parts (a :data:`molt.gateway.metrics.StatusSource`)."""
        faults: dict[str, Any] = {f"{name}.stopped_with_error": n for name, n in self.failures.items()}
        state: dict[str, Any] = {}
        for part in self.parts.values():  # the weight loop and molt_trainer's trainer (core never imports it)
            got = part.status() if hasattr(part, "status") else part.fault_status()
            faults.update(got["faults"])
            state.update(got["state"])
        return {"faults": faults, "state": state}

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Ask every background part to stop and wait for it (up to ``timeout_s`` each). Parts with a
        ``close`` (the weight loop, which closes its trainer) are closed first: a training run in flight is
        abandoned at its next step, so neither the plane's cycle waiting for it nor the interpreter's exit
        (which joins the trainer's worker thread) waits for the whole run."""
        self.stop.set()
        for name, part in self.parts.items():
            close = getattr(part, "close", None)
            if callable(close):
                try:
                    close()
                except Exception:
                    log.exception("closing %s failed; stopping the rest.", name)
        for t in self.threads:
            t.join(timeout_s)
            if t.is_alive():
                log.warning("%s did not stop within %.0f s; leaving it (daemon thread).", t.name, timeout_s)


def _bind_versions(stack: Stack, store: Any, gateway: Any, model: str) -> Any:
    """The one version registry of this process, bound to the
    gateway's router when the binding is installed, so the live version of each agent is what it
    serves and a rollback (console, plane) moves its sessions at once."""
    from molt.control.memory import MemoryStore, RetrievalHarness
    from molt.control.versions import EVENTS_TABLE, VERSIONS_TABLE, VersionRegistry
    from molt.gateway.binding import GatewayBinding
    from molt.harness import StaticHarness

    registry = VersionRegistry(store)
    binding = GatewayBinding(gateway, registry, model=model)
    if isinstance(gateway.harness, StaticHarness):
        # A version holds the plane's memories and skills by id: the gateway retrieves them per request
        # (without this it would serve their harness text only, never an inserted memory).
        gateway.harness = RetrievalHarness(MemoryStore(store))
    try:
        bound = binding.sync()
    except Exception:  # serve the base route rather than not at all; the next change rebinds
        log.exception("Binding the live policy versions to the gateway failed.")
        stack.status["versions"] = "binding to the gateway FAILED (see the log); serving the base route"
        return registry
    stack.status["versions"] = f"live versions bound to the gateway ({len(bound)} agents)"

    def follow() -> None:
        # Changes made in this process reach the binding through the registry's listeners; this
        # picks up those of other processes (`molt versions rollback` in another terminal): new
        # sessions get the new live version, running ones finish on theirs.
        while not stack.stop.wait(VERSION_POLL_S):
            try:
                # a table handle reads the version it last saw until told otherwise
                for name in (VERSIONS_TABLE, EVENTS_TABLE):
                    store.table(name).checkout_latest()
                for key, weights in binding.sync().items():
                    log.info("Rebound %s to %s (changed by another process).", key, weights)
            except Exception:
                log.exception("Following policy-version changes failed; retrying in %.0f s.", VERSION_POLL_S)

    stack.spawn("version-sync", follow)
    return registry


def _start_control(stack: Stack, store: Any, every_s: float, replay_backend: Callable[[], Any],
                   registry: Any = None, weights: Any = None, settings: dict[str, Any] | None = None) -> None:
    if every_s <= 0:
        stack.status["control plane"] = "off (--evolve-every 0)"
        return

    def run() -> None:  # imported here: the plane's imports take seconds, serving starts meanwhile
        from molt.control.plane import ControlPlane, PlaneSettings
        from molt.control.scheduler import run_scheduled
        from molt.control.versions import AgentConfig, ModelPart

        # Its own backend object: the gateway's lives on the server's event loop, the plane replays
        # candidates from this thread.
        be = replay_backend()
        # Agents seen in the traffic get a first version (the served model, no harness changes).
        plane = ControlPlane(store, be, base_parts=AgentConfig(model=ModelPart(base=be.model)),
                             trainer=weights, settings=PlaneSettings(**(settings or {})))
        if registry is not None:  # one registry: its listeners (the gateway binding) see the plane's changes
            plane.registry = registry
        run_scheduled(store, stack.stop, every_s, plane=plane)

    stack.spawn("control-plane", run)
    stack.status["control plane"] = f"every {every_s:g} s" + (
        "; " + ", ".join(f"{k}={v}" for k, v in settings.items()) if settings else "")


def _start_trainer(stack: Stack, store: Any, *, gateway_url: str, admin_key: str | None, model: str,
                   model_path: Path | None, governance: str | None, ungoverned: bool, registry: Any,
                   latency_slo_ms: float | None, home: Path, gateway_sources: list[Any]) -> Any:
    """The weight loop (the plane's weight-update hook) with its trainer, or ``None`` when it cannot run."""
    # The trainer is an optional distribution that core never imports statically; the composition
    # root loads it by name, like the cli's mounted commands.
    try:
        requests = importlib.import_module("molt_trainer.requests")
    except ImportError as exc:
        stack.status["trainer"] = f"not installed ({exc.name}); pip install molt-trainer"
        return None
    import httpx

    from molt.control import weights as wl

    # Saved and registered by the trainer; loaded into the serving backends by the loop (after its checks).
    trainer = requests.gateway_trainer(store, gateway_url=gateway_url, admin_key=admin_key, model=model,
                                       model_path=model_path, out_dir=home / "adapters", slo_ms=latency_slo_ms)
    gate = trainer.gate
    loop = wl.WeightLoop(store, trainer, read=wl.training_reader(store, governance, ungoverned=ungoverned),
                         load=wl.gateway_loader(gateway_url, admin_key, model), share=_sharing(governance, ungoverned))
    stack.parts["trainer"] = trainer
    stack.parts["weights"] = loop

    def watch() -> None:
        # The serving budget's baseline is read while no run trains; a restart reloads the adapters that
        # live and canary versions name (the backends start without them).
        restored = False
        while not stack.stop.wait(5.0):
            if not restored and registry is not None:
                try:
                    httpx.get(gateway_url + "/v1/models", timeout=5.0,
                              headers={"authorization": f"Bearer {admin_key}"} if admin_key else {})
                except Exception:
                    continue  # not serving yet
                got = wl.restore_adapters(registry, lambda n, p, t: loop.load(n, p, t) if loop.load else None)
                restored = True
                if got:
                    log.info("Loaded the adapters of live and canary versions again: %s", ", ".join(got))
            if not trainer.busy():
                gate.observe_idle()

    stack.spawn("weights-watch", watch)
    gateway_sources.append(trainer.status)
    gateway_sources.append(loop.status)
    budget = f"{latency_slo_ms:g} ms" if latency_slo_ms else "2 x the p99 while not training"
    stack.status["trainer"] = (
        "weight updates the plane decides, trained on " + ("[red]UNGOVERNED data (--train-on-ungoverned-data)[/red]"
                                                            if ungoverned else "governed, eligible data only")
        + f"; steps wait while serving p99 > {budget}; adapters in {home / 'adapters'}")
    return loop


def size_lora_slots(be: Any, governance: str | None) -> str | None:
    """A vLLM server this process starts gets ``--max-loras`` sized from the tenants whose data the
    governance policy lets train (each can have adapters of its own, :func:`molt.backends.vllm.lora_slots`)
    and twice that many adapters kept in CPU memory (the rest reloaded from disk, least recently used
    first out); returns the summary line, or ``None`` when no server is started here."""
    server = getattr(be, "server", None)
    if server is None or not hasattr(server, "max_loras") or not getattr(server, "enable_lora", False):
        return None
    from molt.backends.vllm import lora_slots
    from molt.governance import load_policy_file

    policy = load_policy_file(governance) if governance else None
    named = policy.training_tenants() if policy is not None else []
    others = policy is not None and policy.for_tenant(None).training.opt_in
    tenants = len(named) + (1 if others or not named else 0)
    server.max_loras = lora_slots(tenants)
    server.max_cpu_loras = 2 * server.max_loras
    who = ", ".join(named) if named else "none named"
    return (f"--max-loras {server.max_loras}, --max-cpu-loras {server.max_cpu_loras} (tenants trained on: {who}"
            f"{'; the defaults opt the others in' if others else ''})")


def _sharing(governance: str | None, ungoverned: bool) -> Any:
    """Shared adapters for the tenants whose policies opt into sharing with each other (none without
    governance: ungoverned data is never pooled across tenants)."""
    if ungoverned:
        return None
    from molt.control.weights import sharing_group
    from molt.governance import load_policy_file

    return sharing_group(load_policy_file(governance))


async def _to_console(request: Any) -> Any:
    from starlette.responses import RedirectResponse

    return RedirectResponse("/console/trajectories", 303)


def _summary(rows: list[tuple[str, str]], err: Console) -> None:
    t = Table(title="molt serve", show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column(overflow="fold")
    for k, v in rows:
        t.add_row(k, v)
    err.print(t)


def _backend(kind: str, *, model: str | None, model_path: Path | None, **kw: Any) -> Any:
    """``make_backend`` plus ``--model-path`` for the backends that serve a model directory (its name,
    unless ``--model`` says otherwise, is the directory's)."""
    if model_path is None or kind not in ("local", "vllm"):
        return make_backend(kind, model=model, **kw)
    from molt.backends import create_backend

    name = model or model_path.name
    if kind == "local":
        return create_backend("local", model=name, model_path=model_path)
    from molt.backends.vllm import VLLMServer

    start = kw.pop("start_vllm", None)
    url = kw.pop("upstream_url", None)
    kw.pop("upstream_key", None)
    kw.pop("passthrough", None)
    server = VLLMServer(model_path, served_model_name=name, max_model_len=kw["max_model_len"]) \
        if start or (start is None and not url) else None
    return create_backend("vllm", base_url=url, server=server, model=name, tokenizer_path=model_path,
                          max_model_len=kw["max_model_len"], timeout_s=max(kw["timeout_s"], 300.0))


def serve_command(
    backend: Annotated[str, typer.Option(help="Backend kind: vllm, openai, anthropic, local or stub.")] = "stub",
    host: Annotated[str, typer.Option(help="Address to bind (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind.")] = 8000,
    model: Annotated[str | None, typer.Option(help="Public model name (default: the backend's).")] = None,
    upstream_url: Annotated[str | None, typer.Option(
        help="openai/anthropic/vllm: the upstream API root with /v1 (vllm: omit to start a server).")] = None,
    upstream_key: Annotated[str | None, typer.Option(
        help="openai/anthropic: upstream API key (default $MOLT_UPSTREAM_API_KEY).")] = None,
    passthrough: Annotated[list[str] | None, typer.Option(
        help="openai: a client API the upstream serves itself, relayed as it is instead of translated to "
             "chat: 'responses' (its /v1/responses). The anthropic backend always passes /v1/messages "
             "through.")] = None,
    keys: Annotated[str | None, typer.Option(help="TOML file of tenant API keys (default $MOLT_KEYS).")] = None,
    store: Annotated[str | None, typer.Option("--store", help="Store URI (default $MOLT_HOME/store).")] = None,
    record: Annotated[bool, typer.Option(help="Record every call into the store.")] = True,
    governance: Annotated[str, typer.Option(
        help="Governance policy for recorded events and training: 'default' (the built-in policy) or a "
             "policy file.")] = "default",
    no_governance: Annotated[bool, typer.Option(
        "--no-governance", help="Record WITHOUT governance: calls are stored as made, PII included, and "
                                "--train refuses them.")] = False,
    capture_process: Annotated[bool, typer.Option(
        help="Build and write events in a separate process (keeps recording off the serving core).")] = True,
    max_body_bytes: Annotated[int, typer.Option(help="Largest request body accepted.")] = 8 << 20,
    backend_timeout: Annotated[float, typer.Option(help="Seconds allowed for a backend answer / chunk.")] = 120.0,
    max_sessions: Annotated[int, typer.Option(
        min=100, help="Sessions / trajectories / answers remembered for linking calls.")] = 200_000,
    session_idle_s: Annotated[float, typer.Option(
        min=1, help="Seconds an unused session, trajectory or answer is remembered (orphaned runs go).")] = 1800.0,
    dedupe_ids: Annotated[int, typer.Option(
        min=1000, help="Event ids the capture remembers to drop a retried record of the same event.")] = 200_000,
    capture_recycle: Annotated[int, typer.Option(
        min=0, callback=_recycle_count,
        help="Replace the capture process with a fresh one after this many records (0, the default: "
             "never; a safety net: it runs flat without). It hands its spool over, nothing is lost.")] = RECYCLE_AFTER,
    max_model_len: Annotated[int, typer.Option(help="vllm: context length of a started server.")] = 1024,
    log_level: Annotated[str, typer.Option(help="Log level.")] = "info",
    keep_alive_s: Annotated[int, typer.Option(
        min=1, help="Seconds an idle client connection is kept open (longer than clients keep theirs).")
                            ] = KEEP_ALIVE_S,
    console: Annotated[bool, typer.Option(help="Serve the web console at /console.")] = True,
    evolve_every: Annotated[float, typer.Option(
        "--evolve-every", min=0, help="Run the control plane every SECONDS (0: off).")] = 300.0,
    train: Annotated[bool, typer.Option(
        help="Train the weight updates the control plane decides (needs molt-trainer and the plane).")] = False,
    latency_slo_ms: Annotated[float | None, typer.Option(
        "--latency-slo-ms", min=1, help="--train: the gateway p99 (ms) above which training steps wait (default: "
                                        "2 x the p99 measured while no run trains).")] = None,
    model_path: Annotated[Path | None, typer.Option(
        "--model-path", help="local/vllm: the HF causal LM directory to serve and train (default: the packaged "
                             "SmolLM2-135M-Instruct); its tokenizer and chat template are used.")] = None,
    train_on_ungoverned_data: Annotated[bool, typer.Option(
        "--train-on-ungoverned-data",
        help="--train: read trajectories straight from the store, unredacted and without eligibility checks "
             "(development only).")] = False,
    vllm: Annotated[bool, typer.Option(
        help="Serve through a supervised vLLM server (the .venv-vllm environment); same as --backend vllm.")] = False,
    verifier: Annotated[list[str] | None, typer.Option(
        "--verifier", help="TASK=SPEC (repeatable): judges the plane's replays of traffic labelled TASK "
                           "(X-Molt-Task). SPEC: contains:TEXT, regex:PATTERN, exact:TEXT or module:function "
                           "(fn(answer[, context]): False / AssertionError fails, a number is the reward).")] = None,
    agent_verifier: Annotated[list[str] | None, typer.Option(
        "--agent-verifier", help="AGENT=SPEC (repeatable): the same for an agent's traffic (X-Molt-Agent), "
                                 "with or without task labels.")] = None,
    plane_setting: Annotated[list[str] | None, typer.Option(
        "--plane-setting", help="KEY=VALUE (repeatable): a control-plane threshold (molt.control.plane."
                                "PlaneSettings, e.g. canary_min=6, replay_sample=8).")] = None,
    ack_after_durable: Annotated[bool, typer.Option(
        "--ack-after-durable", help="Answer a call only once its record is in the capture process's fsynced spool "
                                    "(a kill -9 then loses no answered call; costs latency, see bench_gateway). "
                                    "Without it calls are answered first and recorded milliseconds later.")] = False,
    strict_health: Annotated[bool, typer.Option(
        "--strict-health", help="/health answers 503 (not 200 with status degraded) while capture drops records, "
                                "spool writes fail or records back up.")] = False,
    approval: Annotated[str | None, typer.Option(
        "--approval", help="What the control plane may put live without an operator: auto (everything, the "
                           "default), context (memory, skill, harness and tool-schema changes wait as proposals "
                           "in the console's Proposals page and `molt versions proposals`), all (every new "
                           "version waits).")] = None,
) -> None:
    """Serve the whole stack: gateway, governance, store, console, control plane, trainer, vLLM."""
    import uvicorn

    from molt.gateway.app import create_app
    from molt.store import FOLLOWER_CACHES, Store

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    err = Console(stderr=True)
    home = Path(os.environ.get("MOLT_HOME", "~/.molt")).expanduser()
    keys = keys or os.environ.get("MOLT_KEYS") or None
    if vllm:
        backend = "vllm"
    policy: str | None = None if no_governance else governance
    if train and policy is None and not train_on_ungoverned_data:
        # before anything starts: training must never read raw data by accident
        typer.secho("molt serve: --train with --no-governance would train on ungoverned data (stored as recorded, "
                    "PII included, no eligibility checks), so training was not started. Drop --no-governance "
                    "to record and train on governed data, or add --train-on-ungoverned-data to train on the "
                    "store as it is.", fg="red", err=True)
        raise typer.Exit(2)
    if record and policy is None:
        typer.secho("WARNING: governance is OFF (--no-governance): every call is stored as made, PII included. "
                    "Drop --no-governance to redact before anything is stored.", fg="red", err=True)
    if not keys and not is_loopback(host):
        typer.secho(f"WARNING: the gateway listens on {host}, beyond this machine, WITHOUT API keys: anyone who "
                    f"can reach it can use the model and write training data as tenant 'default'. Pass "
                    f"--keys keys.toml (see molt.governance.access) or bind 127.0.0.1.", fg="red", err=True)
    if model_path is not None and backend not in ("local", "vllm"):
        typer.secho("molt serve: --model-path is for the local and vllm backends.", fg="red", err=True)
        raise typer.Exit(2)
    settings = plane_settings(plane_setting or [])
    if approval is not None:
        if approval not in ("auto", "context", "all"):
            raise typer.BadParameter(f"give auto, context or all; got {approval!r}", param_hint="--approval")
        settings["approval"] = approval
    if settings:
        from molt.control.plane import PlaneSettings

        try:  # a typo fails the start, not the plane's thread later
            PlaneSettings(**settings)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--plane-setting") from exc
    judged = register_verifiers(verifier or [], agent_verifier or [])
    try:
        be = _backend(backend, model=model, model_path=model_path, upstream_url=upstream_url,
                      upstream_key=upstream_key, max_model_len=max_model_len, timeout_s=backend_timeout,
                      passthrough=tuple(passthrough or ()))
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--passthrough / --upstream-url") from exc
    lora_row = size_lora_slots(be, policy)
    config = GatewayConfig(max_body_bytes=max_body_bytes, backend_timeout_s=backend_timeout,
                           max_sessions=max_sessions, session_idle_s=session_idle_s, strict_health=strict_health,
                           ack_after_durable=ack_after_durable)
    gw, recorder, st = build_gateway(be, model=model, record=record, store_uri=store, keys=keys, config=config,
                                     capture_process=capture_process, governance=policy, dedupe_ids=dedupe_ids,
                                     capture_recycle=capture_recycle)
    # One store object for the console, the control plane and the trainer: what one writes (a
    # rollback, a new version) the others read at once; the console also checks out what the capture
    # process wrote.
    shared = st if st is not None else Store.open(store or home / "store", auto_compact=False, **FOLLOWER_CACHES)
    app = create_app(gw)
    base = f"http://{host}:{port}"
    public = gw.router.models()[0]
    rows: list[tuple[str, str]] = [("gateway", f"{base}/v1  ({backend} backend, model {public!r})"),
                                   ("store", shared.uri),
                                   ("recording", "off" if not recorder else f"on, governance {policy}" if policy
                                    else "[bold red]on, governance OFF (--no-governance): PII is stored[/bold red]"),
                                   ("health", gw.capture_health.describe(strict_health)),
                                   ("acknowledgement", "after the record is in the fsynced spool (--ack-after-durable)"
                                    if ack_after_durable else "before the record is durable: a kill -9 loses the "
                                    "calls answered in its last milliseconds (--ack-after-durable to wait)")]
    if lora_row:
        rows.append(("LoRA slots", lora_row))
    stack = Stack()
    new_key = None
    registry = _bind_versions(stack, shared, gw, public)
    if console:
        from molt.console import create_console_app

        rings: list[KeyRing] = [gw.keyring] if gw.keyring is not None else []
        ring, new_key = console_keyring(home, create=gw.keyring is None)
        if ring is not None:
            rings.append(ring)
        app.mount("/console", create_console_app(shared, rings, versions=registry))
        app.add_route("/", _to_console, include_in_schema=False)  # a browser opening the server lands there
        rows.append(("console", f"{base}/console"))
        if new_key:
            rows.append(("console admin key", f"printed below, once (tenant default); only its digest is kept in "
                                              f"{home / CONSOLE_KEYS}"))
        elif ring is not None:
            rows.append(("console keys", f"{home / CONSOLE_KEYS} (its admin key was printed when it was made)"))
    rows.append(("API keys", keys if keys else "none: the gateway is open to this machine (tenant default)"))
    server = getattr(be, "server", None)

    def replay_backend() -> Any:
        if server is not None:  # the supervised vLLM server, reached over HTTP like the gateway does
            return _backend("vllm", model=public, model_path=model_path, upstream_url=server.base_url,
                            start_vllm=False, max_model_len=max_model_len, timeout_s=backend_timeout)
        return _backend(backend, model=model, model_path=model_path, upstream_url=upstream_url,
                        upstream_key=upstream_key, max_model_len=max_model_len, timeout_s=backend_timeout)

    weights = None
    if train:
        trainer_key = None
        if gw.keyring is not None:  # the weight loop loads adapters through the admin API (the operator's)
            trainer_key = generate_key("sk-molt-trainer-")
            gw.keyring.add(tenant="platform", role=Role.OPERATOR, key=trainer_key, name="molt serve trainer")
        if evolve_every <= 0:
            stack.status["trainer"] = "[red]off: --train trains what the control plane decides (--evolve-every 0)[/red]"
        else:
            weights = _start_trainer(stack, shared, gateway_url=base, admin_key=trainer_key, model=public,
                                     model_path=model_path or getattr(be, "model_path", None), governance=policy,
                                     ungoverned=train_on_ungoverned_data, registry=registry,
                                     latency_slo_ms=latency_slo_ms, home=home, gateway_sources=gw.status_sources)
    elif evolve_every > 0:
        from molt.control.weight_queue import WeightQueue

        # No trainer in this process: the plane's weight updates are queued in the store for a trainer
        # service of their own (molt.control.weight_queue), which canaries each adapter for the plane to judge.
        weights = WeightQueue(shared)
        stack.status["trainer"] = ("not in this process (--train runs one): weight updates are queued for "
                                   "`molt-trainer serve --plane-requests`")
    else:
        stack.status["trainer"] = "off (--train to run it)"
    _start_control(stack, shared, evolve_every, replay_backend, registry, weights, settings)
    stack.status["verifiers"] = "; ".join(judged) if judged else (
        "none: the plane judges replays by the users' corrections (--verifier / --agent-verifier to add one)")
    stack.status["vLLM"] = (f"supervised at {server.base_url}" if server is not None
                            else f"upstream {upstream_url}" if backend == "vllm" else "not used")
    rows.extend(stack.status.items())
    from molt.gateway.metrics import gateway_status
    from molt.status import StatusReporter

    governed = {"state": {"governance": (policy or "OFF (--no-governance)") if recorder else "not recording"}}
    # What `molt evolve run` replays with by default: the model this gateway serves (never its key).
    served = {"state": {"backend.kind": backend, "backend.model": be.model, "backend.public_model": public,
                        "backend.url": f"{base}/v1", "backend.model_path": str(model_path) if model_path else None,
                        "backend.upstream_url": (server.base_url if server is not None else upstream_url)}}
    reporter = StatusReporter(home, "molt-serve", {"gateway": lambda: gateway_status(gw), "stack": stack.fault_status,
                                                   "governance": lambda: governed, "backend": lambda: served},
                              interval_s=STATUS_INTERVAL_S).start()
    rows.append(("status", f"{reporter.path} (molt doctor shows it)"))
    tune_process()
    _summary(rows, err)
    if new_key:  # on a line of its own, never wrapped, so it can be copied
        typer.echo(f"console admin key (shown once): {new_key}", err=True)
    typer.echo(f"molt gateway: {backend} backend, model {public!r}, {base}/v1 "
               f"(recording {'on' if recorder else 'off'}, governance {policy or 'OFF'}, "
               f"{'API keys' if keys else 'open, loopback'})", err=True)
    try:
        # uvicorn handles SIGINT / SIGTERM: it stops accepting, finishes in-flight requests (their
        # after-response recording included) and returns here.
        # HeaderTimeoutProtocol: uvicorn's protocol plus a header read timeout (slow-header clients).
        from molt.gateway.http import HeaderTimeoutProtocol

        uvicorn.run(app, host=host, port=port, log_level=log_level.lower(), access_log=False,
                    timeout_keep_alive=keep_alive_s, http=HeaderTimeoutProtocol)
    finally:
        stack.shutdown()
        flushed = recorder.close(timeout=30.0) if recorder is not None else True
        reporter.close()
        shared.close()
        if recorder is None:
            err.print("molt serve: stopped.")
        elif flushed:
            err.print("molt serve: stopped; every recorded event is in the store.")
        else:
            err.print("[red]molt serve: stopped, but the capture process did not confirm delivery of every "
                      "event; they stay in the spool and are delivered on the next start.[/red]")
