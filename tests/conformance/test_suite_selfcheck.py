"""The conformance suite run against the reference adapter of a toy framework, and against broken
variants of it, so the suite is known to pass good adapters and catch bad ones."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from molt.capture import Recorder
from molt.testing import AdapterCapabilities, AdapterConformanceSuite, Script, capture_run

from .toy import ToyAgent, ToyHandler


class TestToyConformance(AdapterConformanceSuite):
    """The reference adapter passes every standard check."""

    adapter = "molt-core"
    framework = "toy"
    framework_dist = "pytest"
    capabilities = AdapterCapabilities(streaming=True, async_=True, approvals=True, retrieval=True)

    def make_capture(self, recorder: Recorder, *, strict: bool) -> ToyHandler:
        return ToyHandler(recorder, strict=strict)

    def run_scripted_agent(self, handle: Any, script: Script) -> str:
        return ToyAgent(handle).run(script)

    async def arun_scripted_agent(self, handle: Any, script: Script) -> str:
        return await ToyAgent(handle).arun(script)

    def run_scripted_stream(self, handle: Any, script: Script) -> list[str]:
        got = []
        stream = ToyAgent(handle).stream(script)
        for word in itertools.islice(stream, script.stop_after):
            got.append(word)
        stream.close()
        return got


class _CurrentSpanHandler(ToyHandler):
    """Broken on purpose: parents come from the handler's "current run", not the framework's ids."""

    def __init__(self, recorder: Any, *, strict: bool = False):
        super().__init__(recorder, strict=strict)
        self._current: Any = None

    def on_start(self, kind: str, run_id: Any, parent: Any, name: str, inputs: Any) -> None:
        parent, self._current = (
            (self._current if kind != "agent" else None),
            (run_id if kind == "agent" else self._current),
        )
        super().on_start(kind, run_id, parent, name, inputs)


class _ForgetfulHandler(ToyHandler):
    """Broken on purpose: tool errors are never ended."""

    def on_error(self, run_id: Any, exc: BaseException) -> None:
        return None


class _RaisingHandler(ToyHandler):
    """Broken on purpose: the entry point lets capture errors escape into the agent."""

    def on_start(self, kind: str, run_id: Any, parent: Any, name: str, inputs: Any) -> None:
        self.capture.submit(self._start, kind, run_id, parent, name, inputs, 0)

    def on_end(self, run_id: Any, output: Any) -> None:
        self.capture.submit(self._end, run_id, None, output, 0)

    def on_error(self, run_id: Any, exc: BaseException) -> None:
        self.capture.submit(self._end, run_id, None, None, 0)


def _suite_with(handler: type[ToyHandler]) -> TestToyConformance:
    class Broken(TestToyConformance):
        def make_capture(self, recorder: Recorder, *, strict: bool) -> ToyHandler:
            return handler(recorder, strict=strict)

    return Broken()


def test_suite_catches_current_span_parenting(tmp_path: Path) -> None:
    suite = _suite_with(_CurrentSpanHandler)
    with pytest.raises(AssertionError):
        suite.test_async_concurrent_runs_never_mix(tmp_path)


def test_suite_catches_unended_errors(tmp_path: Path) -> None:
    suite = _suite_with(_ForgetfulHandler)
    run = capture_run(suite, tmp_path, Script())
    with pytest.raises(AssertionError):
        suite.test_errors_are_outcomes(run)


def test_suite_catches_unguarded_entry_points(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    suite = _suite_with(_RaisingHandler)
    with pytest.raises(AssertionError):  # the toy framework swallows the error but nothing counts it
        suite.test_raising_capture_never_breaks_agent(tmp_path, monkeypatch)
