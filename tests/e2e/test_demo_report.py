"""The demo's HTML report, rendered from its Jinja2 template without running the demo: every fix and decision
row is there, the plane's text is escaped (it quotes user traffic), and ``--train``'s section appears only
with training."""

from __future__ import annotations

from typing import Any

from molt_demo.report import render_report


def _fix(**kw: Any) -> dict[str, Any]:
    return {"tenant": "acme", "cluster": "kb_question|refund", "intervention": "memory_insert", "round": 2,
            "version": "desk@acme:v2", "before": 0.25, "n_before": 8, "after": 1.0, "n_after": 6,
            "what": "memory: refunds within 30 days", "overlaps": [], **kw}


def test_the_report_lists_every_fix_and_decision_and_escapes_the_planes_text() -> None:
    fixes = [_fix(overlaps=["harness_edit of round 1 (desk@acme:v1)"]),
             _fix(intervention="weight_update", version=None, before=None, n_before=0, after=None, n_after=0,
                  what="requested <script>alert(1)</script>")]
    decisions = [{"round": 0, "tenant": "globex", "choice": "tool_schema_edit", "reason": "order_id & <id>",
                  "version": "desk@globex:v1"}]
    page = render_report(first=0.25, last=0.875, verified=96, broken=0, fixes=fixes, decisions=decisions,
                         training=None, main_png="MAIN", side_png="SIDE")
    assert "<b>25%</b> in the first round → <b>88%</b> in the last" in page
    assert "Hash chains verified: 96 trajectories, 0 broken" in page and 'href="molt-demo.log"' in page
    # served by the parent / the version, each with its Wilson interval
    assert "<td>25% of 8 (95% interval 7%–59%)</td>" in page and "<td>100% of 6 (95% interval 61%–100%)</td>" in page
    assert "overlaps: served together with harness_edit of round 1 (desk@acme:v1)" in page
    assert "<script>" not in page and "requested &lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<td>1</td><td>globex</td><td>tool_schema_edit</td><td>order_id &amp; &lt;id&gt;</td>" in page
    assert "data:image/png;base64,MAIN" in page and "Weights:" not in page


def test_the_training_section_shows_base_against_adapter() -> None:
    training = {"agent": "molt-math", "model": "smollm2-135m", "success_base": 0.17, "n_base": 63,
                "success_adapter": 0.98, "n_adapter": 65, "adapters": ["math-a1"], "requests": [],
                "rounds": [{"round": 0, "n": 16, "success_rate": 0.125, "correct_sum_rate": None}]}
    page = render_report(first=0.5, last=0.9, verified=1, broken=0, fixes=[], decisions=[], training=training,
                         main_png="", side_png="")
    assert "Weights: the molt-math agent on smollm2-135m" in page
    assert "<b>17%</b> of 63" in page and "(math-a1): <b>98%</b>" in page
    assert "<tr><td>1</td><td>16</td><td>12%</td><td>-</td>\n<td>12% of 16 (95% interval 3%–36%)</td></tr>" in page


def test_a_change_is_shown_whole_with_intervals_and_its_terms_explained() -> None:
    """The change view in the report: the change's full text (not the description's first 120 characters),
    every rate with its interval, the terms the log uses explained beside it."""
    import re

    from molt.control.change import change_view

    text = ("Acme's refund window is 45 days from delivery for every order placed online, and 60 days for orders "
            "placed in a store; refunds are paid to the original payment method within five working days.")
    entry = {"kind": "memory_insert", "description": f"remember the correction: {text[:120]}", "cost": 1.0,
             "cluster": "kb|answer|refund", "payload": {"text": text}, "source_trajectories": ["t1", "t2"],
             "evidence": {"replay": {"model": "desk-model", "backend": "DeskModel", "sampled": 8, "scored": 8,
                                     "unknown": 0, "errors": 0, "baseline_success_rate": 0.0,
                                     "candidate_success_rate": 1.0, "success_delta": 1.0,
                                     "success_delta_ci": [0.54, 1.0], "model_calls": 8, "cases": []},
                          "regression": {"scored": 12, "baseline_success_rate": 1.0, "candidate_success_rate": 1.0}}}
    view = change_view(entry, cluster={"key": "kb|answer|refund", "size": 8, "tenants": ["acme"]},
                       decision={"cycle_id": "c1", "choice": "memory_insert", "reason": "cheapest sufficient, J=7.6"})
    decisions = [{"round": 1, "tenant": "acme", "choice": "memory_insert", "reason": "cheapest sufficient, J=7.6",
                  "version": "desk@acme:v2"}]
    page = render_report(first=0.25, last=0.875, verified=1, broken=0, fixes=[], decisions=decisions, training=None,
                         main_png="", side_png="", changes=[{"round": 2, "tenant": "acme", "agent": "desk",
                                                             "view": view}], n_first=24, n_last=24)
    assert text.replace("'", "&#39;") in page
    assert "desk-model" in page and "DeskModel" in page
    for m in re.finditer(r"\d+% of \d+", page):  # every rate carries its interval
        assert page[m.end():m.end() + 15].startswith(" (95% interval"), page[m.start():m.end() + 40]
    terms = page[page.index('id="terms"'):]
    for word in ("<dt>cost</dt>", "<dt>J</dt>", "<dt>evidence bar</dt>", "p-value"):
        assert word in terms
