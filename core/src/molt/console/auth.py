"""Who is looking at the console: API keys (``Authorization: Bearer``) and browser sessions.

A browser logs in with a tenant API key once; the console keeps a server-side session (principal,
CSRF token, expiry) and gives the browser only a random session id in an HttpOnly, SameSite=Strict
cookie, so the key itself never sits in the browser. Sessions live in memory: a restart logs
everyone out.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from molt.errors import AuthenticationError
from molt.governance.access import KeyRing, Principal

__all__ = ["ConsoleAuth", "Session"]


@dataclass
class Session:
    """A logged-in browser: its principal, the CSRF token its forms carry, when it expires (monotonic s)."""

    principal: Principal
    csrf: str
    expires: float
    flash: list[str] = field(default_factory=list)


class ConsoleAuth:
    """API keys of one or more key rings (tried in order) and the browser sessions made from them.

    Args:
        keyrings: the tenant key ring(s); a key known to any of them is accepted.
        session_ttl_s: how long a browser session lasts (default 8 h).
        max_sessions: the oldest sessions are dropped beyond this many (default 10,000).
    """

    def __init__(self, keyrings: KeyRing | Sequence[KeyRing], *, session_ttl_s: float = 8 * 3600,
                 max_sessions: int = 10_000):
        self.keyrings = [keyrings] if isinstance(keyrings, KeyRing) else list(keyrings)
        if not self.keyrings:
            raise ValueError("The console needs at least one key ring to log anyone in.")
        self.session_ttl_s = session_ttl_s
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()

    def authenticate(self, api_key: str | None) -> Principal:
        """The principal of ``api_key``; :class:`AuthenticationError` if no key ring knows it."""
        if not api_key:
            raise AuthenticationError("No API key was given; log in or send 'Authorization: Bearer <key>'.")
        for ring in self.keyrings:
            try:
                return ring.authenticate(api_key)
            except AuthenticationError:
                continue
        raise AuthenticationError("The API key is not known; check the key or ask an admin for one.")

    def login(self, api_key: str) -> tuple[str, Session]:
        """A new session for ``api_key``: ``(session id for the cookie, session)``."""
        principal = self.authenticate(api_key)
        principal.require("read")
        token = secrets.token_urlsafe(32)
        s = Session(principal=principal, csrf=secrets.token_urlsafe(24), expires=time.monotonic() + self.session_ttl_s)
        with self._lock:
            self._sessions[token] = s
            while len(self._sessions) > self.max_sessions:
                self._sessions.popitem(last=False)
        return token, s

    def session(self, token: str | None) -> Session | None:
        """The live session of ``token`` (``None`` when unknown or expired)."""
        if not token:
            return None
        with self._lock:
            s = self._sessions.get(token)
            if s is not None and s.expires < time.monotonic():
                del self._sessions[token]
                s = None
        return s

    def logout(self, token: str | None) -> None:
        """End the session of ``token`` (if any)."""
        if token:
            with self._lock:
                self._sessions.pop(token, None)
