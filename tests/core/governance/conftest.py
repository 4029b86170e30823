"""Fixtures shared by the redaction tests."""

from __future__ import annotations

import pytest

from molt.governance.redaction import Redactor, detectors


@pytest.fixture(scope="module")
def entities():  # type: ignore[no-untyped-def]
    """The registered ``entities`` detector (names, places, organisations, addresses), one per module."""
    return detectors.get("entities")()


@pytest.fixture(scope="module")
def redactor() -> Redactor:
    """A default-policy redactor, one per module."""
    return Redactor()
