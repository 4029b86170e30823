"""Fixtures for backend tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def policy_model_dir() -> Path:
    """The converted SmolLM2 policy, cached across test runs in ``.molt/test-models`` (or
    ``$MOLT_TEST_MODEL_HOME``): the GGUF conversion takes a minute or two, once."""
    from molt.backends.model import ensure_policy_model

    home = Path(os.environ.get("MOLT_TEST_MODEL_HOME", ROOT / ".molt" / "test-models"))
    return ensure_policy_model(home)
