"""The :class:`Redactor`: run a policy's detectors over text, resolve overlaps, replace spans.

>>> r = Redactor()
>>> text, spans = r.redact("Mail ana.lima@example.org or call +1 415 555 0100.")
>>> text
'Mail <EMAIL_ADDRESS_1> or call <PHONE_NUMBER_1>.'
>>> [(s.entity_type, s.start, s.end) for s in spans]
[('EMAIL_ADDRESS', 5, 25), ('PHONE_NUMBER', 34, 49)]

Offsets in the returned spans index the *original* text; the redacted text is never needed to
interpret them, and the original values are never stored anywhere.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable

from molt.errors import GovernanceError, MoltError
from molt.governance.redaction.base import DIGIT, Detector, Span, detectors
from molt.governance.redaction.mentions import MENTION, MENTION_TYPES, Alone, with_mentions
from molt.governance.redaction.normalize import fold_for_detection
from molt.governance.redaction.policy import RedactionPolicy, ReplacementMode, policies
from molt.registry import Registry

try:  # the compiled build's class options (see native.py); mypy, which makes that build, brings it
    from mypy_extensions import mypyc_attr
except ImportError:  # pragma: no cover - without mypy there is no compiled build to configure

    def mypyc_attr(*attrs: str, **kwattrs: object) -> Callable[[type], type]:  # type: ignore[misc]
        return lambda cls: cls


__all__ = ["Redactor", "ReplacementState", "redactors", "resolve_overlaps"]

_DIGIT = re.compile(r"\d")
_PLACEHOLDER = re.compile(r"<([A-Z][A-Z_]*?)_(\d{1,6})>")
_SEPARATOR = "\n\n"
_CACHE_MAX_TEXT = 8192


def resolve_overlaps(spans: list[Span]) -> list[Span]:
    """Non-overlapping spans, sorted by start: where spans overlap, the higher score wins, then the
    longer span, so a Luhn-valid card number beats the phone number inside it."""
    if len(spans) < 2:
        return sorted(spans)
    ranked = sorted(spans, key=lambda s: (-s.score, s.start - s.end, s.start))
    starts: list[int] = []  # the taken spans, kept sorted by start (they never overlap)
    taken: list[Span] = []
    for span in ranked:
        i = bisect_right(starts, span.start)
        if i and taken[i - 1].end > span.start:
            continue  # overlaps the taken span that starts at or before it
        if i < len(taken) and taken[i].start < span.end:
            continue  # overlaps the next taken span
        starts.insert(i, span.start)
        taken.insert(i, span)
    return taken


def _own(spans: list[Span]) -> list[Span]:
    """``spans`` without the mentions (:mod:`~molt.governance.redaction.mentions`): what a text yields alone."""
    for sp in spans:
        if sp.detector == MENTION:
            return [sp for sp in spans if sp.detector != MENTION]
    return spans


class ReplacementState:
    """Per-scope memory for placeholder numbering: the same value gets the same ``<TYPE_n>``.

    One state is shared by every field of an event, so a name in the user message and the same name
    in a tool result get the same placeholder. It holds values only in memory, never in a report.
    """

    def __init__(self) -> None:
        self._numbers: dict[tuple[str, str], int] = {}
        self._counts: dict[str, int] = {}

    def reserve(self, text: str) -> None:
        """Number new values past the ``<TYPE_n>`` placeholders ``text`` already holds (text an
        earlier pass redacted), so a second pass never gives a new value a number in use."""
        for m in _PLACEHOLDER.finditer(text):
            ty, n = m.group(1), int(m.group(2))
            if n > self._counts.get(ty, 0):
                self._counts[ty] = n

    def placeholder(self, entity_type: str, value: str) -> str:
        """``<TYPE_n>`` for ``value``, numbering new values from 1 per type."""
        key = (entity_type, " ".join(value.casefold().split()))
        n = self._numbers.get(key)
        if n is None:
            n = self._counts.get(entity_type, 0) + 1
            self._counts[entity_type] = n
            self._numbers[key] = n
        return f"<{entity_type}_{n}>"


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled, it may still be subclassed (a custom redactor)
class Redactor:
    """Redacts text under a :class:`RedactionPolicy` (the ``default`` policy if none is given).

    Detectors are built once from the policy's ``detectors`` names; a detector that raises is
    surfaced as :class:`~molt.errors.GovernanceError` naming it, since a silently skipped detector
    would let personal data through. A detector whose ``requires`` substring (or digit) is absent
    from a text is not called at all.

    ``cache_size`` bounds the memo :meth:`detect_many` keeps (digest of a field's text → spans,
    :func:`~molt.governance.redaction.base.text_key`; no text is stored) and turns the detectors'
    own memos off when 0 — use 0 to time repeated texts. ``mentions=False`` leaves out what
    :mod:`~molt.governance.redaction.mentions` adds (every further occurrence of a name found), so
    each occurrence is judged by the words around it alone.
    """

    def __init__(
        self,
        policy: RedactionPolicy | None = None,
        *,
        extra_detectors: list[Detector] | None = None,
        cache_size: int = 4096,
        mentions: bool = True,
    ):
        self.policy = policy or policies.get("default")
        try:
            self.detectors: list[Detector] = [detectors.get(name)() for name in self.policy.detectors]
        except MoltError:
            raise
        except Exception as exc:
            raise GovernanceError(f"A detector of policy {self.policy.name!r} could not be built: {exc}") from exc
        self.detectors.extend(extra_detectors or [])
        wanted = self.policy.entities
        self.detectors = [d for d in self.detectors if d.entities & wanted]
        self._plan = [(d, getattr(d, "requires", None)) for d in self.detectors]
        # the policy keeps countries and larger places (see RedactionPolicy.keep_country_level_places):
        # a detector that knows the world's countries says which LOCATION spans are one
        self._country_level: Callable[[str], bool] | None = None
        if self.policy.keep_country_level_places and "LOCATION" in wanted:
            for d in self.detectors:
                judge = getattr(d, "country_level", None)
                if callable(judge):
                    self._country_level = judge
                    break
        # a name found once is looked for again in the same text or event (molt.governance.redaction.
        # mentions); a detector that knows names says which word of a person's name names them alone
        self._mentions = mentions and bool(MENTION_TYPES & wanted)
        self._alone: Alone | None = None
        for d in self.detectors:
            alone = getattr(d, "identifies_alone", None)
            if callable(alone):
                self._alone = alone
                break
        self._stock_detect = type(self).detect is Redactor.detect
        if cache_size == 0:  # no memo anywhere: the detectors' own (the entity run memo) off too
            for d in self.detectors:
                if hasattr(d, "memo_size"):
                    d.memo_size = 0
        #: The policy's :meth:`~RedactionPolicy.fingerprint`, computed once.
        self.fingerprint = self.policy.fingerprint()
        # detect_many's memo: text_key of a field's text -> its spans. Agent traffic repeats itself
        # (system prompts, tool descriptions, boilerplate); keys are digests, so no text is kept.
        # 0 turns it off, and the detectors' own memos with it.
        self._cache_size = cache_size
        self._cache: dict[tuple[int, int], list[Span]] = {}
        # the policy's mode per entity type, and its name, kept as asked for (the policy is frozen)
        self._modes: dict[str, ReplacementMode] = {}
        self._mode_names: dict[str, str] = {}

    def detect(self, text: str) -> list[Span]:
        """The spans the policy would replace in ``text``: in scope, above ``min_score``, not
        allow-listed, overlaps resolved, and every further occurrence of a name found in it
        (:func:`~molt.governance.redaction.mentions.with_mentions`)."""
        spans = self._detect_one(text)
        if spans and self._mentions:
            spans = with_mentions([text], [spans], self._alone)[0]
        return spans

    def _detect_own(self, text: str) -> list[Span]:
        """A custom redactor's :meth:`detect`, less the mentions it looked for."""
        return _own(self.detect(text))

    def _detect_one(self, text: str) -> list[Span]:
        """What the detectors find in ``text`` under the policy, before mentions are looked for. They
        read the text Unicode-folded (:mod:`~molt.governance.redaction.normalize`: NFKC, invisible
        characters removed), and the spans index the original text."""
        folded = fold_for_detection(text)
        if folded is not None:
            return [Span(*folded.span(s.start, s.end), s.entity_type, s.score, s.detector)
                    for s in self._detect_folded(folded.text)]
        return self._detect_folded(text)

    def _detect_folded(self, text: str) -> list[Span]:
        """:meth:`_detect_one` of a text detectors can read as it is."""
        if not text or text.isspace():
            return []
        policy = self.policy
        wanted, min_score = policy.entities, policy.min_score
        found: list[Span] = []
        has_digit: bool | None = None
        for detector, requires in self._plan:
            if requires is not None:
                if requires is DIGIT:
                    if has_digit is None:
                        has_digit = _DIGIT.search(text) is not None
                    if not has_digit:
                        continue
                elif requires not in text:
                    continue
            try:
                spans = detector.detect(text)
            except Exception as exc:
                raise GovernanceError(
                    f"Redaction detector {getattr(detector, 'name', detector)!r} failed ({type(exc).__name__}: "
                    f"{exc}); fix it or remove it from policy {policy.name!r}, since skipping it would let "
                    "personal data through."
                ) from exc
            if spans:
                found.extend(s for s in spans if s.score >= min_score and s.entity_type in wanted)
        if not found:
            return found
        if policy.allow_list:
            found = [s for s in found if text[s.start : s.end] not in policy.allow_list]
        judge = self._country_level
        if judge is not None:
            found = [s for s in found if s.entity_type != "LOCATION" or not judge(text[s.start : s.end])]
        return resolve_overlaps(found)

    def detect_many(self, texts: list[str], known: list[list[Span] | None] | None = None) -> list[list[Span]]:
        """:meth:`detect` for each of ``texts`` (the string fields of one event), in one pass; a name
        found in any of them is looked for in all of them (the event is the scope of its mentions).
        ``known[i]``, where given and not None, is what ``texts[i]`` holds already (a field whose
        key says what its value is, :mod:`~molt.governance.redaction.fields`): no detector runs on
        it, and the names in it are looked for in the other texts like those found.

        The texts not seen before are joined by blank lines (no detector matches across one) and
        detected together, so thirty short fields cost one pass, not thirty; texts seen before
        (by digest) reuse their spans. The memo holds what each text yields alone: mentions, which
        depend on the other fields, are looked for after it, every time.
        """
        if known is not None and len(known) != len(texts):
            raise ValueError(f"known has {len(known)} entries for {len(texts)} texts")
        out: list[list[Span] | None] = [None] * len(texts) if known is None else list(known)
        todo: list[int] = []
        keys: list[tuple[int, int] | None] = [None] * len(texts)
        cache = self._cache if self._cache_size else None
        for i, t in enumerate(texts):
            if out[i] is not None:
                continue
            if cache is not None and len(t) <= _CACHE_MAX_TEXT:
                key = keys[i] = (len(t), hash(t))  # text_key(t), without an interpreted call
                hit = cache.get(key)
                if hit is not None:
                    out[i] = hit
                    continue
            todo.append(i)
        # detect() is the seam a custom redactor overrides, so an override is what runs here, the
        # mentions it adds within one text dropped; the stock one runs its detectors alone. Mentions
        # are looked for once, below, over all the texts.
        detect = self._detect_one if self._stock_detect else self._detect_own
        if len(todo) == 1:
            out[todo[0]] = detect(texts[todo[0]])
        elif todo:
            batch = [texts[i] for i in todo]
            joined = _SEPARATOR.join(batch)
            bases = []
            pos = 0
            for t in batch:
                bases.append(pos)
                pos += len(t) + len(_SEPARATOR)
            found: list[list[Span]] = [[] for _ in batch]
            for sp in detect(joined):
                j = bisect_right(bases, sp.start) - 1
                start, end = sp.start, sp.end
                base = bases[j]
                if end <= base + len(batch[j]):  # inside one text (a span never crosses a blank line)
                    found[j].append(Span(start - base, end - base, sp.entity_type, sp.score, sp.detector))
                    continue
                while j < len(batch) and start < end:  # clip one that does
                    base, n = bases[j], len(batch[j])
                    a, b = max(start, base), min(end, base + n)
                    if b > a:
                        found[j].append(Span(a - base, b - base, sp.entity_type, sp.score, sp.detector))
                    j += 1
                    start = base + n + len(_SEPARATOR)
            for i, spans in zip(todo, found, strict=True):
                out[i] = spans
        if cache is not None:
            if len(cache) > self._cache_size:
                cache.clear()
            for i in todo:
                digest = keys[i]
                if digest is not None:
                    cache[digest] = out[i]  # type: ignore[assignment]
        if self._mentions and any(out):
            return with_mentions(texts, out, self._alone)  # type: ignore[arg-type]
        return out  # type: ignore[return-value]

    def mode_of(self, entity_type: str) -> ReplacementMode:
        """The policy's replacement mode for ``entity_type``."""
        mode = self._modes.get(entity_type)
        if mode is None:
            mode = self._modes[entity_type] = self.policy.mode_for(entity_type)
        return mode

    def mode_name(self, entity_type: str) -> str:
        """:meth:`mode_of` as the plain string a report records."""
        name = self._mode_names.get(entity_type)
        if name is None:
            name = self._mode_names[entity_type] = str(self.mode_of(entity_type).value)
        return name

    def replacement(self, entity_type: str, value: str, state: ReplacementState) -> str:
        """What replaces ``value`` under the policy."""
        mode = self.mode_of(entity_type)
        if mode == ReplacementMode.PLACEHOLDER:
            return state.placeholder(entity_type, value)
        if mode == ReplacementMode.PSEUDONYM:
            return self.policy.pseudonym(entity_type, value)
        if mode == ReplacementMode.SURROGATE:
            return self.policy.surrogate(entity_type, value)
        return self.policy.mask_char * (self.policy.mask_length or len(value))

    def apply(self, text: str, spans: list[Span], state: ReplacementState | None = None) -> str:
        """``text`` with each (non-overlapping, sorted) span replaced."""
        if not spans:
            return text
        state = state or ReplacementState()
        if "<" in text:
            state.reserve(text)
        parts: list[str] = []
        pos = 0
        for s in spans:
            parts.append(text[pos : s.start])
            parts.append(self.replacement(s.entity_type, text[s.start : s.end], state))
            pos = s.end
        parts.append(text[pos:])
        return "".join(parts)

    def redact(self, text: str, state: ReplacementState | None = None) -> tuple[str, list[Span]]:
        """``(redacted_text, spans)``; span offsets index the original ``text``."""
        spans = self.detect(text)
        return self.apply(text, spans, state), spans


#: Redactor factories by name (a factory takes a policy). ``default`` is :class:`Redactor`.
redactors: Registry[Callable[[RedactionPolicy | None], Redactor]] = Registry("redactor")
redactors.register("default", Redactor)
