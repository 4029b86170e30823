"""What a client chooses that an event's envelope (or a name beside its content) stores, governed.

The envelope of a sealed event — its ids, name, metadata and provenance — is hashed in clear and is
never erased (``molt erase --subject`` nulls payloads, see :mod:`molt.governance.erasure`), so it must
hold identifiers, not content. Clients nevertheless put people in it: ``X-Molt-Trajectory:
traj-ana@example.org``, a session named after its user, an OpenTelemetry span called ``chat Ana
Lima``. Three mechanisms, all run by the pipeline's ``redact`` stage (and the Recorder, for ids):

**Ids** (:class:`EnvelopeIds`): a trajectory, session, event or parent id is kept as given when it
has an identifier's shape (printable ASCII without spaces or ``@``) and the
redactor finds nothing in it, read with its separators as spaces (``order_Ana_Lima`` is read
``order Ana Lima``). Otherwise it is replaced by its keyed digest, :func:`id_digest`
(``idh-`` + 32 hex digits of HMAC-SHA256): stable, so every later event, reward or lookup that
names the client's id reaches the same trajectory, and not reversible without the key. The value as
given is not kept anywhere: the client has it, and a lookup by it computes the digest again
(:func:`lookup_ids`).

**The key** (:func:`master_key`) is the master secret of the tenants' pseudonym keys
(:func:`~molt.governance.redaction.derive_tenant_key`): ``$MOLT_PSEUDONYM_KEY`` (what a policy's
``pseudonym_key_env`` usually names), or, where it is not set, a random secret made once in
``$MOLT_HOME/pseudonym.key`` (mode 0600), so that every process on one ``MOLT_HOME`` — the serve
process, its capture child, ``molt trajectories import`` and ``show`` — digests alike. Each tenant
digests with its own derived key, so two tenants' digests of one id differ.

**Names and keys** (:func:`redact_names` before the payload walker, :func:`redact_envelope` after):
an event's name (a span's or an observation's), tool names, a message's participant name, the
strings of the sampling parameters (``stop`` sequences, ``user``), the keys of tags and of
``provenance.tool_versions``, and the path and query of an image's or a file's URL are redacted as
identifiers are read (separators as spaces), so a name written ``Ana_Lima`` or ``Ana-Lima`` is
found whole; the session, agent, task and tag values as free text. A detected value is replaced per
the policy (placeholder, mask or keyed pseudonym).

Every detection reads the text Unicode-folded (:mod:`molt.governance.redaction.normalize`).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from molt.atdp.models import Event, RewardAnnotation
from molt.capture.payload import clip, max_length
from molt.errors import GovernanceError

__all__ = [
    "CLIENT_FIELDS",
    "DIGEST_PREFIX",
    "ID_FIELDS",
    "EnvelopeIds",
    "id_digest",
    "lookup_ids",
    "master_key",
    "redact_envelope",
    "redact_name",
    "redact_names",
]

log = logging.getLogger("molt.governance")

#: Envelope fields whose value a client chooses and that are redacted as text: (path, attribute chain).
CLIENT_FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("session_id", ("session_id",)),
    ("metadata.agent_id", ("metadata", "agent_id")),
    ("metadata.task", ("metadata", "task")),
)
#: Envelope ids a client may choose: kept when they are identifiers, else replaced by their digest.
ID_FIELDS = ("trajectory_id", "session_id", "event_id", "parent_id")
#: What a digested id starts with.
DIGEST_PREFIX = "idh-"
_DIGEST_HEX = 32
_KEY_ENV = "MOLT_PSEUDONYM_KEY"
_KEY_FILE = "pseudonym.key"
_DIGEST_SHAPE = re.compile(re.escape(DIGEST_PREFIX) + f"[0-9a-f]{{{_DIGEST_HEX}}}\\Z")
# UUIDs and hex ids of the usual widths (span 16, trace 32, SHA-1 40, SHA-256 64 digits) are random:
# read as 'x's, or their digit groups would read as phone numbers once the dashes are spaces. A hex
# id counts only with a letter and a digit in it and nothing alphanumeric around it, so a card written
# as 16 digits and an IBAN (22+ characters) are still read.
_HEX = r"(?=[0-9A-Fa-f]*[A-Fa-f])(?=[0-9A-Fa-f]*[0-9])(?:[0-9A-Fa-f]{64}|[0-9A-Fa-f]{40}|[0-9A-Fa-f]{32}|[0-9A-Fa-f]{16})"
_RANDOM_IDS = re.compile(r"(?<![0-9A-Za-z])(?:[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-"
                         r"[0-9A-Fa-f]{12}|" + _HEX + r")(?![0-9A-Za-z])")
# an identifier: printable ASCII, no space and no '@' (quotes and brackets carry no one's data)
_ID_SHAPE = re.compile(r"[\x21-\x3f\x41-\x7e]+\Z")
# An organisation's name is no one's personal data, and framework names look like one (ChatOpenAI,
# RunnableSequence): names and ids keep them. Read with every separator a space, a name's words lose
# the cues the entity detector weighs (marker-2-acme is no person), so that reading adds only what
# patterns and checksums find.
_NOT_IN_NAMES = frozenset({"ORGANIZATION"})
_WORD_GUESSES = frozenset({"PERSON", "ORGANIZATION", "LOCATION", "ADDRESS", "NRP"})
# separators read as spaces when an identifier, a name or a key is detected on: '.', '@' and '+'
# stay (they are part of an address, a domain or a phone number)
_AS_WORDS = str.maketrans({c: " " for c in "_-/:~=#&?|,;"})
# A placeholder can be longer than what it replaces ("<EMAIL_ADDRESS_1>" for "a@b.io"): a redacted
# session id is clipped back to the bound the model declares, or the sealed event would not validate.
_SESSION_MAX = max_length(Event, "session_id")
_NAME_MAX = max_length(Event, "name")
_URL_KEYS = frozenset({"url", "image_url", "file_url", "audio_url", "video_url", "uri", "href", "src"})

_key_lock = threading.Lock()
_master_cache: dict[str, bytes] = {}


def _home() -> Path:
    return Path(os.environ.get("MOLT_HOME", "~/.molt")).expanduser()


def master_key() -> bytes:
    """The master secret the digests are keyed with (see the module docstring)."""
    env = os.environ.get(_KEY_ENV)
    if env:
        return env.encode()
    path = _home() / _KEY_FILE
    cache_key = str(path)
    with _key_lock:
        got = _master_cache.get(cache_key)
        if got is not None:
            return got
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{_KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(fd, secrets.token_hex(32).encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(tmp, path)  # never replaces a key another process made meanwhile
            except FileExistsError:
                pass
            finally:
                tmp.unlink(missing_ok=True)
        data = path.read_bytes().strip()
        if len(data) < 16:
            raise GovernanceError(f"{path} holds no usable key (under 16 bytes); remove it to make a new one, "
                                  f"or set ${_KEY_ENV}.")
        _master_cache[cache_key] = data
        return data


def _tenant_key(tenant_id: str | None) -> bytes:
    from molt.governance.redaction import derive_tenant_key

    return derive_tenant_key(master_key().decode("utf-8", "replace"), tenant_id or "").get_secret_value().encode()


def id_digest(tenant_id: str | None, value: str) -> str:
    """The keyed digest that stands for the client's id ``value`` in ``tenant_id``'s envelopes."""
    mac = hmac.new(_tenant_key(tenant_id), f"molt-envelope-id\x1f{value}".encode(), hashlib.sha256)
    return DIGEST_PREFIX + mac.hexdigest()[:_DIGEST_HEX]


def lookup_ids(value: str, tenants: Iterable[str | None]) -> list[str]:
    """The ids under which a client's id ``value`` may be stored: as given, then its digest in each of
    ``tenants`` (what ``molt trajectories show`` and the feedback endpoints try)."""
    out = [value]
    for t in tenants:
        d = id_digest(t, value)
        if d not in out:
            out.append(d)
    return out


def _spans_as_identifier(redactor: Any, text: str, *, loose: bool = False) -> list[Any]:
    """What ``redactor`` finds in ``text`` read as written and read with its separators as spaces (the
    same offsets: each separator becomes one space); ``loose`` also takes the names that reading
    suggests (a URL's path, where a name between slashes has no other cue and a false find costs
    only a placeholder in content)."""
    from molt.governance.redaction import resolve_overlaps
    from molt.governance.redaction.mentions import MENTION

    text = _RANDOM_IDS.sub(lambda m: "x" * len(m.group()), text)
    readings, skips = [text], [_NOT_IN_NAMES]
    under = text.replace("_", " ")  # '_' joins words for the detectors' \b; '-', '/', '.' do not
    if under != text:
        readings.append(under)
        skips.append(_NOT_IN_NAMES)
    words = text.translate(_AS_WORDS)
    if words != under:  # every separator a space: numbers and addresses, not guesses from words
        readings.append(words)
        skips.append(_NOT_IN_NAMES if loose else _WORD_GUESSES)
    # one pass, memoised by text (names and ids repeat); a mention is a name found in another reading
    # of the same characters, which that reading's own rule has already judged
    found = [s for spans, skip in zip(redactor.detect_many(readings), skips, strict=True) for s in spans
             if s.entity_type not in skip and s.detector != MENTION]
    return resolve_overlaps(found) if len(found) > 1 else found


def _redact_identifier_text(redactor: Any, text: str, state: Any, records: list[Any] | None = None,
                            path: str = "", *, loose: bool = False) -> str:
    spans = _spans_as_identifier(redactor, text, loose=loose)
    if not spans:
        return text
    if records is not None:
        records.extend(_records(redactor, path, spans))
    return str(redactor.apply(text, spans, state))


def redact_name(redactor: Any, text: str) -> str:
    """``text``, a name or identifier kept outside the store (an agent's label, a tool name), redacted
    as the envelope's names are: read as written and with its separators as spaces."""
    return _redact_identifier_text(redactor, text, None)


def _records(redactor: Any, path: str, spans: list[Any]) -> list[Any]:
    from molt.governance.redaction import RedactedSpan

    return [RedactedSpan(field=path, start=s.start, end=s.end, entity_type=s.entity_type, detector=s.detector,
                         score=s.score, mode=redactor.mode_name(s.entity_type)) for s in spans]


class EnvelopeIds:
    """Governs the ids a client chose (see the module docstring); thread-safe, with a bounded memo
    (ids repeat: every event of a trajectory names it)."""

    def __init__(self, max_entries: int = 50_000) -> None:
        self._memo: OrderedDict[tuple[str | None, str], str] = OrderedDict()
        self._max = max_entries
        self._lock = threading.Lock()

    def governed(self, tenant_id: str | None, value: str, redactor: Any) -> str:
        """``value`` if it is an identifier with nothing personal in it, else its digest."""
        key = (tenant_id, value)
        with self._lock:
            hit = self._memo.get(key)
            if hit is not None:
                self._memo.move_to_end(key)
                return hit
        keep = bool(_DIGEST_SHAPE.match(value)) or (
            bool(_ID_SHAPE.match(value)) and not _spans_as_identifier(redactor, value))
        got = value if keep else id_digest(tenant_id, value)
        with self._lock:
            self._memo[key] = got
            while len(self._memo) > self._max:
                self._memo.popitem(last=False)
        return got

    def event(self, event: Event, tenant_id: str | None, redactor: Any) -> Event:
        """``event`` with each of its :data:`ID_FIELDS` governed."""
        update: dict[str, str] = {}
        for name in ID_FIELDS:
            v = getattr(event, name)
            if v:
                g = self.governed(tenant_id, v, redactor)
                if g != v:
                    update[name] = g
        return event.model_copy(update=update) if update else event

    def reward(self, annotation: RewardAnnotation, tenant_id: str | None, redactor: Any,
               state: Any = None) -> RewardAnnotation:
        """``annotation`` with its trajectory and event ids governed as its events' are, and its
        dimension names redacted (a key is client text too)."""
        update: dict[str, Any] = {}
        for name in ("trajectory_id", "event_id"):
            v = getattr(annotation, name)
            if v:
                g = self.governed(tenant_id, v, redactor)
                if g != v:
                    update[name] = g
        if annotation.dimensions:
            from molt.governance.redaction import ReplacementState

            st = state if state is not None else ReplacementState()
            dims: dict[str, float] = {}
            for k, v in annotation.dimensions.items():
                nk = _redact_identifier_text(redactor, k, st)
                dims[nk] = max(dims[nk], v) if nk in dims else v  # two names redacted alike: one dimension
            if dims != annotation.dimensions:
                update["dimensions"] = dims
        return annotation.model_copy(update=update) if update else annotation


def _redact_url(redactor: Any, url: str, state: Any) -> str:
    """``url`` with its path, query and fragment redacted as identifiers are (the host is left to the
    payload walker's URL and domain detectors)."""
    if not url.startswith(("http://", "https://", "ftp://", "s3://", "gs://")):
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return _redact_identifier_text(redactor, url, state, loose=True)
    path, query, frag = (_redact_identifier_text(redactor, p, state, loose=True) if p else p
                         for p in (parts.path, parts.query, parts.fragment))
    if (path, query, frag) == (parts.path, parts.query, parts.fragment):
        return url
    return urlunsplit((parts.scheme, parts.netloc, path, query, frag))


def _map_urls(value: Any, fn: Callable[[str], str]) -> Any:
    """``value`` (message content: parts, dicts, lists) with every URL under a URL-ish key mapped by
    ``fn``; the same object when nothing changed."""
    if isinstance(value, list):
        new = [_map_urls(v, fn) for v in value]
        return value if all(a is b for a, b in zip(new, value, strict=True)) else new
    if isinstance(value, dict):
        changed = False
        out: dict[str, Any] = {}
        for k, v in value.items():
            if isinstance(v, str) and k in _URL_KEYS:
                nv: Any = fn(v)
            elif isinstance(v, (dict, list)):
                nv = _map_urls(v, fn)
            else:
                nv = v
            changed = changed or nv is not v
            out[k] = nv
        return out if changed else value
    return value


def _map_strings(value: Any, fn: Callable[[str], str]) -> Any:
    """Every string leaf of a JSON value mapped by ``fn`` (keys left as they are)."""
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, list):
        return [_map_strings(v, fn) for v in value]
    if isinstance(value, dict):
        return {k: _map_strings(v, fn) for k, v in value.items()}
    return value


def _tool_calls(calls: Any, name: Callable[[str], str]) -> Any:
    if not calls:
        return calls
    new = [c.model_copy(update={"name": n}) if (n := name(c.name)) != c.name else c for c in calls]
    return calls if all(a is b for a, b in zip(new, calls, strict=True)) else new


def _tools_in_data(data: Any, name: Callable[[str], str]) -> Any:
    """``observation.data`` with the names of the tools it offers (``{"tools": [{"function": {"name"}}]}``,
    as the gateway records a request's tools) redacted."""
    if not isinstance(data, dict) or not isinstance(data.get("tools"), list):
        return data
    tools = []
    for t in data["tools"]:
        if isinstance(t, dict):
            t = dict(t)
            if isinstance(t.get("name"), str):
                t["name"] = name(t["name"])
            fn = t.get("function")
            if isinstance(fn, dict) and isinstance(fn.get("name"), str):
                t["function"] = {**fn, "name": name(fn["name"])}
        tools.append(t)
    return {**data, "tools": tools} if tools != data["tools"] else data


def redact_names(event: Event, redactor: Any, state: Any = None) -> Event:
    """``event`` with the names and URLs in its payload redacted as identifiers are read (see the
    module docstring): tool names, participant names, sampling strings, URL paths and queries. Run
    before the payload walker, which then sees placeholders where the whole name was."""
    from molt.governance.redaction import ReplacementState

    st = state if state is not None else ReplacementState()

    def name(text: str) -> str:
        return _redact_identifier_text(redactor, text, st) if text else text

    def url(text: str) -> str:
        return _redact_url(redactor, text, st)

    update: dict[str, Any] = {}
    act = event.action
    if act is not None:
        a: dict[str, Any] = {}
        if getattr(act, "type", None) == "tool_call" and (n := name(act.tool_name)) != act.tool_name:
            a["tool_name"] = n or "tool"
        if getattr(act, "type", None) == "agent_step" and (n := name(act.name)) != act.name:
            a["name"] = n
        if getattr(act, "type", None) == "generation":
            calls = _tool_calls(act.tool_calls, name)
            if calls is not act.tool_calls:
                a["tool_calls"] = calls
            if act.sampling:
                sampling = {k: _map_strings(v, name) for k, v in act.sampling.items()}
                if sampling != act.sampling:
                    a["sampling"] = sampling
        if getattr(act, "type", None) == "user_message" and isinstance(act.content, list):
            content = _map_urls(act.content, url)
            if content is not act.content:
                a["content"] = content
        if a:
            update["action"] = act.model_copy(update=a)
    obs = event.observation
    if obs is not None:
        o: dict[str, Any] = {}
        if obs.messages:
            msgs = []
            for m in obs.messages:
                mu: dict[str, Any] = {}
                if m.name and (n := name(m.name)) != m.name:
                    mu["name"] = n
                calls = _tool_calls(m.tool_calls, name)
                if calls is not m.tool_calls:
                    mu["tool_calls"] = calls
                if isinstance(m.content, list):
                    content = _map_urls(m.content, url)
                    if content is not m.content:
                        mu["content"] = content
                msgs.append(m.model_copy(update=mu) if mu else m)
            if any(a is not b for a, b in zip(msgs, obs.messages, strict=True)):
                o["messages"] = msgs
        data = _tools_in_data(obs.data, name)
        if data is not obs.data:
            o["data"] = data
        if o:
            update["observation"] = obs.model_copy(update=o)
    tv = event.provenance.tool_versions
    if tv:
        tools = {name(k): v for k, v in tv.items()}
        if tools != tv:
            update["provenance"] = event.provenance.model_copy(update={"tool_versions": tools})
    return event.model_copy(update=update) if update else event


def redact_envelope(event: Event, redactor: Any, state: Any = None) -> tuple[Event, list[Any]]:
    """``event`` with the client-chosen envelope text redacted by ``redactor`` (a
    :class:`~molt.governance.redaction.Redactor`): the name, the session, agent and task, the tags
    (keys and values); and the :class:`RedactedSpan` records of what was replaced (field paths like
    ``metadata.task`` or ``metadata.tags.user``; never the value). The ids are :class:`EnvelopeIds`'
    work, run before: a session id that is still text here is one a digest did not replace (the
    pipeline's ids are off, or the caller redacts a record to keep)."""
    from molt.governance.redaction import ReplacementState

    state = state if state is not None else ReplacementState()
    records: list[Any] = []

    def one(path: str, text: str) -> str:
        spans = redactor.detect(text)
        if not spans:
            return text
        records.extend(_records(redactor, path, spans))
        return str(redactor.apply(text, spans, state))

    md = event.metadata
    update: dict[str, Any] = {}
    if event.session_id:
        session = clip(one("session_id", event.session_id), _SESSION_MAX)
        if session != event.session_id:
            update["session_id"] = session
    if event.name:
        name = clip(_redact_identifier_text(redactor, event.name, state, records, "name"), _NAME_MAX)
        if name != event.name:
            update["name"] = name
    md_update: dict[str, Any] = {}
    for path, chain in CLIENT_FIELDS[1:]:
        value = getattr(md, chain[1])
        if value:
            new = one(path, value)
            if new != value:
                md_update[chain[1]] = new
    if md.tags:
        tags: dict[str, Any] = {}
        for k, v in md.tags.items():
            nk = _redact_identifier_text(redactor, k, state, records, "metadata.tags")
            tags[nk] = _redact_identifier_text(redactor, v, state, records, f"metadata.tags.{nk}") \
                if isinstance(v, str) else v
        if tags != md.tags:
            md_update["tags"] = tags
    if md_update:
        update["metadata"] = md.model_copy(update=md_update)
    if not update:
        return event, records
    return event.model_copy(update=update), records
