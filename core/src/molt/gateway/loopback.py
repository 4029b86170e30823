"""An ASGI app served by uvicorn on a loopback port, in a thread of this process.

For what runs the gateway beside its own clients in one process — ``molt demo`` (its agents call the
gateway over HTTP), tests that drive real HTTP clients (OpenAI SDK, LangChain, OTLP exporters) — where a
subprocess would cost seconds and hide the objects under test. ``molt serve`` runs uvicorn in the
foreground instead.

Example::

    with ServerThread(create_app(gateway)) as srv:
        client = OpenAI(base_url=srv.url + "/v1", api_key=key)
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

__all__ = ["ServerThread", "free_port", "wait_healthy"]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` now (the OS picks it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def wait_healthy(url: str, proc: Any = None, *, timeout_s: float = 60.0, headers: dict[str, str] | None = None,
                 detail: Any = None) -> None:
    """Wait until the server at ``url`` answers ``GET /health`` with 200 — a ``molt serve`` (or stub upstream)
    started as a subprocess ``proc`` by a script or a test.

    Raises :class:`RuntimeError` when ``proc`` exits first or ``timeout_s`` passes; the message ends with what
    ``detail()`` returns (say, the tail of the server's log) or else ``proc``'s piped stderr. Start-up of
    ``molt serve`` takes seconds on an idle machine and minutes on a loaded one: size ``timeout_s`` for it.
    """
    import httpx

    def failure(what: str) -> RuntimeError:
        if detail is not None:
            extra = str(detail())
        elif proc is not None and getattr(proc, "stderr", None) is not None and proc.poll() is not None:
            extra = proc.stderr.read().decode(errors="replace")[-3000:]
        else:
            extra = ""
        return RuntimeError(f"{url} {what}" + (f":\n{extra}" if extra else "."))

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(url.rstrip("/") + "/health", headers=headers, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if proc is not None and proc.poll() is not None:
            raise failure(f"exited with {proc.returncode} before it answered /health")
        if time.monotonic() > deadline:
            raise failure(f"did not answer /health within {timeout_s:g} s")
        time.sleep(0.2)


class ServerThread:
    """uvicorn serving ``app`` on ``host:port`` (a free loopback port by default) in a daemon thread.

    Entering starts it and waits until it accepts connections (``start_timeout_s``; a server that dies or
    does not start in time is a :class:`RuntimeError`); leaving asks it to finish in-flight requests and
    stop, and waits up to ``stop_timeout_s``.
    """

    def __init__(self, app: Any, *, host: str = "127.0.0.1", port: int | None = None, name: str = "molt-uvicorn",
                 start_timeout_s: float = 60.0, stop_timeout_s: float = 30.0):
        import uvicorn

        self.host = host
        self.port = port if port is not None else free_port(host)
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.server = uvicorn.Server(uvicorn.Config(app, host=host, port=self.port, log_level="warning",
                                                    access_log=False))
        self.thread = threading.Thread(target=self.server.run, name=name, daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + self.start_timeout_s
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError(f"The server thread {self.thread.name!r} died before it started serving.")
            if time.monotonic() > deadline:
                raise RuntimeError(f"The server on {self.url} did not start within {self.start_timeout_s:g} s.")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(self.stop_timeout_s)

    @property
    def url(self) -> str:
        """``http://host:port`` (no trailing slash)."""
        return f"http://{self.host}:{self.port}"
