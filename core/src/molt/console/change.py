"""The one HTML component that shows a control-plane change (:func:`molt.control.change.change_view`'s
data): the console's decision, version and proposal pages and the demo report all render it.

``CHANGE_TEMPLATE`` is a Jinja2 macro file (autoescaped by the environment that loads it); load it as
``"change"`` and call ``{% from "change" import change %}{{ change(view, link) }}`` where ``link`` is the
URL prefix of a trajectory page (``"/console/trajectories/"``) or empty for ids without links.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CHANGE_STYLE", "CHANGE_TEMPLATE", "render_change"]

CHANGE_STYLE = """
.change{background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:.6em .9em;margin:.6em 0}
.change h3{margin:.2em 0 .4em}.change h4{margin:.8em 0 .3em}
.change .term{color:#556;font-size:12px}.change table{width:100%;border-collapse:collapse}
.change td,.change th{border-bottom:1px solid #e3e6ea;padding:.25em .4em;vertical-align:top;text-align:left}
.change pre{white-space:pre-wrap;word-break:break-word;margin:0;max-height:none;overflow:visible}
.change .passed{color:#17803d}.change .failed,.change .refused,.change .error{color:#b42318}
.change .unknown,.change .skipped{color:#777}
.change details.raw pre{max-height:30em;overflow:auto}
"""

CHANGE_TEMPLATE = """{% macro tid(id, link) -%}
{%- if link %}<a href="{{ link }}{{ id }}"><code>{{ id }}</code></a>{% else %}<code>{{ id }}</code>{% endif -%}
{%- endmacro %}
{% macro change(v, link='') -%}
<section class="change" data-kind="{{ v.kind }}"{% if v.version_id %} data-version="{{ v.version_id }}"{% endif %}>
<h3>{{ v.kind_name }}{% if v.version_id %} → <code>{{ v.version_id }}</code>{% endif %}
{% if v.decision.cycle_id %}<span class="term">decided in cycle <code>{{ v.decision.cycle_id }}</code></span>{% endif %}</h3>
{% if v.rejected %}<p class="refused">Not applied: {{ v.rejected }}</p>{% endif %}

<h4>What failed</h4>
<p class="failed-summary"><b>{{ v.failed.size }}</b> failure{{ '' if v.failed.size == 1 else 's' }}
{% if v.failed.requests %}among {{ v.failed.requests }} requests of this intent{% endif %}
{% if v.failed.task %}· task <code>{{ v.failed.task }}</code>{% endif %}
{% if v.failed.intent %}· intent “{{ v.failed.intent }}”{% endif %}
· tenant{{ '' if v.failed.tenants|length == 1 else 's' }} {{ v.failed.tenants|join(', ') or '—' }}
{% if v.failed.users %}· {{ v.failed.users|length }} distinct user{{ '' if v.failed.users|length == 1 else 's' }} / session{{ '' if v.failed.users|length == 1 else 's' }}{% endif %}
{% if v.failed.said %}· said by {% for k, n in v.failed.said.items() %}{{ k }} ({{ n }}){{ ', ' if not loop.last }}{% endfor %}{% endif %}
{% if v.failed.p_value is not none %}· p = {{ '%.3g' % v.failed.p_value }}{% if v.failed.level is not none %} (level {{ '%.3g' % v.failed.level }}){% endif %}
<span class="term">(p-value: {{ v.terms['p-value'] }})</span>{% endif %}</p>
<table class="examples"><thead><tr><th>run</th><th>the user asked</th><th>the agent answered</th>
<th>correction / verdict</th></tr></thead><tbody>
{% for e in v.failed.examples %}<tr data-trajectory="{{ e.trajectory_id }}"><td>{{ tid(e.trajectory_id, link) }}</td>
<td><pre>{{ e.question }}</pre></td><td><pre>{{ e.answer }}</pre></td>
<td><pre>{% if e.correction %}correction: {{ e.correction }}{% elif e.verdict %}verdict: {{ e.verdict }}{% else %}{{ e.said|join(', ') }}{% endif %}</pre></td></tr>
{% else %}<tr><td colspan="4">{% for t in v.failed.example_ids[:3] %}{{ tid(t, link) }} {% else %}No example runs recorded.{% endfor %}</td></tr>{% endfor %}
</tbody></table>

<h4>What is proposed</h4>
<pre class="proposed-text">{{ v.proposed.text }}</pre>
{% if v.proposed.diff %}<table class="diff"><thead><tr><th>part</th>
<th>live{% if v.parent_id %} (<code>{{ v.parent_id }}</code>){% endif %}</th><th>with the change</th></tr></thead><tbody>
{% for d in v.proposed.diff %}<tr><td><code>{{ d.part }}</code></td><td><pre>{{ d.live }}</pre></td><td><pre>{{ d.proposed }}</pre></td></tr>{% endfor %}
</tbody></table>{% endif %}

<h4>Evidence</h4>
{% if v.replay and not v.replay.skipped %}
<p class="replay">Replay with model <b class="replay-model">{{ v.replay.model or 'unknown' }}</b>
({{ v.replay.backend or 'backend not recorded' }}{% if v.replay.mode %}; {{ v.replay.mode }}{% endif %}):
{{ v.replay.sampled }} case{{ '' if v.replay.sampled == 1 else 's' }} replayed —
<span class="passed">{{ v.replay.tally.passed }} passed</span>, <span class="failed">{{ v.replay.tally.failed }} failed</span>,
<span class="unknown">{{ v.replay.tally.unknown }} unknown</span>{% if v.replay.tally.error %}, <span class="error">{{ v.replay.tally.error }} errors</span>{% endif %}.
Success {{ v.replay.baseline_label }}: {{ v.replay.before.text }}; with the change: {{ v.replay.after.text }};
delta <b class="delta">{{ v.replay.delta.text }}</b>.
<span class="term">(replay: {{ v.terms.replay }}. delta: {{ v.terms.delta }}. interval: {{ v.terms.interval }}.)</span></p>
{% if v.replay.cases %}<details class="cases"><summary>the {{ v.replay.cases|length }} replayed cases</summary><ul>
{% for c in v.replay.cases %}<li class="{{ c.verdict }}">{{ tid(c.trajectory_id, link) }} {{ c.verdict }}
{%- if c.replayed is not none %} (replayed reward {{ '%.2g' % c.replayed }}{% if c.recorded is not none %}, recorded {{ '%.2g' % c.recorded }}{% endif %}){% endif %}</li>{% endfor %}
</ul></details>{% endif %}
{% elif v.replay %}<p class="replay">Replay skipped: {{ v.replay.skipped }}</p>
{% else %}<p class="replay">No replay was recorded for this change.</p>{% endif %}
<p class="regression">Regression check: <span class="{{ v.regression.state }}">{{ v.regression.text }}</span>
<span class="term">(regression: {{ v.terms.regression }})</span></p>
{% if v.served %}<p class="served">Served: {% if v.served.version.n %}this version {{ v.served.version.text }}{% else %}this version
has served no rewarded request yet{% endif %}; its parent {{ v.served.parent.text }}{% if v.served.delta %}; difference
{{ v.served.delta.text }}{% endif %}.</p>{% endif %}
{% if v.canary %}<p class="canary">Guarded canary: {{ v.canary.setup }}. Its state: <b class="canary-state">{{ v.canary.text }}</b>
<span class="term">(guarded canary: {{ v.terms['guarded canary'] }})</span></p>{% endif %}
<p class="cost">Cost: {{ v.cost.text }} <span class="term">(cost: {{ v.terms.cost }})</span></p>

<h4>Gates</h4>
<table class="gates"><tbody>
{% for g in v.gates %}<tr><td>{{ g.gate }}</td><td class="{{ g.verdict }}">{{ g.verdict }}</td><td>{{ g.detail }}</td></tr>{% endfor %}
</tbody></table>
<p class="why"><b>Why this change:</b> {{ v.why }} <span class="term">(evidence bar: {{ v.terms['evidence bar'] }})</span></p>
{% if v.decision.reason %}<p class="reason">The plane's reason: {{ v.decision.reason }}</p>{% endif %}
<details class="raw"><summary>raw JSON</summary><pre>{{ v.raw }}</pre></details>
</section>
{%- endmacro %}"""


def render_change(view: dict[str, Any], link: str = "") -> str:
    """``view`` as HTML (the component alone), for pages not rendered by the console's environment."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.DictLoader({"change": CHANGE_TEMPLATE}), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    return str(env.from_string('{% from "change" import change %}{{ change(v, link) }}').render(v=view, link=link))
