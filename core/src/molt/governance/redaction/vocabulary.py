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
- from then on, the organisation and place names detected in it are the tenant's vocabulary: a span
  of those types whose text is one of them, or a run of whole words of one ("Pinecrest" of "Pinecrest
  Public Library"), is kept wherever it appears in that tenant's events — a user message, a tool
  result, a late reward's reason. Person names and structured identifiers are never kept by it.

Until a prompt has been seen often enough its names are redacted as any other; what was stored then
stays redacted. The state lives in memory only (digests of prompts and conversations, and the names
themselves), bounded, and is learned again after a restart.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable

__all__ = ["KEEPABLE_TYPES", "OperatorVocabulary"]

#: Entity types the vocabulary may keep: an organisation or a place is shared by many people.
KEEPABLE_TYPES = frozenset({"ORGANIZATION", "LOCATION"})


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class OperatorVocabulary:
    """What one tenant's governance has learned about its shared system prompts (thread-safe).

    ``after`` — distinct conversations a prompt must be seen in before its names are kept (≥ 2).
    ``max_prompts`` / ``max_names`` bound the memory: past them, counting starts over and the names
    learned are forgotten (forgetting only means redacting more).
    """

    def __init__(self, after: int = 3, *, max_prompts: int = 4096, max_names: int = 1024):
        if after < 2:
            raise ValueError("after must be at least 2: one conversation's prompt may be about its user.")
        self.after = after
        self.max_prompts = max_prompts
        self.max_names = max_names
        self._lock = threading.Lock()
        # prompt digest -> digests of the conversations seen with it (at most `after`)
        self._seen: dict[bytes, set[bytes]] = {}
        self._settled: set[bytes] = set()  # prompt digests counted to the end, either way
        self._names: frozenset[str] = frozenset()
        self._keeps: frozenset[str] = frozenset()

    @property
    def names(self) -> frozenset[str]:
        """The kept names, whole, as detected in the shared prompts."""
        return self._names

    @property
    def keeps(self) -> frozenset[str]:
        """Every text a kept span may have: the names and their capitalised runs of whole words."""
        return self._keeps

    def settled(self, prompt: str) -> bool:
        """Whether ``prompt`` needs no more counting: it is shared already, or it can never be (so a
        caller may skip detecting on it again)."""
        return _digest(prompt) in self._settled

    def observe(self, conversation: str, prompt: str, found: Iterable[tuple[str, str]]) -> bool:
        """Count ``prompt`` (a system prompt) as seen in ``conversation``; ``found`` is what detection
        found in it, as ``(entity_type, text)``. Returns True when this made new names kept."""
        found = list(found)
        key = _digest(prompt)
        with self._lock:
            if len(self._settled) >= self.max_prompts:
                self._settled.clear()
            if not found or any(t not in KEEPABLE_TYPES for t, _ in found):
                self._settled.add(key)  # nothing to keep, or the prompt is about someone
                return False
            names = {" ".join(text.split()) for _, text in found}
            if names <= self._names:
                self._settled.add(key)
                return False
            convs = self._seen.get(key)
            if convs is None:
                if len(self._seen) >= self.max_prompts:
                    self._seen.clear()
                convs = self._seen[key] = set()
            convs.add(_digest(conversation))
            if len(convs) < self.after:
                return False
            self._settled.add(key)
            del self._seen[key]
            kept = names if len(self._names) + len(names) > self.max_names else self._names | names
            self._names = frozenset(kept)
            self._keeps = frozenset(p for n in kept for p in _word_runs(n))
            return True


def _word_runs(name: str) -> Iterable[str]:
    """``name`` and every contiguous run of its whole words that starts with a capital letter
    ("Pinecrest Public Library" → "Pinecrest", "Pinecrest Public", "Public Library", …): how the
    same name is written shorter. Runs of lower-case words ("of", "the") are not names."""
    words = name.split()
    yield name
    for i in range(len(words)):
        if not words[i][:1].isupper():
            continue
        for j in range(i + 1, len(words) + 1):
            if j - i < len(words):
                yield " ".join(words[i:j])
