"""The demo's report: the plots (success per tenant with the plane's interventions marked, reward, model
calls per success; the main curve also as a PNG) and the HTML page, rendered from
``templates/report.html.j2`` with Jinja2 (autoescaped: decision reasons and descriptions are the plane's
text about user traffic)."""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

from jinja2 import ChoiceLoader, DictLoader, Environment, PackageLoader, StrictUndefined, select_autoescape

from molt.console.change import CHANGE_STYLE, CHANGE_TEMPLATE
from molt.control.change import TERMS, rate

__all__ = ["LIBRARY_LOG", "pct", "render_report", "served_text", "write_plots_and_report"]

#: Where the libraries' own messages go (beside the report): the terminal shows the demo's progress only.
LIBRARY_LOG = "molt-demo.log"

#: The markers of the plane's choices on the success curve.
_MARKS = {"memory_insert": "o", "tool_schema_edit": "s", "harness_edit": "D", "skill_patch": "^",
          "weight_update": "*", "rollback": "x", "promote": "P"}


def pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def _cell(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.0%}"
    return "-" if x is None else str(x)


def served_text(x: float | None, n: int) -> str:
    """A served success rate with its Wilson interval: ``"25% of 8 (95% interval 7%–59%)"``."""
    return "-" if x is None else str(rate(round(x * n), n)["text"])


_served = served_text


def _environment() -> Environment:
    # The change view is the console's own component (molt.console.change), loaded beside the report's template.
    env = Environment(loader=ChoiceLoader([PackageLoader("molt_demo", "templates"),
                                           DictLoader({"change": CHANGE_TEMPLATE})]),
                      autoescape=select_autoescape(["html", "j2"], default_for_string=True, default=True),
                      undefined=StrictUndefined, keep_trailing_newline=True)
    env.filters.update(pct=pct, cell=_cell, served=_served)
    env.globals.update(change_style=CHANGE_STYLE, terms=TERMS)
    return env


def render_report(*, first: float, last: float, verified: int, broken: int, fixes: list[dict[str, Any]],
                  decisions: list[dict[str, Any]], training: dict[str, Any] | None, main_png: str,
                  side_png: str, changes: list[dict[str, Any]] | None = None, n_first: int = 0,
                  n_last: int = 0) -> str:
    """The report page (``main_png``/``side_png``: the plots as base64 PNG; ``changes``: each change the
    plane chose, as :func:`molt.control.change.change_view` describes it)."""
    return _environment().get_template("report.html.j2").render(
        first=first, last=last, verified=verified, broken=broken, fixes=fixes, decisions=decisions,
        training=training, main_png=main_png, side_png=side_png, library_log=LIBRARY_LOG, changes=changes or [],
        first_rate=rate(round(first * n_first), n_first) if n_first else None,
        last_rate=rate(round(last * n_last), n_last) if n_last else None)


def write_plots_and_report(rounds: list[dict[str, Any]], decisions: list[dict[str, Any]], fixes: list[dict[str, Any]],
                           report: Path, png: Path, first: float, last: float, verified: int, broken: int,
                           training: dict[str, Any] | None = None, changes: list[dict[str, Any]] | None = None
                           ) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tenants = sorted({r["tenant"] for r in rounds})
    fig, ax = plt.subplots(figsize=(8, 4.2))
    for t in tenants:
        xs = [r["round"] + 1 for r in rounds if r["tenant"] == t]
        ys = [r["success_rate"] for r in rounds if r["tenant"] == t]
        line, = ax.plot(xs, ys, label=t, linewidth=2)
        for d in decisions:
            if d["tenant"] == t and d["choice"] in _MARKS:
                y = next(r["success_rate"] for r in rounds if r["tenant"] == t and r["round"] == d["round"])
                ax.plot(d["round"] + 1, y, _MARKS[d["choice"]], color=line.get_color(), markersize=9)
                ax.annotate(d["choice"].replace("_", " "), (d["round"] + 1, y), textcoords="offset points",
                            xytext=(4, -12 if t == tenants[0] else 8), fontsize=7)
    ax.set_xlabel("round")
    ax.set_ylabel("task success rate")
    ax.set_ylim(0, 1.05)
    ax.set_title("Molt demo: success per tenant, with the interventions the control plane chose")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    main_b64 = _b64(fig)

    fig2, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.2))
    for t in tenants:
        rs = [r for r in rounds if r["tenant"] == t]
        a1.plot([r["round"] + 1 for r in rs], [r["mean_reward"] for r in rs], label=t)
        a2.plot([r["round"] + 1 for r in rs], [r["model_calls_per_success"] for r in rs], label=t)
    a1.set_title("mean reward")
    a2.set_title("model calls per success")
    for a in (a1, a2):
        a.set_xlabel("round")
        a.grid(alpha=0.3)
        a.legend()
    fig2.tight_layout()
    side_b64 = _b64(fig2)
    first_round, last_round = min(r["round"] for r in rounds), max(r["round"] for r in rounds)
    report.write_text(render_report(first=first, last=last, verified=verified, broken=broken, fixes=fixes,
                                    decisions=decisions, training=training, main_png=main_b64, side_png=side_b64,
                                    changes=changes, n_first=sum(r["n"] for r in rounds if r["round"] == first_round),
                                    n_last=sum(r["n"] for r in rounds if r["round"] == last_round)),
                      encoding="utf-8")
    plt.close("all")


def _b64(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return base64.b64encode(buf.getvalue()).decode()
