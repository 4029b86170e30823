"""The compiled (mypyc) build of the redaction detectors: used only when current, same spans as Python.

``scripts/setup.sh`` builds it (``molt native build --if-stale``); without a C compiler it is absent
and redaction runs the Python modules. The rest of the suite runs against whichever is in use, so
here the other one is run in a subprocess (``MOLT_NATIVE=0``) and the two are compared.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from molt.governance.redaction import Redactor, native
from molt.governance.redaction.evaluate import load_labelled

DATA = (Path(os.environ.get("MOLT_SHARED_DIR") or Path(__file__).resolve().parents[4] / "shared")
        / "data" / "pii" / "presidio_generated_large.json")
BENCH = Path(__file__).resolve().parents[3] / "bench"
ABI = native._abi()

# every text of the labelled set and of a sample of the benchmark's agent traffic, each field on its
# own and the fields of an event joined the way detect_many joins them
_SPANS = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, sys.argv[2])
    from bench_redaction import agent_traffic
    from molt.governance.redaction import Redactor, native, redact_event
    from molt.governance.redaction.evaluate import load_labelled

    texts = [r["full_text"] for r in load_labelled(sys.argv[1])]
    texts += [it.text for it in agent_traffic(150, seed=5)]
    r = Redactor(cache_size=0)
    out = [[(s.start, s.end, s.entity_type, round(s.score, 3), s.detector) for s in r.detect(t)] for t in texts]
    events = []  # and whole events through the walker: redacted payloads and reports
    for it in agent_traffic(150, seed=5):
        red, report = redact_event(it.event, redactor=r)
        payload = red.model_dump(mode="json", include={"observation", "hidden", "action", "outcome"})
        events.append([payload, report.model_dump(mode="json", exclude={"event_id", "trajectory_id"})])
    print(json.dumps({"in_use": native.status()["in_use"], "spans": out, "events": events}))
    """
)


def _run(script: str, env_extra: dict[str, str], *args: str) -> dict:
    """``script`` in a fresh interpreter (so the package decides afresh which build to load); its JSON."""
    done = subprocess.run(
        [sys.executable, "-c", script, *args], env={**os.environ, **env_extra},
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def _run_spans(env_extra: dict[str, str]) -> dict:
    return _run(_SPANS, env_extra, str(DATA), str(BENCH))


def _built() -> bool:
    return native.probe(native.native_dir()) is None


def test_the_compiled_detectors_are_in_use_when_the_build_is_current() -> None:
    if not _built():
        why = native.probe(native.native_dir())
        if os.environ.get("CI"):
            pytest.fail(f"scripts/setup.sh should have built the compiled detectors: {why}")
        pytest.skip(f"no compiled build here: {why}")
    st = native.status()
    assert st["in_use"], st
    for name in native.MODULES:
        assert st["modules"][name].endswith(ABI), st["modules"]
    # what the redactor really runs is the compiled class
    entity = next(d for d in Redactor().detectors if d.name == "entities")
    assert sys.modules[type(entity).__module__].__file__.endswith(ABI)


@pytest.mark.skipif(not DATA.is_file(), reason=f"labelled PII data not found at {DATA}")
def test_compiled_and_python_builds_find_the_same_spans_and_redact_events_alike() -> None:
    if not _built():
        pytest.skip(f"no compiled build here: {native.probe(native.native_dir())}")
    python = _run_spans({"MOLT_NATIVE": "0"})
    compiled = _run_spans({})
    assert python["in_use"] is False and compiled["in_use"] is True
    n = len(load_labelled(str(DATA)))
    assert len(python["spans"]) == len(compiled["spans"]) == n + 150
    assert sum(map(len, python["spans"])) > n  # the comparison is over real findings, not empty lists
    diff = [i for i, (a, b) in enumerate(zip(python["spans"], compiled["spans"], strict=True)) if a != b]
    assert not diff, f"{len(diff)} texts differ, first {diff[:5]}"
    assert sum(1 for _payload, report in python["events"] if report["spans"]) > 20
    diff = [i for i, (a, b) in enumerate(zip(python["events"], compiled["events"], strict=True)) if a != b]
    assert not diff, f"{len(diff)} redacted events differ, first {diff[:5]}"


def _fake_build(root: Path, *, digests: dict[str, str] | None = None, abi: str = ABI) -> None:
    """A build directory with a stamp (of the real sources unless ``digests``) and junk modules."""
    (root / "pkg").mkdir(parents=True)
    (root / "lib").mkdir()
    here = Path(native.__file__).parent
    sources = digests or {m: native._digest(here / f"{m}.py") for m in native.MODULES}
    for m in native.MODULES:
        (root / "pkg" / f"{m}{ABI}").write_bytes(b"not a shared object")
    (root / "stamp.json").write_text(json.dumps({"abi": abi, "sources": sources}))


def test_a_build_is_refused_when_a_source_changed_or_it_is_for_another_interpreter(tmp_path: Path) -> None:
    assert "not built" in (native.probe(tmp_path / "none") or "")
    stale = {m: "0" * 64 for m in native.MODULES}
    _fake_build(tmp_path / "stale", digests=stale)
    assert (native.probe(tmp_path / "stale") or "").startswith("stale: checksums.py changed")
    _fake_build(tmp_path / "abi", abi=".cpython-39-x86_64-linux-gnu.so")
    assert "built for" in (native.probe(tmp_path / "abi") or "")
    _fake_build(tmp_path / "partial")
    (tmp_path / "partial" / "pkg" / f"entities{ABI}").unlink()
    assert (native.probe(tmp_path / "partial") or "").startswith("missing entities")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "stamp.json").write_text("{not json")
    assert "unreadable stamp" in (native.probe(tmp_path / "bad") or "")
    _fake_build(tmp_path / "current")
    assert native.probe(tmp_path / "current") is None


_ACTIVATE = textwrap.dedent(
    """
    import json, warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from molt.governance.redaction import Redactor, native
    text, _ = Redactor().redact("Write to ana.lima@example.org, Ana Lima, 4111 1111 1111 1111")
    print(json.dumps({"status": native.status(), "text": text, "warnings": [str(w.message) for w in caught]}))
    """
)


def _activate(env_extra: dict[str, str]) -> dict:
    return _run(_ACTIVATE, env_extra)


def test_a_build_that_does_not_load_falls_back_to_python_with_a_warning(tmp_path: Path) -> None:
    _fake_build(tmp_path / "junk")  # current stamp, but the "modules" are not shared objects
    got = _activate({"MOLT_NATIVE_DIR": str(tmp_path / "junk")})
    assert got["status"]["in_use"] is False
    assert got["status"]["reason"].startswith("failed to load"), got["status"]
    assert any("not used" in w for w in got["warnings"]), got["warnings"]
    assert all(f.endswith(".py") for f in got["status"]["modules"].values()), got["status"]["modules"]
    assert got["text"] == "Write to <EMAIL_ADDRESS_1>, <PERSON_1>, <CREDIT_CARD_1>"


def test_molt_native_0_runs_the_python_modules() -> None:
    got = _activate({"MOLT_NATIVE": "0"})
    assert got["status"]["in_use"] is False and "MOLT_NATIVE=0" in got["status"]["reason"]
    assert all(f.endswith(".py") for f in got["status"]["modules"].values())
    assert got["text"] == "Write to <EMAIL_ADDRESS_1>, <PERSON_1>, <CREDIT_CARD_1>"


@pytest.fixture(scope="module")
def fresh_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A build made here, at -O0 (quicker), where the setup's build exists (so a compiler does)."""
    if not _built():
        pytest.skip(f"no compiled build here ({native.probe(native.native_dir())}): no compiler to test with")
    return native.build(tmp_path_factory.mktemp("native") / "build", opt_level="0")


def test_build_compiles_into_a_fresh_directory_and_the_result_loads(fresh_build: Path) -> None:
    root = fresh_build
    assert native.probe(root) is None
    made = (root / "stamp.json").stat().st_mtime_ns
    assert native.build(root, if_stale=True) == root
    assert (root / "stamp.json").stat().st_mtime_ns == made  # current: not built again
    got = _activate({"MOLT_NATIVE_DIR": str(root)})
    assert got["status"]["in_use"] is True, got["status"]
    assert all(f.startswith(str(root)) for f in got["status"]["modules"].values())
    assert got["text"] == "Write to <EMAIL_ADDRESS_1>, <PERSON_1>, <CREDIT_CARD_1>"


def test_a_build_whose_last_module_fails_after_the_others_loaded_falls_back_whole(
    fresh_build: Path, tmp_path: Path
) -> None:
    """The first compiled modules run (and register their detectors) before the last one fails:
    the fallback must undo that, or the sources' registrations would collide."""
    broken = tmp_path / "broken"
    shutil.copytree(fresh_build, broken)
    (broken / "pkg" / f"{native.MODULES[-1]}{ABI}").write_bytes(b"not a shared object")
    got = _activate({"MOLT_NATIVE_DIR": str(broken)})
    assert got["status"]["in_use"] is False
    assert got["status"]["reason"].startswith("failed to load"), got["status"]
    assert all(f.endswith(".py") for f in got["status"]["modules"].values()), got["status"]["modules"]
    assert got["text"] == "Write to <EMAIL_ADDRESS_1>, <PERSON_1>, <CREDIT_CARD_1>"


# Threads that build detectors at once in a fresh process (the gateway warms the lexicon in the
# background while the control plane builds its redactor): those that wait for the one loading the
# lexicon must get the same lexicon, not an error.
_CONCURRENT_FIRST_LOAD = textwrap.dedent(
    """
    import json, threading
    from molt.governance.redaction import native
    from molt.governance.redaction.lexicon import get_lexicon

    barrier, got, errors = threading.Barrier(4), [], []

    def load():
        barrier.wait()
        try:
            got.append(id(get_lexicon()))
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"in_use": native.status()["in_use"], "lexicons": len(set(got)), "loads": len(got),
                      "errors": errors}))
    """
)


@pytest.mark.parametrize("build", ["compiled", "python"])
def test_threads_that_wait_for_the_first_lexicon_load_get_the_same_lexicon(build: str) -> None:
    if build == "compiled" and not _built():
        pytest.skip(f"no compiled build here: {native.probe(native.native_dir())}")
    got = _run(_CONCURRENT_FIRST_LOAD, {"MOLT_NATIVE": "0"} if build == "python" else {})
    assert got["in_use"] is (build == "compiled")
    assert got["errors"] == [] and got["loads"] == 4 and got["lexicons"] == 1, got
