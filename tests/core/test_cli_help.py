"""Every `--help` of the `molt` command reads as text for people: no docstring markup (reST literals,
Python prompts, Sphinx roles, type names as metavars), and `molt --help` groups the commands."""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from molt import cli

MARKUP = re.compile(r"``|>>>|TextIO|:(?:class|func|meth|data|mod|attr):`|\bsys\.stdin\b")


def _paths() -> list[list[str]]:
    cli._mount(["--help"])
    out: list[list[str]] = [[]]

    def walk(cmd: Any, path: list[str]) -> None:
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                out.append([*path, name])
                walk(sub, [*path, name])

    walk(typer.main.get_command(cli.app), [])
    return out


def test_no_help_text_carries_docstring_markup() -> None:
    runner = CliRunner()
    bad = {}
    paths = _paths()
    assert len(paths) > 30  # every mounted command and subcommand
    for path in paths:
        res = runner.invoke(cli.app, [*path, "--help"], prog_name="molt", env={"COLUMNS": "200"})
        assert res.exit_code == 0, (path, res.output)
        found = sorted(set(MARKUP.findall(res.output)))
        if found:
            bad[" ".join(path) or "(top)"] = found
    assert not bad, bad


def test_molt_help_groups_the_commands() -> None:
    cli._mount(["--help"])
    res = CliRunner().invoke(cli.app, ["--help"], prog_name="molt", env={"COLUMNS": "200"})
    text = res.output
    heads = [h for h in ("Capture", "Govern", "Evolve", "Operate") if h in text]
    assert heads == ["Capture", "Govern", "Evolve", "Operate"], text
    assert [text.index(h) for h in heads] == sorted(text.index(h) for h in heads)
    for group, cmd in (("Capture", "serve"), ("Govern", "redact"), ("Evolve", "evolve"), ("Operate", "doctor")):
        section = text[text.index(group):]
        nxt = min((section.index(h) for h in ("Capture", "Govern", "Evolve", "Operate") if h in section[1:]
                   and section.index(h) > 0), default=len(section))
        assert re.search(rf"\b{cmd}\b", section[:nxt]), (group, cmd)


@pytest.mark.parametrize("path", [["trajectories", "ls"], ["versions", "ls"], ["audit"], ["replay", "run"]])
def test_operator_has_one_wording(path: list[str]) -> None:
    cli._mount(["--help"])
    res = CliRunner().invoke(cli.app, [*path, "--help"], prog_name="molt", env={"COLUMNS": "200"})
    if "--operator" not in res.output:
        pytest.skip(f"{' '.join(path)} has no --operator")
    assert "Act as the platform operator" in res.output and "Read as" not in res.output
