"""Answers acknowledged only once their record is durable (``molt serve --ack-after-durable``).

By default the gateway answers first and records after the response: the events reach the capture
child's fsynced spool a few milliseconds later, and a gateway killed (``kill -9``) in that window loses
calls whose answers the clients already have (the acknowledgement window; measured in the gateway
README). With ``GatewayConfig.ack_after_durable`` each call's record is submitted before the answer
is sent, and the answer waits until the recorder reports everything submitted up to it durable.

Waits are group-committed: one thread asks the recorder for a flush (``flush(timeout)``: the capture
child's reply comes when its spool holds, fsynced, every record sent before the request), and every
answer whose record was submitted before that flush is released by its reply — one round trip per
batch of concurrent calls, not per call.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

__all__ = ["DurableAcks"]

log = logging.getLogger("molt.gateway")


class DurableAcks:
    """Group commit of acknowledgements over a recorder with ``flush(timeout)``.

    Args:
        recorder: a :class:`~molt.capture.Recorder` or a
            :class:`~molt.gateway.capture_process.CaptureProcess`.
        timeout_s: the longest an answer waits for durability; past it (or when the flush fails) the
            answer is sent anyway (fail open for the agent) and :attr:`failures` counts it.
    """

    def __init__(self, recorder: Any, *, timeout_s: float = 10.0):
        self.recorder = recorder
        self.timeout_s = timeout_s
        self.failures = 0
        self._submitted = 0
        self._durable = 0
        self._waiters: list[tuple[int, asyncio.AbstractEventLoop, asyncio.Future[bool]]] = []
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="molt-durable-acks", daemon=True)
        self._thread.start()

    def submitted(self) -> int:
        """Count one more record submitted to the recorder (call right after submitting it); returns its
        sequence number, for :meth:`wait`."""
        with self._cond:
            self._submitted += 1
            return self._submitted

    async def wait(self, seq: int) -> bool:
        """Wait until record ``seq`` is durable; ``False`` when it could not be confirmed in time."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        with self._cond:
            if seq <= self._durable:
                return True
            self._waiters.append((seq, loop, fut))
            self._cond.notify()
        try:
            return await asyncio.wait_for(fut, self.timeout_s + 5.0)
        except TimeoutError:
            self.failures += 1
            return False

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._waiters and not self._closed:
                    self._cond.wait()
                if self._closed:
                    waiters, self._waiters = self._waiters, []
                    self._release(waiters, False)
                    return
                target = self._submitted
            try:
                ok = bool(self.recorder.flush(timeout=self.timeout_s))
            except Exception:
                log.exception("Confirming durability of acknowledged calls failed.")
                ok = False
            if not ok:
                self.failures += 1
                log.warning("The recorder did not confirm the records of answered calls durable within %.0f s; "
                            "the answers were sent anyway.", self.timeout_s)
            with self._cond:
                if ok:
                    self._durable = max(self._durable, target)
                done = [w for w in self._waiters if w[0] <= target]
                self._waiters = [w for w in self._waiters if w[0] > target]
            self._release(done, ok)

    @staticmethod
    def _release(waiters: list[tuple[int, asyncio.AbstractEventLoop, asyncio.Future[bool]]], ok: bool) -> None:
        for _, loop, fut in waiters:
            def done(f: asyncio.Future[bool] = fut) -> None:
                if not f.done():
                    f.set_result(ok)
            try:
                loop.call_soon_threadsafe(done)
            except RuntimeError:  # that loop has closed: nobody waits any more
                pass

    def close(self) -> None:
        """Release every waiter (not confirmed) and stop the thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=self.timeout_s + 5.0)
