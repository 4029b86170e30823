"""Shared by the interop tests: one governance pipeline (its redaction lexicons load once per session)."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def pipeline() -> Any:
    from molt.governance.pipeline import GovernancePipeline

    p = GovernancePipeline()
    p.warm()
    return p
