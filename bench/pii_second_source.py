"""A second labelled PII source, from a different generator than the development set.

    python bench/pii_second_source.py [--n 1500] [--seed 2027] [--out second_source.json]

The development set (``../shared/data/pii``) comes from presidio-research's generator: English
sentence templates, US-centred values. This one is written independently of it and of the
detectors: its own sentence templates (support chats, agent tool calls, JSON payloads, log lines,
e-mail signatures, in English, German, French, Spanish, Italian, Dutch, Polish and Portuguese) filled
with values from `Faker <https://faker.readthedocs.io>`_ in ten locales, so names, addresses, phone
formats, IBANs and companies are the locales' own. Card numbers come from Faker's card generator
(Visa 13/16/19, Mastercard incl. the 2-series, Amex, Discover, JCB 15/16, Diners, Maestro) written
with the separators people use.

It is a *report-only* set (the benchmark prints it; no test asserts a figure from it), in two
parts: :data:`TEMPLATES` were inspected for error analysis while the card, IBAN and phone detectors
were reworked (their misses there led to taking the whole of JCB's 35 block, the old Maestro 0604
range and phone cue words in more languages), so their figures are not blind; :data:`BLIND_TEMPLATES`
were written before any result on them was seen and are reported as they came out.

Records use the development set's format (``full_text``,
``spans`` with ``entity_type``/``start_position``/``end_position``, ``template_id``), so
:func:`molt.governance.redaction.evaluate.evaluate` scores both the same way. Generation is
deterministic for a seed; nothing is written unless ``--out`` is given.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from typing import Any

LOCALES = ["en_US", "en_GB", "de_DE", "fr_FR", "es_ES", "it_IT", "nl_NL", "pl_PL", "pt_BR", "en_IN"]
NO_IBAN = {"en_US", "en_IN"}
IBAN_LOCALES = [loc for loc in LOCALES if loc not in NO_IBAN]
CARD_TYPES = ["visa16", "visa13", "visa19", "mastercard", "amex", "discover", "jcb15", "jcb16", "diners", "maestro"]

# {slot} placeholders; each slot names a value kind (see _value). Sentences by language, so a
# German template gets a de_DE value where the kind is locale-bound.
TEMPLATES: list[tuple[str, str]] = [
    ("en", "Hi, this is {person} — my card {card} was charged twice, can you refund one?"),
    ("en", "Customer {person} ({email}) asked us to update the billing card to {card}."),
    ("en", "Please wire the deposit to IBAN {iban} and send the receipt to {email}."),
    ("en", "I moved! New address: {address}. Phone is still {phone}."),
    ("en", "Escalating: {person} from {org} cannot log in from {ip} since this morning."),
    ("en", "My social is {ssn}, the form keeps rejecting it."),
    ("en", "Call me back on {phone} or write to {email}, thanks — {first}"),
    ("en", "Our office is in {city}, {country}; visit {url} for opening hours."),
    ("en", "The parcel for {person} is stuck in {city}. Ship it to {address} instead."),
    ("en", "Login alerts for {email}: new sign-in from {ip6} at 03:12 UTC."),
    ("en", "{person} works at {org} and asked for the invoice to go to {email}."),
    ("json", '{{"customer": {{"name": "{person}", "email": "{email}", "phone": "{phone}"}}, "status": "open"}}'),
    ("json", '{{"payment": {{"card_number": "{card}", "holder": "{person}"}}, "amount": 42.5}}'),
    ("json", '{{"tool": "crm.update", "args": {{"iban": "{iban}", "company": "{org}"}}}}'),
    ("json", '{{"shipping_address": "{address}", "contact": "{person}"}}'),
    ("log", "2026-03-04T10:22:31Z INFO login ok user={email} src={ip} ua=Mozilla/5.0"),
    ("log", "WARN payment declined pan={card} merchant={org} retry=2"),
    ("log", "DEBUG geo lookup ip={ip} -> {city}, {country}"),
    ("sig", "Best regards,\n{person}\n{org}\n{address}\nTel. {phone}"),
    ("de", "Hallo, ich bin {person} und wohne in {address}. Meine Nummer: {phone}."),
    ("de", "Bitte überweisen Sie den Betrag auf {iban} (Kontoinhaber {person})."),
    ("de", "Die Karte {card} wurde abgelehnt, bitte melden Sie sich unter {email}."),
    ("fr", "Bonjour, je m'appelle {person}, j'habite à {city}. Mon téléphone : {phone}."),
    ("fr", "Merci de rembourser sur la carte {card} ou l'IBAN {iban}."),
    ("es", "Hola, soy {person} de {org}; mi correo es {email} y mi teléfono {phone}."),
    ("es", "Envíen el pedido a {address}, por favor."),
    ("it", "Buongiorno, sono {person}. Il mio IBAN è {iban}, la carta {card}."),
    ("nl", "Hoi, ik ben {person} uit {city}. Bel me op {phone}."),
    ("pl", "Dzień dobry, nazywam się {person}, mój adres to {address}."),
    ("pt", "Olá, sou {person} da {org}. Meu e-mail é {email}."),
]
# Templates of the *blind* part: written before any result on them was looked at, and measured only
# by the benchmark (the part above was inspected while the card, IBAN and phone detectors were
# reworked, so its figures are not blind). template_id of these starts at BLIND_FROM.
BLIND_TEMPLATES: list[tuple[str, str]] = [
    ("en", "Refund request #{n}: holder {person}, card ending in the number {card}, contact {phone}."),
    ("en", "Can you confirm that {email} is the address on file for {person}?"),
    ("en", "We received a transfer from {iban}; the reference mentions {org}."),
    ("en", "Delivery failed at {address}. Driver notes: nobody home, neighbour {first} refused."),
    ("en", "VPN session from {ip} flagged for {email}; previous login from {ip6}."),
    ("en", "{person} is travelling to {city} next week and asked us to hold mail until then."),
    ("en", "Verified identity for {person}: SSN {ssn}, phone {phone}."),
    ("json", '{{"event": "signup", "user": {{"full_name": "{person}", "mail": "{email}", "site": "{url}"}}}}'),
    ("json", '[{{"field": "pan", "value": "{card}"}}, {{"field": "iban", "value": "{iban}"}}]'),
    ("log", '{ip} - - [04/Mar/2026:10:22:31 +0000] "POST /checkout HTTP/1.1" 200 card={card}'),
    ("sig", "--\n{person} | {org}\n{phone} | {email}"),
    ("de", "Sehr geehrte Damen und Herren, meine neue Anschrift lautet {address}. Mit freundlichen Grüßen, {person}"),
    ("fr", "Le client {person} ({email}) souhaite être rappelé au {phone}."),
    ("es", "El titular {person} pagó con la tarjeta {card} desde {city}."),
    ("it", "Spedire a {address}, telefono {phone}, attenzione {person}."),
    ("nl", "Graag terugbetalen op rekening {iban} t.n.v. {person}."),
    ("pl", "Proszę o kontakt: {email}, tel. {phone}. Pozdrawiam, {person}"),
]
BLIND_FROM = 1000
LANG_LOCALES = {"de": ["de_DE"], "fr": ["fr_FR"], "es": ["es_ES"], "it": ["it_IT"], "nl": ["nl_NL"],
                "pl": ["pl_PL"], "pt": ["pt_BR"]}  # fmt: skip
SLOT_TYPES = {
    "person": "PERSON", "first": "PERSON", "email": "EMAIL_ADDRESS", "phone": "PHONE_NUMBER", "card": "CREDIT_CARD",
    "iban": "IBAN_CODE", "ip": "IP_ADDRESS", "ip6": "IP_ADDRESS", "ssn": "US_SSN", "address": "ADDRESS",
    "city": "LOCATION", "country": "LOCATION", "org": "ORGANIZATION", "url": "DOMAIN_NAME",
}  # fmt: skip
_SLOT = re.compile(r"\{(\w+)\}")


def _card(fake: Any, rng: random.Random) -> str:
    digits = fake.credit_card_number(card_type=rng.choice(CARD_TYPES))
    style = rng.choice(["compact", "space", "dash", "dot", "space"])
    if style == "compact":
        return digits
    sep = {"space": " ", "dash": "-", "dot": "."}[style]
    if len(digits) in (14, 15) and rng.random() < 0.7:  # Amex 4-6-5, Diners 4-6-4
        groups = [digits[:4], digits[4:10], digits[10:]]
    else:
        groups = [digits[i : i + 4] for i in range(0, len(digits), 4)]
    return sep.join(groups)


def _value(kind: str, fake: Any, rng: random.Random, person: str) -> str:
    if kind == "person":
        return person
    if kind == "first":
        return person.split()[0]
    if kind == "card":
        return _card(fake, rng)
    if kind == "address":
        return ", ".join(part.strip() for part in fake.address().split("\n"))
    if kind == "ip":
        return fake.ipv4_public()
    if kind == "ip6":
        return fake.ipv6()
    if kind == "url":
        return rng.choice([fake.url(), fake.domain_name(), "www." + fake.domain_name()]).rstrip("/")
    return {
        "email": fake.email, "phone": fake.phone_number, "iban": fake.iban, "city": fake.city,
        "country": fake.country, "org": fake.company,
    }[kind]()  # fmt: skip


def generate(n: int = 1500, *, seed: int = 2027, blind: bool = False) -> list[dict[str, Any]]:
    """``n`` labelled records, deterministic for ``seed``; from :data:`BLIND_TEMPLATES` when ``blind``."""
    from faker import Faker

    rng = random.Random(seed)
    fakers = {loc: Faker(loc) for loc in LOCALES}
    for i, f in enumerate(fakers.values()):
        f.seed_instance(seed + i)
        # Faker's it_IT address provider builds its city list from a set, so the list's order (and
        # the city a seed picks) changed with PYTHONHASHSEED; sorted, every process makes the same records.
        for provider in f.providers:
            if isinstance(getattr(provider, "cities", None), list):
                provider.cities = sorted(provider.cities)
    us = fakers["en_US"]
    out: list[dict[str, Any]] = []
    for k in range(n):
        templates = BLIND_TEMPLATES if blind else TEMPLATES
        index = rng.randrange(len(templates))
        lang, template = templates[index]
        template_id = index + (BLIND_FROM if blind else 0)
        loc = rng.choice(LANG_LOCALES.get(lang, LOCALES))
        fake = fakers[loc]
        person = f"{fake.first_name()} {fake.last_name()}"
        text, spans, pos = "", [], 0
        for m in _SLOT.finditer(template):
            lit = template[pos : m.start()].replace("{{", "{").replace("}}", "}")
            text += lit
            kind = m.group(1)
            if kind == "n":
                value = str(rng.randint(10000, 99999))
                text += value
                pos = m.end()
                continue
            if kind == "ssn":  # SSNs are US-only
                value = us.ssn()
            elif kind == "iban" and loc in NO_IBAN:  # US and India issue no IBANs (Faker's are malformed)
                value = fakers[rng.choice(IBAN_LOCALES)].iban()
            else:
                value = _value(kind, fake, rng, person)
            if lang == "json" and '"' in value:
                value = value.replace('"', "'")
            spans.append({"entity_type": SLOT_TYPES[kind], "entity_value": value, "start_position": len(text),
                          "end_position": len(text) + len(value)})  # fmt: skip
            text += value
            pos = m.end()
        text += template[pos:].replace("{{", "{").replace("}}", "}")
        out.append({"full_text": text, "spans": spans, "template_id": template_id, "locale": loc, "id": k})
    return out


def main(argv: list[str] | None = None) -> int:
    """Write the records as JSON (``--out``) or print a sample."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=2027)
    ap.add_argument("--out")
    ap.add_argument("--blind", action="store_true", help="the blind templates (see BLIND_TEMPLATES)")
    args = ap.parse_args(argv)
    records = generate(args.n, seed=args.seed, blind=args.blind)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(records, f, ensure_ascii=False, indent=1)
    else:
        for r in records[:8]:
            print(r["locale"], repr(r["full_text"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
