"""Publish a trained adapter: save it, hot-load it into the serving engine, register the version.

Targets (any number, tried in order, each with retries):

- :class:`GatewayTarget` — the gateway's admin API (``POST /v1/molt/admin/adapters``): the gateway
  hot-loads the adapter into the backends of the serving version (vLLM ``/v1/load_lora_adapter`` or
  the local backend) and routes a canary ``weight`` of new sessions to it; the control plane then
  promotes or rolls back. (The trainer talks to the gateway over HTTP; it never imports it.)
- :class:`VLLMTarget` — a vLLM server directly (``/v1/load_lora_adapter``, no restart).
- :class:`BackendTarget` — a :mod:`molt.backends` backend object (``local`` or ``vllm``) in this
  process.

A target that fails after its retries is logged (one line naming the version, the target and the
error) and counted; nothing is unloaded, so the previous adapter stays live and serving continues.
Each published version is registered in the store's ``policy_versions`` table with its training
data watermark, metrics and the algorithm config that produced it.

Example::

    pub = Publisher(model="smollm2-135m-instruct", out_dir="ckpt", store=store,
                    targets=[GatewayTarget("http://127.0.0.1:8000", admin_key="sk-operator",  # a platform-operator key
                                           model="smollm2-135m-instruct")])
    result = pub.publish(policy, step=3, watermark=wm, metrics=m)
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import httpx
import orjson

from molt_trainer.errors import PublishError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from molt.lineage import Lineage

__all__ = ["BackendTarget", "GatewayTarget", "PublishResult", "Publisher", "Target", "VLLMTarget", "policy_versions"]

log = logging.getLogger("molt.trainer.publish")


class Target(Protocol):
    """Somewhere an adapter is served from."""

    name: str

    def load(self, version: str, path: Path, previous: list[str]) -> None:
        """Serve the adapter at ``path`` as ``version``; raise on failure (the caller retries)."""


@dataclass
class GatewayTarget:
    """The gateway admin API: load into the serving backends and route a canary ``weight`` to it (of the
    sessions of the tenants its manifest names, when it is a tenant's adapter; of every tenant's when it
    is a shared one).

    ``promote=True`` also sets the weight of this trainer's earlier versions (and ``base_version``) to
    0 (what a control plane does after a good canary; the learning test uses it to always serve the
    newest adapter).
    """

    url: str
    admin_key: str | None
    model: str
    weight: float = 0.1
    promote: bool = False
    base_version: str | None = None
    timeout_s: float = 120.0
    name: str = "gateway"

    def load(self, version: str, path: Path, previous: list[str]) -> None:
        from molt.lineage import read_manifest

        body: dict[str, Any] = {"model": self.model, "version": version, "path": str(path), "weight": self.weight}
        manifest = read_manifest(path)
        if manifest.tenant_id is not None:  # a tenant's adapter: served to (and canaried on) its tenants only
            body["tenants"] = [t for t in manifest.tenants if t is not None]
        if self.promote:
            body["weights"] = {v: 0.0 for v in [*previous, *([self.base_version] if self.base_version else [])]}
        headers = {"authorization": f"Bearer {self.admin_key}"} if self.admin_key else {}
        r = httpx.post(self.url.rstrip("/") + "/v1/molt/admin/adapters", json=body, headers=headers,
                       timeout=self.timeout_s)
        if r.status_code != 200:
            raise PublishError(f"the gateway answered {r.status_code}: {r.text[:300]}")


@dataclass
class VLLMTarget:
    """A vLLM server's ``/v1/load_lora_adapter`` (``base_url`` with ``/v1``)."""

    base_url: str
    timeout_s: float = 120.0
    name: str = "vllm"

    def load(self, version: str, path: Path, previous: list[str]) -> None:
        r = httpx.post(self.base_url.rstrip("/") + "/load_lora_adapter",
                       json={"lora_name": version, "lora_path": str(path)}, timeout=self.timeout_s)
        if r.status_code != 200:
            raise PublishError(f"vLLM answered {r.status_code}: {r.text[:300]}")


@dataclass
class BackendTarget:
    """A :mod:`molt.backends` backend object (``load_adapter``), run on ``loop`` when it lives on one."""

    backend: Any
    loop: asyncio.AbstractEventLoop | None = None
    timeout_s: float = 120.0
    name: str = "backend"

    def load(self, version: str, path: Path, previous: list[str]) -> None:
        coro = self.backend.load_adapter(version, str(path))
        if self.loop is not None:
            asyncio.run_coroutine_threadsafe(coro, self.loop).result(self.timeout_s)
        else:
            asyncio.run(coro)


@dataclass
class PublishResult:
    """What happened to one version: where it went live, where it failed, how long it took."""

    version: str
    path: Path
    live: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    save_s: float = 0.0
    serve_s: float = 0.0
    #: the content address of the manifest written with it (:mod:`molt.lineage`)
    manifest_id: str | None = None

    @property
    def ok(self) -> bool:
        """Live on at least one target and failed on none."""
        return bool(self.live) and not self.failed


class Publisher:
    """Saves adapters, hot-loads them into ``targets``, and registers versions in ``store``.

    Args:
        model: the public model name the versions belong to (versions are ``<model>@<prefix>-<step>``).
        out_dir: where adapter directories are written (one per version, kept for rollback).
        targets: where to load them (see the module docstring).
        store: a :class:`molt.store.Store` for the ``policy_versions`` table (``None``: not registered).
        retries: attempts per target (default 3); ``backoff_s`` doubles after each failure (default 0.5).
        prefix: version-name prefix (default ``lora``). ``tenant_id``/``agent_id``: recorded with it.
    """

    def __init__(self, *, model: str, out_dir: str | Path, targets: list[Target] | None = None, store: Any = None,
                 retries: int = 3, backoff_s: float = 0.5, prefix: str = "lora", tenant_id: str | None = None,
                 agent_id: str | None = None):
        self.model = model
        self.out_dir = Path(out_dir)
        self.targets = list(targets or [])
        self.store = store
        self.retries = max(1, retries)
        self.backoff_s = backoff_s
        self.prefix = prefix
        self.tenant_id = tenant_id
        self.agent_id = agent_id
        self.published: list[str] = []
        self.counters: Counter[str] = Counter()

    def version_name(self, step: int) -> str:
        """The version id of the adapter trained at ``step``."""
        return f"{self.model}@{self.prefix}-{step}"

    def publish(self, policy: Any, *, step: int, watermark: dict[str, Any] | None = None,
                metrics: dict[str, float] | None = None, config: dict[str, Any] | None = None,
                lineage: Sequence[Lineage] = (), tenant_id: str | None = None, share_with: Sequence[str] = (),
                request_id: str | None = None) -> PublishResult:
        """Save ``policy``'s adapter with its manifest (:func:`molt.lineage.write_manifest`: whose data
        trained it — ``lineage``, every sample since the weights were fresh —, the tenant it belongs to,
        default this publisher's, and ``share_with``), load it into every target, register it; never
        raises for a target that is down (see :class:`PublishResult`). A manifest that cannot be written
        (a lineage naming a tenant the adapter is not shared with) raises before anything is loaded."""
        from molt.lineage import write_manifest

        version = self.version_name(step)
        t0 = time.perf_counter()
        path = policy.save_adapter(self.out_dir / version.replace("@", "_").replace("/", "_"))
        owner = tenant_id if tenant_id is not None else self.tenant_id
        manifest = write_manifest(path, tenant_id=owner, adapter=version, base_model=self.model, lineage=lineage,
                                  share_with=share_with, request_id=request_id)
        result = PublishResult(version=version, path=path, save_s=time.perf_counter() - t0,
                               manifest_id=manifest.manifest_id)
        for target in self.targets:
            err = self._load_with_retries(target, version, path)
            if err is None:
                result.live.append(target.name)
            else:
                result.failed[target.name] = err
        result.serve_s = time.perf_counter() - t0
        if result.live or not self.targets:
            self.published.append(version)
            self.counters["published"] += 1
        if result.failed:
            self.counters["publish_failures"] += 1
        if self.store is not None:
            self._register(result, step, watermark or {}, metrics or {}, config or {})
            self._record_lineage(result, manifest)
        return result

    def _record_lineage(self, result: PublishResult, manifest: Any) -> None:
        from molt.lineage import LineageLog

        detail = {"manifest_id": manifest.manifest_id, "path": str(result.path), "base_model": manifest.base_model,
                  "share_with": list(manifest.share_with), "created_at": manifest.created_at,
                  "request_id": manifest.request_id, "replaces": manifest.replaces}
        try:
            LineageLog(self.store).record("adapter", manifest.tenant_id, result.version, manifest.lineage,
                                          agent_id=self.agent_id, detail=detail)
        except Exception as exc:  # the manifest beside the weights still says it; the control plane reads that
            self.counters["register_failures"] += 1
            log.warning("trainer: recording the lineage of %s failed (%s); its manifest is at %s",
                        result.version, exc, result.path)

    def registered(self) -> list[dict[str, Any]]:
        """This publisher's versions already in the store's ``policy_versions`` (oldest step first):
        the trainer's acknowledgement log, read back when it restarts (``[]`` without a store)."""
        if self.store is None:
            return []
        self.store.table("policy_versions").checkout_latest()  # what another process registered too
        prefix = f"{self.model}@{self.prefix}-"
        mine = [v for v in policy_versions(self.store) if v["version_id"].startswith(prefix)
                and v["tenant_id"] == self.tenant_id and v["agent_id"] == self.agent_id]
        return sorted(mine, key=lambda v: int(v["parts"].get("step") or 0))

    def _load_with_retries(self, target: Target, version: str, path: Path) -> str | None:
        delay = self.backoff_s
        previous = [v for v in self.published if v != version]
        for attempt in range(1, self.retries + 1):
            try:
                target.load(version, path, previous)
                return None
            except Exception as exc:  # a target that is down must never stop the trainer
                self.counters[f"publish_retries_{target.name}"] += 1
                last = f"{type(exc).__name__}: {exc}"
                if attempt < self.retries:
                    time.sleep(delay)
                    delay *= 2
        log.warning("trainer: publishing %s to %s failed after %d attempts (%s); skipped, the previous adapter "
                    "stays live", version, target.name, self.retries, last)
        return last

    def _register(self, result: PublishResult, step: int, watermark: dict[str, Any], metrics: dict[str, float],
                  config: dict[str, Any]) -> None:
        import pyarrow as pa

        from molt.store.schemas import POLICY_VERSIONS
        from molt.store.tables import append

        parts = {"kind": "lora", "model": self.model, "lora_adapter": str(result.path), "step": step,
                 "parent": self.published[-2] if len(self.published) > 1 else None, "watermark": watermark,
                 "metrics": metrics, "config": config, "live_on": result.live, "failed_on": result.failed,
                 "serve_s": result.serve_s}
        row = {"version_id": result.version, "tenant_id": self.tenant_id, "agent_id": self.agent_id,
               "parts": orjson.dumps(parts, default=str, option=orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY),
               "created_at": datetime.now(UTC)}
        try:
            append(self.store, "policy_versions", pa.Table.from_pylist([row], schema=POLICY_VERSIONS))
        except Exception as exc:
            self.counters["register_failures"] += 1
            log.warning("trainer: registering %s in the store failed (%s); the adapter is at %s",
                        result.version, exc, result.path)


def policy_versions(store: Any) -> list[dict[str, Any]]:
    """Registered policy versions (oldest first) with their parsed ``parts``."""
    rows = store.table("policy_versions").search().limit(None).to_arrow().to_pylist()
    rows.sort(key=lambda r: r["created_at"])
    return [{**r, "parts": orjson.loads(r["parts"])} for r in rows]
