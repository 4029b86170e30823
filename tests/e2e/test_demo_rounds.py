"""When ``molt demo --train --until-trained N`` ends its run: counted from the plane's decision log alone,
without running the demo."""

from __future__ import annotations

from typing import Any

import typer
from typer.testing import CliRunner

from molt_demo.rounds import rounds_served_by_trained_adapter


def _d(rnd: int, choice: str, version: str | None, agent: str = "molt-math") -> dict[str, Any]:
    return {"round": rnd, "tenant": "acme", "agent": agent, "choice": choice, "version": version}


def test_rounds_count_from_the_promotion_of_a_weight_update_only() -> None:
    log = [_d(0, "noop", None), _d(1, "memory_insert", "desk@acme:v1", agent="desk"),
           _d(2, "promote", "desk@acme:v1", agent="desk"), _d(2, "weight_update", "math@acme:v1"),
           _d(3, "noop", None)]
    # A promoted memory is not a trained adapter, and a weight update still on canary serves no round as live.
    assert [rounds_served_by_trained_adapter(r, log) for r in range(2, 5)] == [0, 0, 0]
    log += [_d(4, "promote", "math@acme:v1")]
    # Promoted in round 4's cycle: round 5 is the first it served as the live version.
    assert [rounds_served_by_trained_adapter(r, log) for r in (4, 5, 6)] == [0, 1, 2]
    # A second promotion later (globex, or a newer adapter) does not restart the count.
    log += [_d(5, "weight_update", "math@acme:v2"), _d(6, "promote", "math@acme:v2")]
    assert rounds_served_by_trained_adapter(7, log) == 3


def test_until_trained_without_train_is_refused_with_the_option_named() -> None:
    from molt_demo.app import demo_command

    app = typer.Typer()
    app.command()(demo_command)
    res = CliRunner().invoke(app, ["--until-trained", "2"], terminal_width=200)
    assert res.exit_code == 2 and "--until-trained needs --train" in res.output, res.output
