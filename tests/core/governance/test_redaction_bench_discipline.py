"""The redaction benchmarks show the sealed report sets only in report mode.

``bench/bench_redaction.py --errors N`` is what a session runs while it reworks a detector: it must
print the development sets (the Presidio file, the inspected second-source templates) and not the
sealed fresh split, for every N — ``--errors 0`` once fell through to the full benchmark.
``bench/bench_redaction_btc.py`` prints the Broad Twitter Corpus's report sections (g, h) only with
``--split report``, and never with ``--errors``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SHARED = Path(os.environ.get("MOLT_SHARED_DIR") or ROOT.parent / "shared")
DATA = SHARED / "data" / "pii" / "presidio_generated_large.json"
BTC = SHARED / "data" / "ner" / "btc"


@pytest.mark.skipif(not DATA.is_file(), reason=f"labelled PII data not found at {DATA}")
@pytest.mark.parametrize("n", ["0", "2"])
def test_error_analysis_prints_nothing_held_out(n: str) -> None:
    cmd = [sys.executable, "bench/bench_redaction.py", "--data", str(DATA), "--errors", n, "--no-presidio",
           "--ner-model", "", "--second-n", "200", "--no-bad-input"]  # fmt: skip
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, check=True).stdout
    assert "Presidio file (development)" in out and "inspected templates" in out, out[-2000:]
    for sealed in ("fresh split", "sealed", "Model-backed", "Throughput"):
        assert sealed not in out, sealed
    assert ("dev false negatives" in out) == (n != "0")


@pytest.mark.skipif(not BTC.is_dir(), reason=f"Broad Twitter Corpus not found at {BTC}")
def test_btc_errors_mode_reads_the_dev_sections_only() -> None:
    cmd = [sys.executable, "bench/bench_redaction_btc.py", "--split", "report", "--errors", "1", "--only", "Molt fast",
           "--limit", "50"]
    env = {**os.environ, "MOLT_SHARED_DIR": str(SHARED)}
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, check=True, env=env).stdout
    assert "sections a, b, e, f" in out and "g, h" not in out, out[-2000:]
