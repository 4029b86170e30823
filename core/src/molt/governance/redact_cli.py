"""``molt redact``: redact stdin line by line and print one JSON line per input line.

Input lines are plain text, or JSON objects with a ``"text"`` field (other fields are ignored).
Each output line is ``{"text": <redacted>, "spans": [{"entity_type", "start", "end"}, …]}`` with
offsets into the *original* text, so anyone can score redaction against their own labelled data::

    $ echo '{"text": "Call Ana Lima on +44 20 7946 0958"}' | molt redact
    {"text":"Call <PERSON_1> on <PHONE_NUMBER_1>","spans":[{"entity_type":"PERSON","start":5,"end":13},…]}

``--policy`` names a registered policy (``default``, ``mask``; ``pseudonym`` when
``MOLT_PSEUDONYM_KEY`` is set) or a YAML/JSON policy file. ``--profile`` picks the pass
(:mod:`molt.governance.redaction.profiles`): ``fast`` (default; what capture runs: structured
identifiers and the lexicon's names, thousands of events per CPU-second) or ``thorough`` (what every
event passes before it is learned from: the same plus spaCy's small English NER, about a hundred
times the CPU, more names, places and organisations found). The CLI owner mounts :data:`app` as
``molt redact``; :func:`redact_command` is the same thing as a function.
"""

from __future__ import annotations

import sys
from typing import Annotated, TextIO

import orjson
import typer

from molt.errors import MoltError

__all__ = ["app", "redact_command", "redact_line"]


def redact_line(line: str, redactor: object) -> bytes:
    """The output JSON line (without newline) for one input line."""
    from molt.governance.redaction.redactor import Redactor

    assert isinstance(redactor, Redactor)
    text = line[:-1] if line.endswith("\n") else line
    if text.endswith("\r"):
        text = text[:-1]
    if text.lstrip().startswith("{"):
        try:
            obj = orjson.loads(text)
        except orjson.JSONDecodeError:
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("text"), str):
            text = obj["text"]
    redacted, spans = redactor.redact(text)
    return orjson.dumps(
        {
            "text": redacted,
            "spans": [{"entity_type": s.entity_type, "start": s.start, "end": s.end} for s in spans],
        }
    )


def redact_command(
    policy: str | None = None,
    *,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    profile: str = "fast",
) -> int:
    """Redact ``stdin`` (default ``sys.stdin``) line by line under ``policy``; returns the exit code.

    Example::

        redact_command("mask", stdin=io.StringIO("ssn 078-05-1120\\n"), stdout=out)
    """
    from molt.governance.redaction.policy import load_policy
    from molt.governance.redaction.profiles import PROFILES, redactor_for_profile

    if profile not in PROFILES:
        raise MoltError(f"Unknown redaction profile {profile!r}; choose one of {', '.join(PROFILES)}.")
    src = stdin if stdin is not None else sys.stdin
    dst = stdout if stdout is not None else sys.stdout
    try:
        redactor = redactor_for_profile(profile, load_policy(policy))
    except ImportError as exc:
        raise MoltError(str(exc)) from exc
    for line in src:
        dst.write(redact_line(line, redactor).decode())
        dst.write("\n")
    dst.flush()
    return 0


app = typer.Typer(add_completion=False, help="Redact PII and secrets from text lines on stdin.")


@app.command()
def main(
    policy: Annotated[
        str | None,
        typer.Option(
            "--policy", "-p", help="Registered policy name (default, mask, …) or a YAML/JSON policy file."
        ),
    ] = None,
    profile: Annotated[
        str,
        typer.Option(
            "--profile",
            help="fast: what capture runs (structured identifiers, the lexicon's names); thorough: what "
            "learning material passes (fast + spaCy's small English NER; ~100x the CPU).",
        ),
    ] = "fast",
) -> None:
    """Read plain-text or JSON lines (with a "text" field) on stdin; print {"text", "spans"} JSON lines."""
    try:
        code = redact_command(policy, profile=profile)
    except MoltError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    raise typer.Exit(code)


if __name__ == "__main__":  # pragma: no cover
    app()
