"""Child process of the gateway crash trials: the gateway (stub backend, in-process Recorder, real
LanceDB store) on a loopback port.

Usage: ``python gateway_child.py HOME PORT [governed]``. With ``governed`` the Recorder runs the
governance pipeline (:data:`relharness.TRAINING_POLICY`) into a ``GovernedSink``, so the trial can also
check the training queue. The Recorder's spool is instrumented: once an append is
durable (it returned, fsync done) the event ids of its frames are appended to ``HOME/acked.jsonl``, one
JSON list a line. That is exactly "acknowledged": durable in the write-ahead log. The parent drives load
through HTTP, SIGKILLs this process at a random point and checks the store after a restart.
"""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
import uvicorn

from molt.backends import StubBackend
from molt.capture import Recorder, SealedRow
from molt.capture.spool import FRAME_EVENT, FRAME_REWARD, _iter_frames
from molt.gateway import Gateway, GatewayConfig, create_app
from molt.governance.access import KeyRing
from molt.store import Store

KEYS = {"sk-crash-writer": ("crash", "agent_writer"), "sk-crash-admin": ("crash", "admin")}


def instrument(rec: Recorder, log_path: Path) -> None:
    """Log the ids of every frame once its spool append returned (= acknowledged)."""
    spool = rec._spool
    orig = spool.append
    out = open(log_path, "ab", buffering=0)  # noqa: SIM115 - lives until the kill

    def append(frames: list[bytes]):  # type: ignore[no-untyped-def]
        pos = orig(frames)
        if pos is not None:
            ids: list[str] = []
            rewards: list[str] = []
            for kind, body, _ in _iter_frames(b"".join(frames)):
                if kind == FRAME_EVENT:
                    ids.append(SealedRow.decode(body).x["event_id"])
                elif kind == FRAME_REWARD:
                    rewards.append(orjson.loads(body)["annotation_id"])
            out.write(orjson.dumps({"events": ids, "rewards": rewards}) + b"\n")
        return pos

    spool.append = append  # type: ignore[method-assign]


def main() -> None:
    home, port = Path(sys.argv[1]), int(sys.argv[2])
    governed = len(sys.argv) > 3 and sys.argv[3] == "governed"
    store = Store.open(home / "store", compact_every=8)
    kw: dict[str, object] = {}
    sink: object = store
    if governed:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from relharness import TRAINING_POLICY

        from molt.governance import GovernancePipeline, GovernancePolicy, GovernedSink

        kw["pipeline"] = GovernancePipeline(GovernancePolicy.model_validate(TRAINING_POLICY))
        sink = GovernedSink(store)
    rec = Recorder(sink, spool_dir=home / "spool", batch_size=256, name="crash-gateway", **kw)  # type: ignore[arg-type]
    instrument(rec, home / "acked.jsonl")
    gw = Gateway([StubBackend()], recorder=rec, store=store, keyring=KeyRing.from_mapping(KEYS),
                 config=GatewayConfig(health_interval_s=0))
    uvicorn.run(create_app(gw), host="127.0.0.1", port=port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
