"""Issue 41 item 2, the parts one process shows: detectors read Unicode-folded text (fullwidth,
no-break and zero-width disguises of an address, a name or a card are found, and only the disguised
characters are replaced); a client's id is kept when it is an identifier with nothing personal in it
and replaced by a stable, per-tenant keyed digest otherwise.
"""

from __future__ import annotations

import pytest

from molt.governance.envelope import DIGEST_PREFIX, EnvelopeIds, id_digest, lookup_ids
from molt.governance.redaction import Redactor

EMAIL, NAME, CARD = "zq7781@quortzmail.com", "Zelda Quortz", "4111 1111 1111 1111"


def _fullwidth(s: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in s)


@pytest.fixture(scope="module")
def redactor() -> Redactor:
    return Redactor()


@pytest.mark.parametrize("disguise", [_fullwidth, lambda s: s.replace(" ", "\u00a0"), lambda s: "\u200b".join(s),
                                      lambda s: s[:3] + "\u202e" + s[3:]])
@pytest.mark.parametrize(("value", "entity"), [(EMAIL, "EMAIL_ADDRESS"), (NAME, "PERSON"), (CARD, "CREDIT_CARD")])
def test_a_disguised_value_is_found_and_only_it_is_replaced(redactor: Redactor, disguise, value, entity) -> None:
    hidden = disguise(value)
    text = f"Ｒｅｆｕｎｄ: write to {hidden} today."
    out, spans = redactor.redact(text)
    assert [s.entity_type for s in spans] == [entity], (text, out)
    assert text[spans[0].start:spans[0].end] == hidden  # the span covers the disguised characters, all of them
    assert out == f"Ｒｅｆｕｎｄ: write to <{entity}_1> today."  # clean text kept as written


def test_client_ids_identifiers_kept_personal_ones_digested_stably_per_tenant(redactor: Redactor) -> None:
    ids = EnvelopeIds()
    for clean in ("01a249bd-8993-7779-b7db-ef84082aaa9e", "4bf92f3577b34da6a3ce929d0e0e4736", "order-4711",
                  "traj-o'hare-1", "support_bot.v2"):
        assert ids.governed("acme", clean, redactor) == clean
    for personal in (f"traj-{EMAIL}", f"traj-{CARD.replace(' ', '')}", "sess Zelda Quortz", "order_Zelda_Quortz",
                     "DE89370400440532013000", _fullwidth(EMAIL)):
        got = ids.governed("acme", personal, redactor)
        assert got.startswith(DIGEST_PREFIX) and got == id_digest("acme", personal), personal
        assert EnvelopeIds().governed("acme", personal, redactor) == got  # stable: later feedback finds it
        assert ids.governed("globex", personal, redactor) != got  # not joinable across tenants
        assert ids.governed("acme", got, redactor) == got  # a digest is an identifier
        assert got in lookup_ids(personal, ["globex", "acme"])
