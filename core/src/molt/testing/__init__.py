"""``molt.testing``: the adapter conformance suite, shipped with molt-core so a third-party adapter pins it
with the core version it supports (as LangChain's partner packages pin ``langchain-tests``).

Install with ``pip install "molt-core[testing]"`` (it needs pytest) and subclass
:class:`AdapterConformanceSuite` in your adapter's tests (see :mod:`molt.testing.conformance`). The
adapters in this repository import it the same way. Nothing else in molt-core imports this package.
"""

from molt.testing.conformance import (
    FAIL_TOOL,
    HUGE_TEXT_CHARS,
    OK_TOOL,
    AdapterCapabilities,
    AdapterConformanceSuite,
    CapturedRun,
    Script,
    capture_run,
    huge_blob,
)
from molt.testing.network import block_network, is_loopback

__all__ = [
    "AdapterCapabilities",
    "AdapterConformanceSuite",
    "CapturedRun",
    "FAIL_TOOL",
    "HUGE_TEXT_CHARS",
    "OK_TOOL",
    "Script",
    "block_network",
    "capture_run",
    "huge_blob",
    "is_loopback",
]
