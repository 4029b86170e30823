"""Bounded payloads: what an adapter keeps of a framework's inputs and outputs.

Every payload field of a captured event (observation, action, outcome) goes through
:func:`bound_payload` before it is built into an event: oversized values are cut structurally — the
result is still valid JSON, with markers saying what was cut — and binary or base64 blobs are replaced
by a note (or offloaded to a :class:`BlobStore`)::

    >>> bound_payload({"text": "x" * 10, "items": list(range(5))}, max_str=4, max_items=2)
    {'text': 'xxxx…[molt: truncated 6 of 10 chars]',
     'items': [0, 1, {'$molt': 'truncated', 'omitted_items': 3}]}

An error is kept the same way, as data: :func:`error_outcome`. Both run on the dispatcher thread
(:mod:`molt.capture.dispatch`), never on the agent's; :mod:`molt.capture.adapt` is the adapter API that
calls them.
"""

from __future__ import annotations

import base64
import binascii
import collections
import dataclasses
import datetime as _dt
import enum
import hashlib
import itertools
import math
import os
import re
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel

from molt.atdp.models import ErrorInfo, Outcome, OutcomeStatus

__all__ = ["MARKER_KEY", "MAX_FIELD_BYTES", "BlobStore", "DirectoryBlobStore", "bound_payload", "clip", "error_outcome",
           "max_length", "text_of"]

#: The key that marks a structural truncation or a dropped blob inside a bounded payload.
MARKER_KEY = "$molt"

# Defaults sized so that a whole event stays well under the Recorder's 1 MiB record cap even when
# observation, action and outcome are all large: each payload field is bounded on its own.
MAX_FIELD_BYTES = 192 * 1024
_MAX_STR = 32 * 1024
_MAX_ITEMS = 256
_MAX_DEPTH = 24
_BLOB_MIN_CHARS = 512  # shorter base64-looking strings are kept (ids, hashes, short tokens)

_B64_RE = re.compile(r"[A-Za-z0-9+/_-]+={0,2}")
_DATA_URI_RE = re.compile(r"data:([\w.+-]+/[\w.+-]+)?(;[\w-]+=[\w.-]+)*;base64,", re.ASCII)


# --------------------------------------------------------------------------- payload bounding


class BlobStore(Protocol):
    """Where binary payloads go instead of the event: returns a reference (a URI) to put in its place."""

    def put(self, data: bytes, media_type: str | None) -> str:
        """Store ``data`` and return a reference to it."""
        ...


class DirectoryBlobStore:
    """A content-addressed :class:`BlobStore` in a local directory (``<dir>/<sha256>``).

    Args:
        root: the directory (created on first use).
    """

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root).expanduser()

    def put(self, data: bytes, media_type: str | None) -> str:
        """Write ``data`` once under its SHA-256 and return a ``file://`` URI."""
        digest = hashlib.sha256(data).hexdigest()
        path = self.root / digest
        if not path.exists():
            self.root.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_bytes(data)
            tmp.replace(path)
        return path.resolve().as_uri()


def _blob_note(
    data: bytes | None, n_chars: int, media_type: str | None, store: BlobStore | None, encoding: str
) -> dict[str, Any]:
    note: dict[str, Any] = {MARKER_KEY: "blob", "encoding": encoding, "chars": n_chars}
    if media_type:
        note["media_type"] = media_type
    if data is not None:
        note["bytes"] = len(data)
        note["sha256"] = hashlib.sha256(data).hexdigest()
        if store is not None:
            try:
                note["ref"] = store.put(data, media_type)
                note[MARKER_KEY] = "offloaded"
                return note
            except Exception as exc:  # an unwritable blob store drops the blob, never the event
                note["offload_error"] = repr(exc)[:200]
    note[MARKER_KEY] = "dropped"
    return note


def _as_blob(s: str, store: BlobStore | None) -> dict[str, Any] | None:
    """A note replacing ``s`` if it is a data URI or a long base64 run, else None."""
    if len(s) < _BLOB_MIN_CHARS:
        return None
    m = _DATA_URI_RE.match(s)
    body = s[m.end() :] if m else s
    if not m:
        head = s[:4096]
        if " " in head[:200] or not _B64_RE.fullmatch(head) or not _looks_random(head):
            return None  # cheap rejection of ordinary text (and of "xxxx…") before the full scan
    if not _B64_RE.fullmatch(body):
        return None
    try:
        data = base64.b64decode(
            body + "=" * (-len(body) % 4),
            altchars=b"-_" if ("-" in body or "_" in body) else None,
            validate=False,
        )
    except (binascii.Error, ValueError):
        data = None
    return _blob_note(data, len(s), m.group(1) if m else None, store, "data-uri" if m else "base64")


def _looks_random(head: str) -> bool:
    """Encoded binary mixes cases and digits; long words, hex dumps and repeated letters do not."""
    chars = set(head)
    return (
        len(chars) >= 20
        and any(c.isdigit() for c in chars)
        and any(c.isupper() for c in chars)
        and any(c.islower() for c in chars)
    )


def _truncate_str(s: str, max_str: int) -> str:
    return f"{s[:max_str]}…[molt: truncated {len(s) - max_str:,} of {len(s):,} chars]"


class _Bounder:
    def __init__(self, max_str: int, max_items: int, max_depth: int, store: BlobStore | None, sanitize: bool = False):
        self.sanitize = sanitize
        self.max_str = max_str
        self.max_items = max_items
        self.max_depth = max_depth
        self.store = store
        self.seen: set[int] = set()

    def __call__(self, v: Any, depth: int = 0) -> Any:
        if v is None or isinstance(v, bool):
            return v
        if isinstance(v, int):
            if isinstance(v, enum.Enum):
                return self(v.value, depth)
            return v if -(1 << 63) <= v < (1 << 64) else str(v)  # JSON encoders stop at 64 bits
        if isinstance(v, float):
            return v if math.isfinite(v) else str(v)
        if isinstance(v, str):
            if self.sanitize:
                v = v.encode("utf-8", "replace").decode("utf-8")  # lone surrogates are not UTF-8
            note = _as_blob(v, self.store)
            if note is not None:
                return note
            return v if len(v) <= self.max_str else _truncate_str(v, self.max_str)
        if isinstance(v, bytes | bytearray | memoryview):
            b = bytes(v)
            try:
                text = b.decode("utf-8")
            except UnicodeDecodeError:
                return _blob_note(b, len(b), None, self.store, "bytes")
            return self(text, depth)
        if depth >= self.max_depth:
            return {MARKER_KEY: "truncated", "reason": "depth", "type": type(v).__name__}
        if isinstance(v, enum.Enum):
            return self(v.value, depth)
        if isinstance(v, uuid.UUID | _dt.datetime | _dt.date | _dt.time | Path):
            return str(v) if not isinstance(v, _dt.datetime | _dt.date | _dt.time) else v.isoformat()
        oid = id(v)
        if oid in self.seen:
            return {MARKER_KEY: "truncated", "reason": "cycle"}
        self.seen.add(oid)
        try:
            return self._container(v, depth)
        finally:
            self.seen.discard(oid)

    def _container(self, v: Any, depth: int) -> Any:
        if isinstance(v, Mapping):
            out: dict[str, Any] = {}
            for i, (k, item) in enumerate(v.items()):
                if i >= self.max_items:
                    out[MARKER_KEY] = "truncated"
                    out["$molt_omitted_keys"] = len(v) - self.max_items
                    break
                key = k if isinstance(k, str) else _unfailing(str, k)
                if self.sanitize:
                    key = key.encode("utf-8", "replace").decode("utf-8")
                out[key] = self(item, depth + 1)
            return out
        if isinstance(v, list | tuple | set | frozenset | collections.deque):
            seq = list(v) if not isinstance(v, list | tuple) else v
            items = [self(x, depth + 1) for x in itertools.islice(seq, self.max_items)]
            if len(seq) > self.max_items:
                items.append({MARKER_KEY: "truncated", "omitted_items": len(seq) - self.max_items})
            return items
        dumped = _to_plain(v)
        if dumped is not v:
            return self(dumped, depth)
        text = _unfailing(repr, v)
        return text if len(text) <= self.max_str else _truncate_str(text, self.max_str)


def _unfailing(fn: Callable[[Any], str], v: Any) -> str:
    """``fn(v)``, or a placeholder when the object's ``__str__``/``__repr__`` raises."""
    try:
        return fn(v)
    except Exception:
        return f"<unprintable {type(v).__name__}>"


def text_of(value: Any) -> str:
    """``str(value)``, or ``<unprintable TYPE>`` when its ``__str__`` raises: for a mapper that puts a
    framework object's name or label into an event, so that an object which cannot print itself
    costs that text, not the event."""
    return value if isinstance(value, str) else _unfailing(str, value)


def clip(s: Any, limit: int) -> Any:
    """A string cut to ``limit`` characters, ending in a digest of the whole so that distinct long
    values stay distinct; anything else unchanged."""
    if not isinstance(s, str) or len(s) <= limit:
        return s
    digest = hashlib.sha256(s.encode("utf-8", "replace")).hexdigest()[:16]
    return f"{s[: limit - 18]}…~{digest}"


def max_length(model: type[BaseModel], field: str) -> int:
    """The ``max_length`` a model declares for one of its string fields (a ``ValueError`` when it
    declares none): for code that rewrites a validated field in place, which must keep its bound."""
    for constraint in model.model_fields[field].metadata:
        limit = getattr(constraint, "max_length", None)
        if isinstance(limit, int):
            return limit
    raise ValueError(f"{model.__name__}.{field} declares no max_length")


def _to_plain(v: Any) -> Any:
    """Turn a model object into plain data; returns ``v`` itself when it knows no better way."""
    dump = getattr(v, "model_dump", None)  # pydantic v2
    if callable(dump):
        try:
            return dump(mode="json", exclude_none=True)
        except Exception:
            try:
                return dump()
            except Exception:
                return v
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {f.name: getattr(v, f.name, None) for f in dataclasses.fields(v)}
    to_dict = getattr(v, "to_dict", None) or getattr(v, "dict", None)
    if callable(to_dict):
        try:
            out = to_dict()
        except Exception:
            return v
        return out if isinstance(out, Mapping) else v
    return v


def _json_size(v: Any) -> int:
    import orjson

    return len(orjson.dumps(v))


_FLAT_MAX_STR = min(_BLOB_MIN_CHARS - 1, 255)


def _flat_copy(value: dict[Any, Any], max_str: int, max_bytes: int) -> dict[str, Any] | None:
    """A copy of ``value`` when the walk would return it unchanged and under ``max_bytes``, else None.

    That is a dict of ASCII string keys to None, bools, 64-bit ints, finite floats and short ASCII
    strings (shorter than any blob, within ``max_str``): the walk keeps each such leaf as it is, and
    the bound below (each character escaped at most six times over, numbers at most 32 bytes) keeps
    the copy under ``max_bytes`` without serializing it. Tool arguments and small chain inputs are
    mostly of this shape.
    """
    limit = min(max_str, _FLAT_MAX_STR)
    chars = 0
    for k, v in value.items():
        if type(k) is not str or not k.isascii():
            return None
        chars += len(k)
        if v is None or v is True or v is False:
            continue
        t = type(v)
        if t is str:
            if len(v) > limit or not v.isascii():
                return None
            chars += len(v)
        elif t is int:
            if not -(1 << 63) <= v < (1 << 64):
                return None
        elif t is float:
            if not math.isfinite(v):
                return None
        else:
            return None
    if max_bytes > 0 and 6 * chars + 40 * len(value) + 2 > max_bytes:
        return None
    return dict(value)


def bound_payload(
    value: Any,
    *,
    max_bytes: int = MAX_FIELD_BYTES,
    max_str: int = _MAX_STR,
    max_items: int = _MAX_ITEMS,
    max_depth: int = _MAX_DEPTH,
    blob_store: BlobStore | None = None,
) -> Any:
    """``value`` as JSON-ready data no larger than about ``max_bytes`` serialized.

    Strings longer than ``max_str`` characters keep their head and end in a ``…[molt: truncated …]``
    marker; lists and mappings longer than ``max_items`` keep their head and gain a ``{"$molt":
    "truncated", …}`` entry; nesting deeper than ``max_depth`` becomes such an entry; base64 runs,
    ``data:`` URIs and non-UTF-8 bytes become ``{"$molt": "dropped"|"offloaded", "sha256": …}`` notes
    (offloaded to ``blob_store`` when one is given). Pydantic models and dataclasses are dumped,
    anything else becomes its ``repr``. When the result is still over ``max_bytes``, the string and
    item limits are halved until it fits; the result is always valid JSON.
    """
    if (
        value is None
        or isinstance(value, bool)
        or (
            isinstance(value, str)
            and len(value) < _BLOB_MIN_CHARS
            and len(value) <= max_str
            and value.isascii()
            and len(value) * 3 < max_bytes
        )
    ):
        return value  # the common case (short text, flags) needs no walk and no size check
    if type(value) is dict and max_depth > 0 and len(value) <= max_items:
        flat = _flat_copy(value, max_str, max_bytes)
        if flat is not None:
            return flat
    sanitize = False
    out = _Bounder(max_str, max_items, max_depth, blob_store)(value)
    try:
        size = _json_size(out)
    except TypeError:  # a string that is not valid UTF-8 (lone surrogates): clean strings, retry
        sanitize = True
        out = _Bounder(max_str, max_items, max_depth, blob_store, sanitize)(value)
        size = _json_size(out)
    if max_bytes <= 0:
        return out
    while size > max_bytes and (max_str > 16 or max_items > 1):
        # Shrink towards the budget in proportion, so a 100x overshoot takes a few passes, not seven.
        ratio = max(max_bytes / size, 0.05) * 0.9
        max_str = max(16, min(max_str // 2, int(max_str * ratio)))
        max_items = max(1, min(max_items // 2, int(max_items * ratio) or 1))
        out = _Bounder(max_str, max_items, max_depth, blob_store, sanitize)(value)
        size = _json_size(out)
    if size > max_bytes:
        return {MARKER_KEY: "truncated", "reason": "size", "bytes": size}
    return out


def error_outcome(
    exc: BaseException | Mapping[str, Any] | str, *, status: OutcomeStatus | None = None, output: Any = None
) -> Outcome:
    """An :class:`Outcome` describing an error as data (never raised).

    ``GeneratorExit`` and ``asyncio.CancelledError`` become ``cancelled``, ``TimeoutError``
    ``timeout``, ``KeyboardInterrupt`` ``interrupted``; anything else ``error``, unless ``status`` says.
    """
    if isinstance(exc, BaseException):
        etype, message = type(exc).__name__, text_of(exc) or type(exc).__name__
        if status is None:
            if isinstance(exc, GeneratorExit) or etype == "CancelledError":
                status = OutcomeStatus.CANCELLED
            elif isinstance(exc, TimeoutError):
                status = OutcomeStatus.TIMEOUT
            elif isinstance(exc, KeyboardInterrupt):
                status = OutcomeStatus.INTERRUPTED
    elif isinstance(exc, Mapping):
        etype = text_of(exc.get("type") or exc.get("code") or "Error")
        message = text_of(exc.get("message") or exc)
    else:
        etype, message = "Error", text_of(exc)
    return Outcome(
        status=status or OutcomeStatus.ERROR,
        output=output,
        error=ErrorInfo(type=etype[:200], message=message[:4000]),
    )


