"""Names for agents that send no ``X-Molt-Agent``: an unmodified agent (Claude Code, Codex CLI, an SDK
agent that only changed its base URL) is still an agent the control plane can evolve by name.

A call's agent is, in order:

1. the one it names (``X-Molt-Agent`` or ``metadata.agent_id``);
2. the agent its API key is bound to (``agent = "…"`` in the key file);
3. a stable fingerprint of what makes it that agent — its system prompt and its tool set — as
   ``fp-<12 hex>``, or the name an operator gave that fingerprint (``molt agents rename``);
4. none, for a call with neither a system prompt nor tools (nothing identifies it).

The fingerprint reads the system prompt's first :data:`PROMPT_CHARS` characters with whitespace
collapsed and digits blanked — coding agents put the date, the working directory and counts into their
prompts, and a fingerprint that moved with them would name a new agent every day — and the sorted tool
names. Each fingerprint gets a readable label: the client's user agent (product name) and the prompt's
first words. ``agents.json`` sits beside the governed store and is not reached by erasure, so when the
gateway governs what it records the label's words pass the same redaction first (``redact``); a system
prompt may name a person, and the label must not keep what the store would not.

Fingerprints seen are written to ``agents.json`` in the gateway's home when a new one appears (rare: a
new agent), which ``molt agents ls`` reads; names chosen by an operator live in ``agent-names.json``,
written only by ``molt agents rename`` and re-read by the gateway within :data:`RELOAD_S` of a change.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from molt.backends.chat_format import text_content
from molt.errors import InvalidRequest

__all__ = ["MAX_AGENTS", "PROMPT_CHARS", "RELOAD_S", "AgentDirectory", "AgentEntry", "fingerprint", "label"]

log = logging.getLogger("molt.gateway")

#: Characters of the system prompt a fingerprint reads (after whitespace is collapsed).
PROMPT_CHARS = 400
#: Seconds between checks of the names file for an operator's rename.
RELOAD_S = 1.0
#: Fingerprints remembered (all tenants together); past it the oldest are forgotten (their calls keep
#: their ids).
MAX_AGENTS = 10_000
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")
_DIGITS = re.compile(r"\d+")
_SPACE = re.compile(r"\s+")


def _system_text(messages: list[dict[str, Any]]) -> str:
    parts = []
    for m in messages:
        if m.get("role") not in ("system", "developer"):
            break
        parts.append(text_content(m.get("content")))
    return "\n".join(parts)


def _tool_names(tools: list[dict[str, Any]] | None) -> list[str]:
    return sorted(str((t.get("function") or t).get("name") or "") for t in tools or () if isinstance(t, dict))


def fingerprint(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str | None:
    """``fp-<12 hex>`` of the system prompt's start and the tool names, or None when there is neither."""
    prompt = _SPACE.sub(" ", _system_text(messages)).strip()
    names = _tool_names(tools)
    if not prompt and not names:
        return None
    key = json.dumps([_DIGITS.sub("#", prompt[:PROMPT_CHARS]), names]).encode()
    return "fp-" + hashlib.blake2b(key, digest_size=6).hexdigest()


def label(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, user_agent: str | None) -> str:
    """A readable label: the user agent's product name and the system prompt's first words (or the tools)."""
    product = (user_agent or "").split(" ")[0].split("/")[0] or "unknown client"
    words = _SPACE.sub(" ", _system_text(messages)).strip().split(" ")[:8]
    what = " ".join(words) if words != [""] else "tools: " + ", ".join(_tool_names(tools)[:5])
    return f"{product} · {what[:80]}"


@dataclass(slots=True)
class AgentEntry:
    """An agent named by fingerprint: its tenant, id, label and operator-chosen name (if any)."""

    tenant: str
    fingerprint: str
    label: str
    first_seen: float
    last_seen: float
    name: str | None = None


def _write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    with os.fdopen(fd, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("Could not read %s (%s); ignoring it.", path, exc)
        return None


class AgentDirectory:
    """The agent of each call (see the module docstring). ``home``: where ``agents.json`` and
    ``agent-names.json`` live (``None``: in memory only, and no renames from outside)."""

    def __init__(self, home: str | os.PathLike[str] | None = None, *, limit: int = MAX_AGENTS,
                 clock: Callable[[], float] = time.monotonic, redact: Callable[[str], str] | None = None):
        self.home = Path(home) if home is not None else None
        self.redact = redact
        self.limit = limit
        self.clock = clock
        self._seen: dict[tuple[str, str], AgentEntry] = {}
        self._names: dict[tuple[str, str], str] = {}
        self._names_stamp: int | None = None
        self._checked = float("-inf")
        if self.home is not None:
            for e in (_read_json(self.home / "agents.json") or {}).get("agents", []):
                try:
                    entry = AgentEntry(**{k: e[k] for k in ("tenant", "fingerprint", "label", "first_seen",
                                                              "last_seen")})
                except (KeyError, TypeError):
                    continue
                self._seen[(entry.tenant, entry.fingerprint)] = entry
            self._reload_names()

    # ------------------------------------------------------------------ serving

    def agent(self, tenant: str, key_agent: str | None, messages: list[dict[str, Any]],
              tools: list[dict[str, Any]] | None, headers: Mapping[str, str]) -> str | None:
        """The agent of a call that named none itself."""
        if key_agent:
            return key_agent
        fp = fingerprint(messages, tools)
        if fp is None:
            return None
        entry = self._seen.get((tenant, fp))
        if entry is None:
            entry = AgentEntry(tenant, fp, self._label(messages, tools, headers), time.time(), time.time())
            self._seen[(tenant, fp)] = entry
            while len(self._seen) > self.limit:
                self._seen.pop(next(iter(self._seen)))
            self._save()
        else:
            entry.last_seen = time.time()
        now = self.clock()
        if now - self._checked >= RELOAD_S:
            self._checked = now
            self._reload_names()
        return self._names.get((tenant, fp), fp)

    def _label(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
               headers: Mapping[str, str]) -> str:
        text = label(messages, tools, headers.get("user-agent"))
        if self.redact is None:
            return text
        try:
            return self.redact(text)
        except Exception:  # naming must never fail a call; a label that could not be governed is not kept
            log.warning("Could not redact an agent's label; it is stored as its fingerprint only.", exc_info=True)
            return "(label not governed)"

    def _save(self) -> None:
        if self.home is None:
            return
        try:
            _write_json(self.home / "agents.json", {"agents": [asdict(e) for e in self._seen.values()]})
        except OSError as exc:  # naming must never fail a call
            log.warning("Could not write %s: %s", self.home / "agents.json", exc)

    def _reload_names(self) -> None:
        if self.home is None:
            return
        path = self.home / "agent-names.json"
        try:
            stamp: int | None = path.stat().st_mtime_ns
        except OSError:
            stamp = None
        if stamp == self._names_stamp:
            return
        self._names_stamp = stamp
        data = _read_json(path) or {}
        self._names = {(str(v["tenant"]), str(v["fingerprint"])): str(v["name"])
                       for v in data.get("names", [])
                       if isinstance(v, dict) and {"tenant", "fingerprint", "name"} <= set(v)}

    # ------------------------------------------------------------------ operators

    def entries(self, tenant: str | None = None) -> list[AgentEntry]:
        """Agents named by fingerprint (of ``tenant``, or all), newest first, with their chosen names."""
        self._reload_names()
        out = [AgentEntry(**{**asdict(e), "name": self._names.get((e.tenant, e.fingerprint))})
               for e in self._seen.values() if tenant is None or e.tenant == tenant]
        return sorted(out, key=lambda e: -e.last_seen)

    def rename(self, tenant: str, fp: str, name: str) -> None:
        """Name fingerprint ``fp`` of ``tenant``: the gateway records its later calls under ``name``."""
        if self.home is None:
            raise InvalidRequest("This agent directory has no home to keep names in.")
        if not _NAME.match(name):
            raise InvalidRequest(f"An agent name is 1-128 letters, digits, '_', '-' or '.', starting with a "
                                 f"letter or digit; got {name!r}.", param="name")
        if not fp.startswith("fp-"):
            raise InvalidRequest(f"{fp!r} is not a fingerprint (fp-…); `molt agents ls` lists them.",
                                 param="fingerprint")
        self._reload_names()
        self._names[(tenant, fp)] = name
        _write_json(self.home / "agent-names.json", {"names": [
            {"tenant": t, "fingerprint": f, "name": n} for (t, f), n in sorted(self._names.items())]})
        self._names_stamp = None
