"""The second labelled PII source (``bench/pii_second_source.py``) is the same in every process.

Its figures are reported beside the held-out ones, so two runs of the benchmark must score the same
records: Faker's ``it_IT`` address provider builds its city list from a set, whose order follows
``PYTHONHASHSEED``, and the generator sorts it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "bench"
DIGEST = """
import hashlib, json, pii_second_source as p
records = [p.generate(400, blind=b) for b in (False, True)]
print(hashlib.sha256(json.dumps(records, sort_keys=True).encode()).hexdigest())
"""


def _digest(hash_seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    out = subprocess.run([sys.executable, "-c", DIGEST], cwd=BENCH, env=env, capture_output=True, text=True,
                         timeout=120, check=True)
    return out.stdout.strip()


def test_the_second_source_does_not_depend_on_the_hash_seed() -> None:
    assert _digest("1") == _digest("2")
