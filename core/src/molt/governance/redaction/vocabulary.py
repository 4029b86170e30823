"""Operator vocabulary: the organisation and place names an operator writes into a system prompt that
many conversations share are the operator's configuration, not any end user's data.

An agent's system prompt names the business it serves ("You are the help desk of Pinecrest Public
Library"). Redacting that name everywhere turns a user's correction ("the late fine at Pinecrest
Public Library is 35 cents a day") into "the late fine at <ORGANIZATION_1> is …": the control plane's
memory then names nothing, and the replays it is judged by re-drive prompts a model reads worse than
the live ones. The name is not personal data in the first place — it is the same in every
conversation of the agent.

The rule is k-anonymity on the prompt itself, learned from the traffic:

- a system prompt counts as shared configuration once the *same text* (by digest) has been seen in
  ``after`` distinct conversations (session, else trajectory) of one tenant, and only if nothing in it
  but organisation and place names was detected — a prompt naming a person, or holding an e-mail, a
  phone number or any other identifier, is about someone and never counts;
- from then on, an organisation or place span found anywhere in that tenant's events — a user
  message, a tool result, a late reward's reason — is kept when its text is written, as whole words,
  in one of the tenant's shared prompts ("Pinecrest Public Library", or "Pinecrest" alone). What the
  detector saw in the prompt does not decide it: whether a capitalised run reads as a name depends
  on its context ("assistant of Kestrel Bay Marina" is not flagged, "at Kestrel Bay Marina" is), and
  the prompt text is what the operator wrote. Person names and structured identifiers are never kept.

Until a prompt has been seen often enough its names are redacted as any other; what was stored then
stays redacted. The state lives in memory only (digests of prompts and conversations, and the shared
prompts' text), bounded, and is learned again after a restart.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterable

__all__ = ["KEEPABLE_TYPES", "OperatorVocabulary"]

#: Entity types the vocabulary may keep: an organisation or a place is shared by many people.
KEEPABLE_TYPES = frozenset({"ORGANIZATION", "LOCATION"})


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class OperatorVocabulary:
    """What one tenant's governance has learned about its shared system prompts (thread-safe).

    ``after`` — distinct conversations a prompt must be seen in before it is shared (≥ 2).
    ``max_prompts`` bounds the prompts being counted and ``max_shared`` the shared ones kept: past
    them, counting starts over and the shared prompts are forgotten (forgetting only means redacting
    more).
    """

    def __init__(self, after: int = 3, *, max_prompts: int = 4096, max_shared: int = 64):
        if after < 2:
            raise ValueError("after must be at least 2: one conversation's prompt may be about its user.")
        self.after = after
        self.max_prompts = max_prompts
        self.max_shared = max_shared
        self._lock = threading.Lock()
        # prompt digest -> digests of the conversations seen with it (fewer than `after`)
        self._seen: dict[bytes, set[bytes]] = {}
        self._settled: set[bytes] = set()  # prompt digests counted to the end, either way
        self._shared: tuple[str, ...] = ()  # the shared prompts, whitespace normalised
        self._answers: dict[str, bool] = {}  # span text -> kept? (for the current shared prompts)

    @property
    def shared(self) -> tuple[str, ...]:
        """The shared prompts (whitespace normalised)."""
        return self._shared

    def __bool__(self) -> bool:
        return bool(self._shared)

    def keeps(self, text: str) -> bool:
        """Whether a detected organisation or place ``text`` is the operator's: written as whole
        words in a shared prompt."""
        name = " ".join(text.split())
        got = self._answers.get(name)
        if got is None:
            got = bool(name) and any(_whole_words(name, p) for p in self._shared)
            if len(self._answers) >= 4096:
                self._answers.clear()
            self._answers[name] = got
        return got

    def observe(self, conversation: str, prompt: str, detect: Callable[[], Iterable[tuple[str, str]]]) -> bool:
        """Count ``prompt`` (a system prompt) as seen in ``conversation``. ``detect`` returns what
        detection finds in it, as ``(entity_type, text)``; it is called only when the prompt still
        counts and this conversation is new to it, so a prompt already decided, or repeated within
        one conversation, costs a digest. Returns True when this made the prompt shared."""
        key = _digest(prompt)
        seen = _digest(conversation)
        with self._lock:
            convs = self._seen.get(key)
            if key in self._settled or (convs is not None and seen in convs):
                return False
        found = list(detect())  # outside the lock: detection is the expensive part
        with self._lock:
            if len(self._settled) >= self.max_prompts:
                self._settled.clear()
            if key in self._settled:
                return False
            if any(t not in KEEPABLE_TYPES for t, _ in found):
                self._settled.add(key)  # the prompt is about someone
                return False
            convs = self._seen.get(key)
            if convs is None:
                if len(self._seen) >= self.max_prompts:
                    self._seen.clear()
                convs = self._seen[key] = set()
            convs.add(seen)
            if len(convs) < self.after:
                return False
            self._settled.add(key)
            del self._seen[key]
            text = " ".join(prompt.split())
            if text in self._shared:  # counted again after the settled set was cleared
                return False
            shared = self._shared if len(self._shared) < self.max_shared else ()
            self._shared = (*shared, text)
            self._answers = {}
            return True


def _whole_words(name: str, prompt: str) -> bool:
    """``name`` occurs in ``prompt`` with no word character joined to either end."""
    start = prompt.find(name)
    while start >= 0:
        end = start + len(name)
        before = prompt[start - 1] if start else " "
        after = prompt[end] if end < len(prompt) else " "
        if not (before.isalnum() or before == "_") and not (after.isalnum() or after == "_"):
            return True
        start = prompt.find(name, start + 1)
    return False

