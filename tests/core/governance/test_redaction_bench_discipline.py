"""The redaction benchmark's error-analysis mode shows only the sets tuning may look at.

``bench/bench_redaction.py --errors N`` is what a session runs while it reworks a detector: it must
print the dev templates and the inspected second-source templates and nothing held out (the held-out
templates, the blind second-source templates, the whole file, which holds the held-out templates),
for every N — ``--errors 0`` once fell through to the full benchmark."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT.parent / "shared" / "data" / "pii" / "presidio_generated_large.json"


@pytest.mark.skipif(not DATA.is_file(), reason=f"labelled PII data not found at {DATA}")
@pytest.mark.parametrize("n", ["0", "2"])
def test_error_analysis_prints_nothing_held_out(n: str) -> None:
    cmd = [sys.executable, "bench/bench_redaction.py", "--data", str(DATA), "--errors", n, "--no-presidio",
           "--ner-model", "", "--second-n", "200", "--no-bad-input"]  # fmt: skip
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, check=True).stdout
    assert "dev templates" in out and "inspected templates" in out, out[-2000:]
    for held_out in ("held-out", "blind", "all sentences", "Model-backed", "Throughput"):
        assert held_out not in out, held_out
    assert ("dev false negatives" in out) == (n != "0")
