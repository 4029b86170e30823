"""`molt redact`: plain and JSON lines in, one {"text", "spans"} JSON line out."""

from __future__ import annotations

import io
import json
import subprocess
import sys

from typer.testing import CliRunner

from molt.governance.redact_cli import app, redact_command


def test_cli_plain_and_json_lines() -> None:
    lines = 'call 032 696 10 69 now\n{"text": "mail ana@example.org", "id": 7}\n\nno pii here\n'
    result = CliRunner().invoke(app, [], input=lines)
    assert result.exit_code == 0, result.output
    out = [json.loads(x) for x in result.stdout.splitlines()]
    assert len(out) == 4
    assert out[0] == {
        "text": "call <PHONE_NUMBER_1> now",
        "spans": [{"entity_type": "PHONE_NUMBER", "start": 5, "end": 18}],
    }
    assert out[1]["spans"] == [{"entity_type": "EMAIL_ADDRESS", "start": 5, "end": 20}]
    assert out[2] == {"text": "", "spans": []}
    assert out[3] == {"text": "no pii here", "spans": []}


def test_cli_policy_option_and_unknown_policy() -> None:
    result = CliRunner().invoke(app, ["--policy", "mask"], input="ssn 364-21-3719\n")
    assert json.loads(result.stdout)["text"] == "ssn ***********"
    bad = CliRunner().invoke(app, ["--policy", "nope"], input="x\n")
    assert bad.exit_code == 2


def test_redact_command_function() -> None:
    out = io.StringIO()
    assert redact_command(None, stdin=io.StringIO("card 4111111111111111\n"), stdout=out) == 0
    assert json.loads(out.getvalue())["spans"][0]["entity_type"] == "CREDIT_CARD"


def test_cli_as_a_process() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "molt.governance.redact_cli"],
        input='{"text": "ip 10.0.0.1"}\n',
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(proc.stdout)["spans"] == [{"entity_type": "IP_ADDRESS", "start": 3, "end": 11}]


def test_profile_option_fast_and_thorough() -> None:
    # a name the fast pass leaves and the thorough pass (spaCy's NER beside the lexicon) takes
    line = '{"text": "Peregrine Ashdown approved the refund."}\n'
    fast = CliRunner().invoke(app, ["--profile", "fast"], input=line)
    thorough = CliRunner().invoke(app, ["--profile", "thorough"], input=line)
    assert fast.exit_code == 0 and thorough.exit_code == 0, (fast.output, thorough.output)
    assert "Ashdown" in json.loads(fast.output)["text"]
    assert "Ashdown" not in json.loads(thorough.output)["text"]
    bad = CliRunner().invoke(app, ["--profile", "slow"], input=line)
    assert bad.exit_code == 2 and "fast, thorough" in bad.output
