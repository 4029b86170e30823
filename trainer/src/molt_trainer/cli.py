"""``molt-trainer`` command: the online RL service.

::

    molt-trainer serve --gateway http://127.0.0.1:8000 --admin-key sk-admin --model smollm2-135m-instruct \\
        --agent support-bot [--governance governance.yaml --tenant acme] [--latency-slo-ms 2000] \\
        [--min-samples 16]
    molt-trainer serve --plane-requests --gateway http://127.0.0.1:8000 --admin-key sk-admin \\
        --model smollm2-135m-instruct --governance governance.yaml   # what the control plane asks for
    molt-trainer algos          # the registered advantage estimators and policy losses (verl names)
    molt-trainer ray-config     # the verl main_ppo overrides for the Ray scale-out path

``serve --plane-requests`` trains the weight updates the control plane of ``molt serve`` (run without
``--train``) queues in the store, one request at a time, through the same weight loop as ``molt serve
--train``, and canaries each adapter as a version of that agent (:mod:`molt.control.weight_queue`).

``serve`` reads eligible trajectories through the governance training queue (``--governance``, the
built-in policy by default, and ``--tenant``, ``default`` by default): events recorded without
governance have no decision and are never read. ``--train-on-ungoverned-data`` reads the store as
recorded instead (unredacted, no eligibility checks; development only). It trains when enough fresh
samples are there and serving latency is within its SLO, and publishes each adapter through the
gateway's admin API. With ``--agent`` (the way to deploy it) it trains on that agent's traffic and each
adapter becomes a canary composite version of ``tenant/agent`` under the agent's routing key
(:class:`molt.control.weights.CanaryTarget`), which the control plane of the ``molt serve`` holding the
store promotes or aborts on the canary's rewarded traffic, as it does the in-process loop's
(``molt serve --train``). Without ``--agent`` it publishes on the plain model key at
``--canary-weight`` (deprecated: agents the plane adopted are routed by their own keys and never
reach it, and nothing judges it; the command says so when it starts). Metrics go to ``--metrics-file``
(Prometheus text) after each tick; its fault counters to ``$MOLT_HOME/status/``, where ``molt doctor``
shows them.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import signal
import threading
from pathlib import Path
from typing import Any


def _positive_int(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text}")
    return n


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="molt-trainer", description="Molt online RL trainer (verl algorithms, peft LoRA).")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="run the online trainer service")
    s.add_argument("--store", default=None, help="store URI (default $MOLT_HOME/store)")
    s.add_argument("--gateway", required=True, help="gateway base URL (admin API and /metrics)")
    s.add_argument("--admin-key", default=None,
                   help="the gateway's platform-operator key (loading adapters into the shared backend is "
                        "the operator's)")
    s.add_argument("--model", required=True, help="public model name the adapters are versions of")
    s.add_argument("--plane-requests", action="store_true",
                   help="train what the control plane of molt serve asks for (its weight_requests, queued when "
                        "molt serve runs without --train): each request's cluster, each adapter a canary version "
                        "of that agent; --agent / --tenant narrow which requests")
    s.add_argument("--agent", default=None,
                   help="the agent (X-Molt-Agent) to train: its traffic only, each adapter a canary version of "
                        "tenant/agent that the control plane of molt serve promotes or aborts")
    s.add_argument("--base-version", default=None, help="the version serving now (default <model>@base)")
    s.add_argument("--model-path", default=None, help="HF model directory (default: the SmolLM2 policy)")
    s.add_argument("--governance", default="default",
                   help="governance policy file of the training queue ('default': the built-in policy)")
    s.add_argument("--tenant", default=None, help="the trainer's tenant, whose eligible data it reads (default: "
                                                  "'default'; with --train-on-ungoverned-data: every tenant)")
    s.add_argument("--train-on-ungoverned-data", action="store_true",
                   help="read trajectories straight from the store, unredacted and without eligibility checks "
                        "(development only)")
    s.add_argument("--out", default="adapters", help="where adapter directories are written")
    s.add_argument("--advantage", default="grpo", help="verl advantage estimator (grpo, rloo, reinforce_plus_plus)")
    s.add_argument("--policy-loss", default="vanilla", help="verl policy loss (vanilla, bypass_mode)")
    s.add_argument("--kl-coef", type=float, default=0.0)
    s.add_argument("--lr", type=float, default=2e-4)
    s.add_argument("--rank", type=int, default=8)
    s.add_argument("--threads", type=_positive_int, default=None,
                   help="torch CPU threads for training (default: torch's choice, one per core); on a host that "
                        "also serves, fewer threads than cores leave the server its share")
    s.add_argument("--min-samples", type=int, default=16)
    s.add_argument("--max-batch", type=int, default=64)
    s.add_argument("--canary-weight", type=float, default=0.1)
    s.add_argument("--latency-slo-ms", type=float, default=None)
    s.add_argument("--metrics-file", default=None)
    s.add_argument("--max-steps", type=int, default=None)
    sub.add_parser("algos", help="list the registered algorithms")
    r = sub.add_parser("ray-config", help="print the verl main_ppo overrides for the Ray path")
    r.add_argument("--data", default="data.parquet")
    r.add_argument("--model-path", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    r.add_argument("--gpus", type=int, default=1)
    return p


def main(argv: list[str] | None = None) -> None:
    """Entry point."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.cmd == "algos":
        from molt_trainer.algos import ADVANTAGES, POLICY_LOSSES

        print("advantage estimators:", ", ".join(ADVANTAGES.names()))
        print("policy losses:", ", ".join(POLICY_LOSSES.names()))
        return
    if args.cmd == "ray-config":
        from molt_trainer.ray.config import main_ppo_overrides

        print(" \\\n  ".join(["python -m verl.trainer.main_ppo",
                              *main_ppo_overrides(args.data, args.model_path, n_gpus=args.gpus)]))
        return
    _serve(args)


def _serve(args: argparse.Namespace) -> None:
    from molt.backends.model import molt_home
    from molt.governance.policy import ANONYMOUS_TENANT
    from molt.status import StatusReporter
    from molt.store import Store
    from molt_trainer.algos import AlgoSettings
    from molt_trainer.policy import LoraSettings, PolicyModel
    from molt_trainer.publish import GatewayTarget, Publisher
    from molt_trainer.service import (
        AgentSource,
        GatewayLatencyProbe,
        GovernedSource,
        OnlineTrainer,
        StoreSource,
        TrainerSettings,
    )

    store = Store.open(args.store)
    if args.plane_requests:
        _serve_plane_requests(args, store)
        return
    if args.agent is not None:  # a canary version belongs to one tenant's agent: only its traffic is read
        args.tenant = args.tenant or ANONYMOUS_TENANT
    if args.train_on_ungoverned_data:
        logging.getLogger("molt_trainer").warning(
            "molt-trainer serve: --train-on-ungoverned-data: training on the store as recorded, unredacted and "
            "without eligibility checks.")
        source: GovernedSource | StoreSource | AgentSource = StoreSource(store, tenant=args.tenant)
    else:
        from molt.governance import Principal, Role, TrainingQueue, load_policy_file

        args.tenant = args.tenant or ANONYMOUS_TENANT
        policy = load_policy_file(args.governance)
        queue = TrainingQueue(store, policy, Principal(args.tenant, Role.TRAINER))
        source = GovernedSource(queue)
        if not policy.for_tenant(args.tenant).training.opt_in:
            logging.getLogger("molt_trainer").warning(
                "molt-trainer serve: tenant %r has not opted in to training under policy %r, so no trajectory is "
                "eligible: give --governance a policy file with training.opt_in: true.", args.tenant, policy.name)
    if args.agent is not None:
        source = AgentSource(source, args.agent)
    settings = TrainerSettings(algo=AlgoSettings(advantage=args.advantage, policy_loss=args.policy_loss,
                                                 kl_coef=args.kl_coef),
                               lora=LoraSettings(rank=args.rank, lr=args.lr, threads=args.threads),
                               min_samples=args.min_samples, max_batch=args.max_batch,
                               latency_slo_ms=args.latency_slo_ms)
    base = args.base_version or f"{args.model}@base"
    if args.agent is not None:
        # The composition root wires the trainer to the plane's version registry, loaded by name like
        # molt serve loads molt_trainer: the control plane is an optional part of an installation, and
        # molt_trainer's modules never import it. The adapter is served only through the agent's canary.
        try:
            weights = importlib.import_module("molt.control.weights")
        except ImportError as exc:
            raise SystemExit(f"molt-trainer serve --agent: the control plane is not installed ({exc}); it keeps "
                             f"the agent's versions and judges the canaries. Install molt with it, or drop --agent."
                             ) from None
        load = weights.gateway_loader(args.gateway, args.admin_key, args.model)
        targets: list[Any] = [weights.CanaryTarget(store, args.tenant, args.agent, base=args.model,
                                                   weight=args.canary_weight, loader=load)]
    else:
        logging.getLogger("molt_trainer").warning(
            "molt-trainer serve without --agent publishes each adapter on the plain model key %r at weight %.2f "
            "(deprecated): agents the control plane adopted are routed by their own keys (model#tenant/agent) "
            "and never reach it, and no plane judges it. Pass --agent AGENT to publish canary versions of that "
            "agent, or run `molt serve --train`.", args.model, args.canary_weight)
        targets = [GatewayTarget(args.gateway, args.admin_key, args.model, weight=args.canary_weight)]
    publisher = Publisher(model=args.model, out_dir=Path(args.out), store=store, tenant_id=args.tenant,
                          agent_id=args.agent, targets=targets)
    trainer = OnlineTrainer(PolicyModel.load(settings.lora, args.model_path), publisher, source, settings,
                            base_version=base, latency_probe=GatewayLatencyProbe(args.gateway, args.admin_key))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    # its crashes, failed steps and publishes, for `molt doctor` ($MOLT_HOME/status/molt-trainer-<pid>.json)
    governed = {"state": {"governance": "OFF (--train-on-ungoverned-data)" if args.train_on_ungoverned_data
                          else args.governance}}
    reporter = StatusReporter(molt_home(), "molt-trainer", {"trainer": trainer.fault_status,
                                                            "governance": lambda: governed}).start()
    try:
        while not stop.is_set():
            trainer.run(stop, max_steps=(trainer.step + 1) if args.max_steps is None else args.max_steps)
            if args.metrics_file:
                Path(args.metrics_file).write_text(trainer.render_metrics())
            if args.max_steps is not None and trainer.step >= args.max_steps:
                break
    finally:
        reporter.close()
        store.close()


def _policy(governance: str) -> Any:
    from molt.governance import load_policy_file

    return load_policy_file(governance)


def _serve_plane_requests(args: argparse.Namespace, store: Any) -> None:
    """``serve --plane-requests``: the plane's weight updates, trained one request at a time through the
    same weight loop as ``molt serve --train`` (molt.control.weight_queue), until SIGTERM / SIGINT."""
    from molt.backends.model import molt_home
    from molt.status import StatusReporter
    from molt_trainer.requests import gateway_trainer

    try:  # the control plane is an optional part of an installation: loaded by name (see --agent)
        weights = importlib.import_module("molt.control.weights")
        queued = importlib.import_module("molt.control.weight_queue")
    except ImportError as exc:
        raise SystemExit(f"molt-trainer serve --plane-requests: the control plane is not installed ({exc}); its "
                         f"requests are what this mode trains.") from None
    log = logging.getLogger("molt_trainer")
    if args.train_on_ungoverned_data:
        log.warning("molt-trainer serve: --train-on-ungoverned-data: training on the store as recorded, unredacted "
                    "and without eligibility checks.")
    trainer = gateway_trainer(store, gateway_url=args.gateway, admin_key=args.admin_key, model=args.model,
                              model_path=args.model_path, out_dir=args.out, slo_ms=args.latency_slo_ms,
                              threads=args.threads)
    loop = weights.WeightLoop(store, trainer,
                              read=weights.training_reader(store, args.governance,
                                                           ungoverned=args.train_on_ungoverned_data),
                              load=weights.gateway_loader(args.gateway, args.admin_key, args.model),
                              share=None if args.train_on_ungoverned_data else weights.sharing_group(
                                  _policy(args.governance)))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    # A stop ends the run in flight at its next step (that request fails with the reason, and the plane asks
    # again), rather than after the whole run: closed from a thread, not from the signal handler, which
    # may interrupt the main thread inside the pool's locks.
    threading.Thread(target=lambda: (stop.wait(), loop.close()), name="molt-trainer-stop", daemon=True).start()
    reporter = StatusReporter(molt_home(), "molt-trainer", {"trainer": trainer.status, "weights": loop.status}).start()
    log.info("molt-trainer serve --plane-requests: training the weight updates the control plane queues (tenant %s, "
             "agent %s)", args.tenant or "any", args.agent or "any")
    try:
        queued.serve_requests(queued.WeightQueue(store), loop, stop, tenant_id=args.tenant, agent_id=args.agent,
                              canary_weight=args.canary_weight)
    finally:
        loop.close()
        reporter.close()
        store.close()
