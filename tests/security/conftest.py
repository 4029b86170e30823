"""Security suite (issue 41): attacks through HTTP and the CLI, with the tenants, keys and fixtures of
``tests/reliability`` (reused from there, not copied)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_RELIABILITY = Path(__file__).resolve().parents[1] / "reliability"
if str(_RELIABILITY) not in sys.path:
    sys.path.insert(0, str(_RELIABILITY))  # openapi_doc (KEYS, error shapes), relharness


def _reliability_conftest() -> object:
    spec = importlib.util.spec_from_file_location("molt_tests_reliability_conftest", _RELIABILITY / "conftest.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


gateway_app = _reliability_conftest().gateway_app  # type: ignore[attr-defined]
