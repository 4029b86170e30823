"""Field names: a record's keys say what its values are, wherever the words around them say nothing.

A tool that looks up a customer returns ``{"first_name": "Zutazen", "last_name": "Teriba",
"line1": "…", "postal_code": "75160"}``: each value is one bare string, with no sentence around it
to read a name from, and a name that no lexicon lists is found only by the key that holds it. The
keys are the schema's own words, and the schemas that carry personal data name these fields the
same way — schema.org's ``Person`` and ``PostalAddress`` (``givenName``, ``familyName``,
``streetAddress``, ``addressLocality``, ``postalCode``), vCard, and the payment and commerce APIs
agents call (``billing_details.name``, ``address.line1``, ``first_name``, ``zip``) — in snake,
camel, kebab or dotted case.

:func:`field_type` reads a key alone: a person's name (``first_name``, ``surname``,
``customerName``, ``cardholder_name``), an organisation's (``company_name``, ``employer``), a street
address or a postal code (``street``, ``address_line1``, ``line2``, ``zip``, ``postcode``; ADDRESS, as
the address detector types a postal code written with its address), a town (``city``, ``town``,
``addressLocality``; LOCATION), a phone number or an e-mail address. A key that names a thing only
with other words around it is left to the detectors: ``state`` (of an order), ``region``
(``us-east-1``), ``country`` (kept by the default policy), ``ip_address``, ``email_verified``.

:func:`party_name` reads the bare ``name``: in a record that also holds a person's or an address's
fields (``{"name": …, "email": …}``, ``{"name": …, "line1": …}``) it names the record's subject, a
person or a business, and is redacted as PERSON; elsewhere (``{"name": "lookup_order", "arguments":
…}``) it is a tool's, a product's or a file's name and is left to the detectors.

A value the key types is taken whole when it holds something of its type's shape — a letter for a
name, a place or an address, a digit for a postal code or a phone number, ``@`` for an e-mail address
— and is not an annotation in brackets (``"(on file)"``, ``"<unknown>"``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["field_type", "key_words", "party_name", "typed_value"]

# a key's words: camelCase and acronym boundaries, then separators
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_SEPARATORS = re.compile(r"[\s_.\-:/]+")

# words a schema puts before "name" for a person's name: which part (schema.org givenName,
# familyName, additionalName; vCard's full name) or whose (the party a record is about)
_NAME_PARTS = frozenset(
    {"first", "given", "last", "family", "middle", "additional", "full", "maiden", "legal", "sur", "fore"}
)
_PARTIES = frozenset(
    {
        "customer", "client", "contact", "recipient", "sender", "patient", "employee", "cardholder", "holder",
        "beneficiary", "billing", "shipping", "passenger", "guest", "member", "applicant", "person", "buyer",
        "payer", "payee", "owner", "signer", "addressee", "consignee", "student", "tenant", "borrower",
    }
)  # fmt: skip
# one-word keys that are a person's name in every schema that uses them
_PERSON_WORDS = frozenset({"surname", "forename", "firstname", "lastname", "fullname", "givenname", "familyname"})
_ORG_WORDS = frozenset({"company", "employer", "organization", "organisation", "business", "firm"})
# a street address's fields (schema.org streetAddress; line1/line2 and address1/address2 of the
# payment and commerce APIs; the postal code under each name it goes by)
_ADDRESS_KEYS = frozenset(
    {
        ("street",), ("street", "address"), ("streetaddress",), ("address",), ("line1",), ("line2",),
        ("address1",), ("address2",), ("address", "line1"), ("address", "line2"), ("address", "line", "1"),
        ("address", "line", "2"), ("addressline1",), ("addressline2",), ("postal", "code"), ("postalcode",),
        ("postcode",), ("post", "code"), ("zip",), ("zip", "code"), ("zipcode",), ("house", "number"),
    }
)  # fmt: skip
# whose address: a street address under a party's or a use's name ("billing_address", "home_address"),
# unlike an IP, MAC, e-mail or wallet address
_ADDRESS_OWNERS = _PARTIES | {"home", "mailing", "postal", "delivery", "residential", "work", "permanent", "personal"}
_LOCALITY_KEYS = frozenset(
    {("city",), ("town",), ("locality",), ("address", "locality"), ("addresslocality",), ("village",)}
)
_PHONE_WORDS = frozenset({"phone", "telephone", "tel", "mobile", "cellphone", "fax"})
_EMAIL_KEYS = frozenset({("email",), ("e", "mail"), ("email", "address"), ("emailaddress",)})
_ANNOTATION = re.compile(r"^\s*(?:\(.*\)|<.*>|\[.*\])\s*$", re.S)

_memo: dict[str, str | None] = {}


def key_words(key: str) -> tuple[str, ...]:
    """``key``'s words, lowercased: ``customerName``, ``customer_name`` and ``customer-name`` are
    ``("customer", "name")``."""
    return tuple(w for w in _SEPARATORS.split(_CAMEL.sub("_", key).lower()) if w)


def _type_of(words: tuple[str, ...]) -> str | None:
    if not words:
        return None
    last = words[-1]
    if last == "name" and len(words) >= 2:
        whose = words[-2]
        if whose in _NAME_PARTS or whose in _PARTIES:
            return "PERSON"
        if whose in _ORG_WORDS:
            return "ORGANIZATION"
        return None
    if len(words) == 1 and last in _PERSON_WORDS:
        return "PERSON"
    if len(words) == 1 and last in _ORG_WORDS and last not in ("business", "firm"):
        return "ORGANIZATION"  # ("business": "retail" is a kind, not a name)
    # whose or which use's: "billing_postal_code", "shipping_city", "home_address"
    core = words[1:] if len(words) > 1 and words[0] in _ADDRESS_OWNERS else words
    if words in _ADDRESS_KEYS or core in _ADDRESS_KEYS:
        return "ADDRESS"
    if words in _LOCALITY_KEYS or core in _LOCALITY_KEYS:
        return "LOCATION"
    if last in _PHONE_WORDS or (last == "number" and len(words) == 2 and words[0] in _PHONE_WORDS):
        return "PHONE_NUMBER"
    if words in _EMAIL_KEYS or core in _EMAIL_KEYS:
        return "EMAIL_ADDRESS"
    return None


def field_type(key: str) -> str | None:
    """The entity type a value under ``key`` holds by the key's name alone, else None (see the
    module's docstring)."""
    try:
        return _memo[key]
    except KeyError:
        pass
    found = _type_of(key_words(key))
    if len(_memo) < 10_000:  # payload keys repeat; a bounded memo keeps the walker cheap
        _memo[key] = found
    return found


#: The types whose fields make a bare ``name`` beside them the name of the record's subject.
_PARTY_FIELDS = frozenset({"PERSON", "ADDRESS", "PHONE_NUMBER", "EMAIL_ADDRESS"})


def party_name(keys: Iterable[str]) -> bool:
    """Whether a record with ``keys`` is about a person or a business — it holds a ``name`` and a
    field of a person's or an address's — so its ``name`` is that party's."""
    has_name = False
    has_party = False
    for k in keys:
        if key_words(k) == ("name",):
            has_name = True
        elif not has_party and field_type(k) in _PARTY_FIELDS:
            has_party = True
    return has_name and has_party


def typed_value(value: str, entity_type: str) -> bool:
    """Whether ``value`` holds something of ``entity_type``'s shape (see the module's docstring)."""
    if _ANNOTATION.match(value):
        return False
    if entity_type == "EMAIL_ADDRESS":
        return "@" in value
    if entity_type == "PHONE_NUMBER":
        return sum(c.isdigit() for c in value) >= 3
    if entity_type == "ADDRESS":
        return any(c.isalnum() for c in value)
    return any(c.isalpha() for c in value)
