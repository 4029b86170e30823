"""Country-level places are not personal data: the default policy keeps them, addresses still go.

A user's correction or a reward reason that names countries ("we ship to all countries in the EU
and to Norway") is what the control plane learns from; redacting the countries would leave it
"<LOCATION_1> … <LOCATION_2>". A city, a street and a postcode in the same text are redacted.
"""

from __future__ import annotations

from molt.atdp import Event, EventKind, new_id
from molt.atdp.models import FeedbackAction
from molt.governance.redaction import RedactionPolicy, Redactor, redact_event

CORRECTION = (
    "Wrong: we ship to all countries in the EU and to Norway, not only to Germany. "
    "Returns go to 12 Baker Street, London NW1 6XE, United Kingdom."
)


def test_a_correction_keeps_its_countries_and_loses_its_address() -> None:
    event = Event(
        trajectory_id=new_id(), kind=EventKind.FEEDBACK, action=FeedbackAction(rating=-1.0, correction=CORRECTION)
    )
    redacted, _ = redact_event(event)
    kept = redacted.action.correction
    assert kept is not None
    for place in ("the EU", "Norway", "Germany"):
        assert place in kept
    for part in ("Baker Street", "London", "NW1 6XE"):
        assert part not in kept
    assert "<ADDRESS_1>" in kept


def test_regions_and_continents_are_kept_cities_are_not() -> None:
    text, _ = Redactor().redact("We deliver across Europe, Southeast Asia and North America; our depot is in Lyon.")
    assert "Europe" in text and "Southeast Asia" in text and "North America" in text
    assert "Lyon" not in text


def test_a_policy_can_redact_countries_as_the_labelled_sets_do() -> None:
    redactor = Redactor(RedactionPolicy(name="countries-too", keep_country_level_places=False))
    text, _ = redactor.redact("we ship to all countries in the EU and to Norway")
    assert "Norway" not in text and "EU" not in text
