"""The shared adapter conformance suite (see :mod:`conformance.suite`).

It depends on molt-core and pytest only, so it runs in every framework's environment.
"""

from .network import block_network, is_loopback
from .suite import (
    FAIL_TOOL,
    HUGE_TEXT_CHARS,
    OK_TOOL,
    AdapterConformanceSuite,
    Capabilities,
    CapturedRun,
    Script,
    capture_run,
    huge_blob,
)

__all__ = [
    "FAIL_TOOL",
    "HUGE_TEXT_CHARS",
    "OK_TOOL",
    "AdapterConformanceSuite",
    "Capabilities",
    "CapturedRun",
    "Script",
    "block_network",
    "capture_run",
    "huge_blob",
    "is_loopback",
]
