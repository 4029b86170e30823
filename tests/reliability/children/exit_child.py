"""Child process of the exit-with-the-sink-down checks.

Usage: ``python exit_child.py HOME MODE N BLACKHOLE_PORT``. The Recorder's sink is "remote" and
unreachable in the worst way: every write connects to ``BLACKHOLE_PORT`` on loopback (a listener that
accepts and never answers) and waits up to 10 minutes for a reply. ``MODE`` is:

- ``recorder``: record ``N`` events, ``flush()`` (acknowledged), print their ids, record ``N`` more
  without flushing, then return from ``main`` — no ``close()``: the atexit hook must bound the exit;
- ``langchain``: run a LangChain chat model ``N`` times with ``molt_langchain.MoltCallbackHandler``
  attached, each prompt carrying a marker, then return (no flush, no close).

The child prints ``exiting <time.time()>`` when ``main`` returns and ``atexit-done <time.time()>`` after
Molt's exit handlers ran; the parent measures from the first to the process's exit (and Molt's share).
"""

from __future__ import annotations

import atexit
import socket
import sys
import time
from pathlib import Path


@atexit.register  # registered before Molt's handlers, so it runs after them (atexit is last-in, first-out)
def _after_molt() -> None:
    sys.stdout.write(f"atexit-done {time.time()}\n")
    sys.stdout.flush()


import orjson  # noqa: E402  (after the atexit hook above, on purpose)

from molt.atdp import Event, EventKind, UserMessage  # noqa: E402
from molt.capture import Recorder, SinkBatch  # noqa: E402


class BlackholeSink:
    """A remote sink that is unreachable: connects, sends, and waits (10 min) for an answer that never comes."""

    def __init__(self, port: int):
        self.port = port

    def write_batch(self, batch: SinkBatch) -> None:
        with socket.create_connection(("127.0.0.1", self.port), timeout=600) as s:
            s.sendall(b"POST /ingest HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
            s.recv(1)

    def chain_head(self, trajectory_id: str) -> tuple[int, str] | None:
        self.write_batch(SinkBatch())
        return None


def main() -> None:
    home, mode, n, port = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    rec = Recorder(BlackholeSink(port), spool_dir=home / "spool")
    out = sys.stdout
    if mode == "recorder":
        tid = rec.new_trajectory()
        acked = []
        for i in range(n):
            ev = Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE, action=UserMessage(content=f"acked {i}"),
                       metadata={"tenant_id": "exit"})
            rec.record(ev)
            acked.append(ev.event_id)
        assert rec.flush(timeout=30)
        out.write("acked " + orjson.dumps(acked).decode() + "\n")
        for i in range(n):  # recorded, never flushed: the exit path must make these durable too
            rec.record(Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE,
                             action=UserMessage(content=f"unflushed {i}"), metadata={"tenant_id": "exit"}))
    elif mode == "langchain":
        from langchain_core.language_models.fake_chat_models import FakeListChatModel

        from molt_langchain import MoltCallbackHandler

        handler = MoltCallbackHandler(rec, tenant_id="exit")
        model = FakeListChatModel(responses=["ok"])
        for i in range(n):
            model.invoke(f"marker-{i}", config={"callbacks": [handler]})
    else:
        raise SystemExit(f"unknown mode {mode}")
    out.write(f"exiting {time.time()}\n")
    out.flush()


if __name__ == "__main__":
    main()
