"""The console's Jinja2 templates (autoescaped), its stylesheet and its one script, kept as strings so
the package ships no data files and the browser loads nothing from the network."""

from __future__ import annotations

__all__ = ["SCRIPT", "STYLE", "TEMPLATES"]

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:.6em 1.2em;display:flex;gap:1.2em;align-items:center}
header a{color:#cfe0ff;text-decoration:none}header a.on{color:#fff;font-weight:600}
header .who{margin-left:auto;color:#aab}header form{display:inline}
main{padding:1em 1.4em;max-width:1300px}
table{border-collapse:collapse;width:100%;background:#fff}
th,td{border-bottom:1px solid #e3e6ea;padding:.3em .5em;text-align:left;vertical-align:top}
th{background:#eef0f4;font-weight:600}
code,pre{font:12px/1.4 ui-monospace,monospace}pre{white-space:pre-wrap;margin:.2em 0;max-height:22em;overflow:auto}
.success{color:#17803d}.failure,.error{color:#b42318}.unrewarded{color:#777}
mark.redacted{background:#ffe8a3;border-radius:3px;padding:0 2px}
ul.tree{list-style:none;padding-left:1.3em;border-left:1px dashed #c5cad3;margin:.2em 0}
ul.tree.root{border:0;padding:0}
.ev{background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:.4em .6em;margin:.35em 0}
.ev .head{font-weight:600}.ev .lbl{color:#667;font-size:12px}
.badge{display:inline-block;padding:0 .45em;border-radius:9px;background:#e8ebf0;font-size:12px}
.badge.live{background:#d1f2dc;color:#17803d}.flash{background:#e4f0ff;padding:.5em .8em;border-radius:6px}
.err{background:#fde7e7;padding:.5em .8em;border-radius:6px}
form.filters{margin:.5em 0 1em}form.filters *{margin-right:.4em}
button{cursor:pointer}.danger{background:#b42318;color:#fff;border:0;border-radius:4px;padding:.3em .8em}
#chart{background:#fff;border:1px solid #dde1e7;width:100%;height:320px}
.legend span{margin-right:1em}
"""

#: Asks before a rollback; polls the signals endpoint and draws success rate per agent as SVG polylines.
SCRIPT = """
document.querySelectorAll('form.rollback').forEach(f=>f.addEventListener('submit',e=>{
  if(!confirm('Roll agent '+f.dataset.agent+' back to its previous policy version?')) e.preventDefault();}));
(function(){
  const el=document.getElementById('chart'); if(!el) return;
  const url=el.dataset.src, every=+el.dataset.every||5000, NS='http://www.w3.org/2000/svg';
  const colors=['#2563eb','#dc2626','#16a34a','#9333ea','#ea580c','#0891b2','#4d7c0f','#be185d'];
  function mk(tag,attrs,text){const n=document.createElementNS(NS,tag);
    for(const k in attrs) n.setAttribute(k,attrs[k]); if(text!==undefined) n.textContent=text; return n;}
  function draw(data){
    while(el.firstChild) el.removeChild(el.firstChild);
    const W=el.clientWidth||800,H=el.clientHeight||320,L=40,R=10,T=10,B=30;
    const agents=Object.keys(data.series); let t0=Infinity,t1=-Infinity;
    agents.forEach(a=>data.series[a].forEach(p=>{t0=Math.min(t0,p.t);t1=Math.max(t1,p.t+data.bucket_s);}));
    if(!agents.length){el.appendChild(mk('text',{x:L,y:H/2},'No rewarded trajectories yet.'));return;}
    // decisions made since the window began extend it to the right, so each one is placed on the chart
    (data.decisions||[]).forEach(d=>{if(d.t>=t0) t1=Math.max(t1,d.t+data.bucket_s/2);});
    const x=t=>L+(W-L-R)*(t1>t0?(t-t0)/(t1-t0):0.5), y=v=>T+(H-T-B)*(1-v);
    [0,0.25,0.5,0.75,1].forEach(v=>{el.appendChild(mk('line',{x1:L,x2:W-R,y1:y(v),y2:y(v),stroke:'#e3e6ea'}));
      el.appendChild(mk('text',{x:4,y:y(v)+4,'font-size':11},Math.round(v*100)+'%'));});
    el.appendChild(mk('text',{x:L,y:H-8,'font-size':11},new Date(t0*1000).toLocaleTimeString()));
    el.appendChild(mk('text',{x:W-R-70,y:H-8,'font-size':11},new Date(t1*1000).toLocaleTimeString()));
    (data.decisions||[]).forEach(d=>{if(d.t<t0||d.t>t1)return;
      const l=mk('line',{x1:x(d.t),x2:x(d.t),y1:T,y2:H-B,stroke:'#999','stroke-dasharray':'3 3',
        'class':'decision'});
      l.appendChild(mk('title',{},d.agent+': '+d.choice)); el.appendChild(l);
      el.appendChild(mk('text',{x:x(d.t)+3,y:T+10,'font-size':10,fill:'#555'},d.choice));});
    const legend=document.getElementById('legend'); if(legend) legend.textContent='';
    agents.forEach((a,i)=>{const c=colors[i%colors.length], pts=data.series[a];
      el.appendChild(mk('polyline',{fill:'none',stroke:c,'stroke-width':2,'data-agent':a,
        points:pts.map(p=>x(p.t+data.bucket_s/2)+','+y(p.rate)).join(' ')}));
      pts.forEach(p=>{const cx=x(p.t+data.bucket_s/2);
        if(p.lo!==undefined) el.appendChild(mk('line',{x1:cx,x2:cx,y1:y(p.hi),y2:y(p.lo),stroke:c,'stroke-opacity':0.35,
          'stroke-width':4,'class':'interval'}));
        const d=mk('circle',{cx:cx,cy:y(p.rate),r:3,fill:c});
        d.appendChild(mk('title',{},a+': '+Math.round(p.rate*100)+'% of '+p.n+' (95% interval '+
          Math.round(p.lo*100)+'–'+Math.round(p.hi*100)+'%)')); el.appendChild(d);});
      if(legend){const s=document.createElement('span'); s.style.color=c;
        s.textContent='\\u25A0 '+a; legend.appendChild(s);}});
  }
  async function tick(){
    try{const r=await fetch(url,{credentials:'same-origin',headers:{accept:'application/json'}});
      if(r.ok){draw(await r.json()); const u=document.getElementById('updated');
        if(u) u.textContent='updated '+new Date().toLocaleTimeString();}}
    catch(e){}
    setTimeout(tick,every);
  }
  tick();
})();
"""

_BASE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{% block title %}{% endblock %} · Molt console</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="{{ base }}/static/console.css"></head>
<body><header><strong>Molt</strong>
{% if who %}
{% for path, label in [('/trajectories','Trajectories'),('/versions','Versions'),('/decisions','Decisions'),
   ('/proposals','Proposals'),('/signals','Signals'),('/quarantine','Quarantine')] %}
{% if path not in ('/quarantine', '/proposals') or who.can('admin') %}
<a href="{{ base }}{{ path }}" class="{{ 'on' if page == path else '' }}">{{ label }}</a>{% endif %}
{% endfor %}
<span class="who">tenant <b id="tenant">{{ who.tenant_id }}</b> · {{ who.role.value }}</span>
<form method="post" action="{{ base }}/logout"><input type="hidden" name="csrf" value="{{ csrf }}">
<button type="submit">Log out</button></form>
{% endif %}
</header><main>
{% if flash %}<p class="flash" id="flash">{{ flash }}</p>{% endif %}
{% block body %}{% endblock %}
</main><script src="{{ base }}/static/console.js"></script></body></html>"""

_LOGIN = """{% extends "base" %}{% block title %}Log in{% endblock %}{% block body %}
<h1>Log in</h1>
{% if error %}<p class="err" id="error">{{ error }}</p>{% endif %}
<form method="post" action="{{ base }}/login">
<input type="hidden" name="next" value="{{ next }}">
<label>API key <input type="password" name="api_key" id="api_key" size="50" autocomplete="off" required></label>
<button type="submit" id="login">Log in</button></form>
<p>Use a tenant API key: what you see is that tenant's data, and what you may do is that key's role.</p>
{% endblock %}"""

_ERROR = """{% extends "base" %}{% block title %}{{ code }}{% endblock %}{% block body %}
<h1>{{ code }} {{ title }}</h1><p class="err" id="error">{{ message }}</p>
{% endblock %}"""

_TRAJECTORIES = """{% extends "base" %}{% block title %}Trajectories{% endblock %}{% block body %}
<h1>Trajectories</h1>
<form class="filters" method="get">
<label>agent <select name="agent"><option value="">all</option>
{% for a in agents %}<option {{ 'selected' if a == agent else '' }}>{{ a }}</option>{% endfor %}</select></label>
<label>outcome <select name="outcome"><option value="">all</option>
{% for o in ['success','failure','error','unrewarded'] %}
<option {{ 'selected' if o == outcome else '' }}>{{ o }}</option>{% endfor %}
</select></label><button type="submit">Filter</button></form>
<table id="trajectories"><thead><tr><th>trajectory</th><th>agent</th><th>task</th><th>events</th><th>errors</th>
<th>reward</th><th>outcome</th><th>last event (UTC)</th></tr></thead><tbody>
{% for t in rows %}<tr data-trajectory="{{ t.trajectory_id }}">
<td><a href="{{ base }}/trajectories/{{ t.trajectory_id }}"><code>{{ t.trajectory_id }}</code></a></td>
<td>{{ t.agent_id or '' }}</td><td>{{ t.task or '' }}</td><td>{{ t.events }}</td><td>{{ t.errors }}</td>
<td>{{ '' if t.reward is none else '%.3g' % t.reward }}</td><td class="{{ t.outcome }}">{{ t.outcome }}</td>
<td>{{ fmt_ts(t.last_ts) }}</td></tr>
{% else %}<tr><td colspan="8">No trajectories{{ ' match' if agent or outcome else ' yet' }}.</td></tr>{% endfor %}
</tbody></table>
{% if rows|length == limit %}<p>Showing the newest {{ limit }}.</p>{% endif %}
{% endblock %}"""

_TRAJECTORY = """{% extends "base" %}{% block title %}Trajectory {{ traj.trajectory_id }}{% endblock %}
{% macro node(n) %}<li><div class="ev" id="ev-{{ n.event.event_id }}" data-kind="{{ n.event.kind.value }}">
<div class="head">#{{ n.event.seq }} {{ n.event.kind.value }}{% if n.event.name %} · {{ n.event.name }}{% endif %}
{% if n.event.outcome %} · <span class="{{ 'error' if n.event.outcome.status.value == 'error' else '' }}">
{{ n.event.outcome.status.value }}</span>{% endif %}
{% if n.event.reward is not none %} · reward <b>{{ '%.3g' % n.event.reward }}</b>{% endif %}
{% if n.orphan %} · <span class="badge">parent {{ n.event.parent_id }} not in this trajectory</span>{% endif %}
<span class="lbl">{{ fmt_ts(n.event.timestamp) }}</span></div>
{% for label, text in n.sections %}<div><span class="lbl">{{ label }}</span>
<pre>{{ redact(text) }}</pre></div>{% endfor %}
{% for r in late.get(n.event.event_id, []) %}<div class="lbl">late reward <b>{{ '%+.3g' % r.value }}</b>
from {{ r.source.value }}{% if r.reason %}: {{ r.reason }}{% endif %}</div>{% endfor %}
</div>{% if n.children %}<ul class="tree">{% for c in n.children %}{{ node(c) }}{% endfor %}</ul>{% endif %}</li>
{% endmacro %}
{% block body %}
<h1>Trajectory <code>{{ traj.trajectory_id }}</code></h1>
<p>{{ traj.events|length }} events · agent {{ summary.agent_id or '—' }} · task {{ summary.task or '—' }} ·
total reward <b id="total-reward">{{ '—' if traj.total_reward is none else '%.3g' % traj.total_reward }}</b>
· chain <span id="chain" class="{{ 'success' if chain.ok else 'failure' }}">
{{ 'verifies' if chain.ok else 'FAILS: ' + chain.problems[:3]|join('; ') }}</span></p>
<h2>Provenance</h2>
<table id="provenance">{% for k, v in provenance %}<tr><th>{{ k }}</th><td><code>{{ v }}</code></td></tr>
{% else %}<tr><td>No provenance recorded.</td></tr>{% endfor %}</table>
<h2>Rewards</h2>
<table id="rewards"><thead><tr><th>value</th><th>source</th><th>on</th><th>reason</th><th>at (UTC)</th></tr>
</thead><tbody>
{% for e in traj.events if e.reward is not none %}<tr><td>{{ '%+.3g' % e.reward }}</td><td>inline</td>
<td>event #{{ e.seq }}</td><td></td><td>{{ fmt_ts(e.timestamp) }}</td></tr>{% endfor %}
{% for r in traj.rewards %}<tr class="late"><td>{{ '%+.3g' % r.value }}</td><td>{{ r.source.value }} (late)</td>
<td>{{ 'event #%s' % seqs[r.event_id] if r.event_id in seqs
       else ('event ' + r.event_id if r.event_id else 'trajectory') }}</td>
<td>{{ r.reason or '' }}</td><td>{{ fmt_ts(r.created_at) }}</td></tr>{% endfor %}
{% if not traj.rewards and traj.total_reward is none %}<tr><td colspan="5">Not rewarded yet.</td></tr>{% endif %}
</tbody></table>
<h2>Events (causal tree)</h2>
<ul class="tree root" id="tree">{% for n in tree %}{{ node(n) }}{% endfor %}</ul>
{% endblock %}"""

_VERSIONS = """{% extends "base" %}{% block title %}Versions{% endblock %}{% block body %}
<h1>Policy versions</h1>
{% if not installed %}<p class="err">The control plane is not installed, so there are no policy versions to
show.</p>{% else %}
<form class="filters" method="get"><label>agent <select name="agent"><option value="">all</option>
{% for a in agents %}<option {{ 'selected' if a == agent else '' }}>{{ a }}</option>{% endfor %}</select></label>
<button type="submit">Filter</button></form>
{% for a, vs in groups %}
<h2>Agent {{ a or '(none)' }}</h2>
{% if can_admin and rollback_to.get(a) %}<form method="post" action="{{ base }}/versions/rollback" class="rollback"
data-agent="{{ a or '' }}" data-target="{{ rollback_to.get(a) }}">
<input type="hidden" name="csrf" value="{{ csrf }}"><input type="hidden" name="agent_id" value="{{ a or '' }}">
<button type="submit" class="danger" data-agent="{{ a or '' }}">Roll back to {{ rollback_to.get(a) }}</button></form>
{% elif can_admin %}<p class="lbl norollback">Nothing to roll back to: no earlier version of this agent was live.</p>
{% endif %}
<table class="versions" data-agent="{{ a or '' }}"><thead><tr><th>version</th><th>status</th><th>parent</th>
<th>created (UTC)</th><th>success served (95% interval)</th>
<th>note</th><th></th></tr></thead><tbody>
{% for v in vs %}<tr data-version="{{ v.version_id }}" class="{{ 'live' if v.live else '' }}">
<td><a href="{{ base }}/versions/{{ v.version_id|urlencode }}"><code>{{ v.version_id }}</code></a>
{% if v.live %} <span class="badge live">live</span>{% endif %}</td>
<td>{{ v.status }}</td><td><code>{{ v.parent_id or '' }}</code></td><td>{{ fmt_ts(v.created_at) }}</td>
<td class="success-rate">{{ v.success.text }}</td>
<td>{{ v.note }}{% if v.created_by %} <span class="lbl">by {{ v.created_by }}</span>{% endif %}</td>
<td>{% if v.parent_id %}
<a href="{{ base }}/versions/diff?a={{ v.parent_id|urlencode }}&b={{ v.version_id|urlencode }}">diff with parent</a>
{% endif %}</td></tr>
{% endfor %}</tbody></table>
<details class="history"><summary>Pointer log (newest first)</summary><table>
{% for h in history.get(a, []) %}<tr><td>{{ fmt_ts(h.at) }}</td><td>{{ h.action }}</td>
<td><code>{{ h.version_id }}</code></td>
<td>{{ h.actor or '' }}</td><td>{{ h.reason or '' }}</td></tr>{% endfor %}</table></details>
{% else %}<p>No policy versions yet.</p>{% endfor %}
{% endif %}{% endblock %}"""

_DIFF = """{% extends "base" %}{% block title %}Diff{% endblock %}{% block body %}
<h1>Diff <code>{{ a.version_id }}</code> → <code>{{ b.version_id }}</code></h1>
<p>Agent {{ a.agent_id or '(none)' }}; {{ rows|length }} part{{ '' if rows|length == 1 else 's' }} differ.</p>
<table id="diff"><thead><tr><th>part</th><th>{{ a.version_id }}</th><th>{{ b.version_id }}</th></tr></thead><tbody>
{% for r in rows %}<tr><td><code>{{ r.path }}</code></td><td><pre>{{ r.a }}</pre></td><td><pre>{{ r.b }}</pre></td></tr>
{% else %}<tr><td colspan="3">The two versions are the same.</td></tr>{% endfor %}</tbody></table>
{% endblock %}"""

_DECISIONS = """{% extends "base" %}{% block title %}Decision log{% endblock %}{% block body %}
<h1>Decision log</h1>
{% if not installed %}<p class="err">The control plane is not installed, so no decisions were made.</p>{% else %}
<form class="filters" method="get"><label>agent <select name="agent"><option value="">all</option>
{% for a in agents %}<option {{ 'selected' if a == agent else '' }}>{{ a }}</option>{% endfor %}</select></label>
<button type="submit">Filter</button></form>
<table id="decisions"><thead><tr><th>at (UTC)</th><th>agent</th><th>choice</th><th>reason</th><th>applied version</th>
<th></th></tr></thead><tbody>
{% for d in rows %}<tr data-cycle="{{ d.cycle_id }}"><td>{{ fmt_ts(d.created_at) }}</td><td>{{ d.agent_id or '' }}</td>
<td><b>{{ d.choice }}</b></td>
<td>{{ d.reason }}</td><td><code>{{ d.applied_version or '' }}</code></td>
<td><a class="open" href="{{ base }}/decisions/{{ d.cycle_id }}">evidence</a></td></tr>
{% else %}<tr><td colspan="6">No decisions yet.</td></tr>{% endfor %}</tbody></table>
{% endif %}{% endblock %}"""

_SIGNALS = """{% extends "base" %}{% block title %}Signals{% endblock %}{% block body %}
<h1>Signals</h1>
<p>Success rate per agent over time (rewarded trajectories, by the time of their last event; a burst of traffic is
shown in equal groups of runs in arrival order), each point with its 95% interval as a bar; dashed lines are
control-plane decisions, placed at the time they were made. <span id="updated" class="lbl"></span></p>
<svg id="chart" data-src="{{ base }}/api/signals" data-every="5000" role="img" aria-label="success rate"></svg>
<p class="legend" id="legend"></p>
<table id="totals"><thead><tr><th>agent</th><th>success</th><th>failure</th><th>error</th><th>unrewarded</th>
<th>success rate (95% interval)</th></tr></thead><tbody>
{% for a, t in totals %}<tr><td>{{ a }}</td><td>{{ t.success }}</td><td>{{ t.failure }}</td><td>{{ t.error }}</td>
<td>{{ t.unrewarded }}</td>
<td>{{ rate_text(t.success, t.success + t.failure) }}</td></tr>
{% else %}<tr><td colspan="6">No trajectories yet.</td></tr>{% endfor %}</tbody></table>
{% endblock %}"""

_QUARANTINE = """{% extends "base" %}{% block title %}Quarantine{% endblock %}{% block body %}
<h1>Quarantine</h1>
<p>Records governance kept out of the store and the training queue, with the stage that stopped them.</p>
<table id="quarantine"><thead><tr><th>at (UTC)</th><th>stage</th><th>reason</th><th>kind</th><th>trajectory</th>
<th>event</th></tr></thead><tbody>
{% for q in rows %}<tr><td>{{ fmt_ts(q.ts) }}</td><td>{{ q.stage }}</td><td>{{ q.reason }}</td>
<td>{{ q.kind or '' }}</td>
<td><code>{{ q.trajectory_id or '' }}</code></td><td><code>{{ q.event_id or '' }}</code></td></tr>
{% else %}<tr><td colspan="6">Nothing is quarantined.</td></tr>{% endfor %}</tbody></table>
{% if rows|length == limit %}<p>Showing the newest {{ limit }}.</p>{% endif %}
{% endblock %}"""

_DECISION = """{% extends "base" %}{% from "change" import change as change_html %}{% block title %}Decision{% endblock %}
{% block body %}
<h1>Decision: {{ d.choice }} for agent {{ d.agent_id }}</h1>
<p>{{ fmt_ts(d.created_at) }} UTC · cycle <code>{{ d.cycle_id }}</code>{% if d.applied_version %} · version
<a href="{{ base }}/versions/{{ d.applied_version|urlencode }}"><code>{{ d.applied_version }}</code></a>{% endif %}</p>
<p id="reason">{{ d.reason }}</p>
{% if change %}{{ change_html(change, base + '/trajectories/') }}{% else %}<p>No change was chosen in this cycle.</p>{% endif %}
{% if actions %}<h2>What the cycle did</h2><ul id="actions">{% for a in actions %}<li>{{ a }}</li>{% endfor %}</ul>{% endif %}
{% if rejected %}<h2>Candidates not chosen</h2><table id="rejected"><thead><tr><th>kind</th><th>what</th><th>why not</th>
</tr></thead><tbody>{% for r in rejected %}<tr><td>{{ r.kind }}</td><td>{{ r.description or r.cluster or '' }}</td>
<td>{{ r.rejected }}</td></tr>{% endfor %}</tbody></table>{% endif %}
<details class="raw"><summary>signals (raw JSON)</summary><pre>{{ d.signals }}</pre></details>
{% endblock %}"""

_VERSION = """{% extends "base" %}{% from "change" import change as change_html %}{% block title %}Version{% endblock %}
{% block body %}
<h1>Version <code>{{ v.version_id }}</code> <span class="badge {{ 'live' if v.live else '' }}" id="status">{{ v.status }}</span></h1>
<p>Agent {{ v.agent_id }} · created {{ fmt_ts(v.created_at) }} UTC{% if v.created_by %} by {{ v.created_by }}{% endif %}
· {{ v.note }}</p>
<h2>Lineage and success served</h2>
<table id="lineage"><thead><tr><th>version</th><th>success of the requests it served (95% interval)</th></tr></thead><tbody>
{% for x, s in lineage %}<tr data-version="{{ x.version_id }}"><td><a href="{{ base }}/versions/{{ x.version_id|urlencode }}">
<code>{{ x.version_id }}</code></a> {{ x.status }}</td><td>{{ s.text }}</td></tr>{% endfor %}</tbody></table>
<h2>What its learned parts were made from</h2>
{% if learned %}<table id="learned-from"><thead><tr><th>part</th><th>id</th><th>tenants</th><th>trajectories</th>
<th>subjects (keyed digests)</th><th>status</th></tr></thead><tbody>
{% for r in learned %}<tr data-kind="{{ r.kind }}"><td>{{ r.kind }}</td><td><code>{{ r.artifact }}</code></td>
<td>{{ r.tenants|join(', ') }}</td><td>{{ r.trajectories }}</td><td>{{ r.subjects }}</td><td>{{ r.status }}</td></tr>
{% endfor %}</tbody></table>{% else %}<p id="learned-from">No learned part (memory, skill, harness edit, tool rewrite,
adapter) with a recorded lineage.</p>{% endif %}
<h2>The change that made it</h2>
{% if change %}{{ change_html(change, base + '/trajectories/') }}{% else %}<p>No recorded change made this version (a base version,
or one created by hand).</p>{% endif %}
<h2>Parts</h2>
<table id="parts">{% for r in parts %}<tr><th><code>{{ r.path }}</code></th><td><pre>{{ r.a }}</pre></td></tr>{% endfor %}</table>
<details class="history"><summary>Pointer log of this version</summary><table>
{% for h in history %}<tr><td>{{ fmt_ts(h.at) }}</td><td>{{ h.action }}</td><td>{{ h.actor or '' }}</td>
<td>{{ h.reason or '' }}</td></tr>{% endfor %}</table></details>
{% endblock %}"""

_PROPOSALS = """{% extends "base" %}{% from "change" import change as change_html %}{% block title %}Proposals{% endblock %}
{% block body %}
<h1>Proposals</h1>
<p>Changes the control plane wants to make and may not make without you (approval mode). Approving one starts its
canary: a share of new sessions is served by it, and the plane promotes or aborts it on what it serves.
Rejecting one keeps the live version, and the same change is not proposed again for its failure cluster.</p>
{% if not installed %}<p class="err">The control plane is not installed.</p>{% else %}
{% for p, v in waiting %}<div class="proposal" data-version="{{ p.version.version_id }}">
<h2>{{ p.version.agent_id }}: <code>{{ p.version.version_id }}</code></h2>
{{ change_html(v, base + '/trajectories/') }}
<form method="post" action="{{ base }}/proposals/approve" class="approve">
<input type="hidden" name="csrf" value="{{ csrf }}"><input type="hidden" name="version_id" value="{{ p.version.version_id }}">
<label>comment <input name="comment" size="40"></label> <button type="submit">Approve (start the canary)</button></form>
<form method="post" action="{{ base }}/proposals/reject" class="reject">
<input type="hidden" name="csrf" value="{{ csrf }}"><input type="hidden" name="version_id" value="{{ p.version.version_id }}">
<label>why <input name="comment" size="40" required></label> <button type="submit" class="danger">Reject</button></form>
</div>
{% else %}<p id="none">No change is waiting for approval.</p>{% endfor %}
{% if decided %}<h2>Decided</h2><table id="decided"><thead><tr><th>version</th><th>kind</th><th>status</th><th>by</th>
<th>comment</th></tr></thead><tbody>{% for p in decided %}<tr data-version="{{ p.version.version_id }}">
<td><a href="{{ base }}/versions/{{ p.version.version_id|urlencode }}"><code>{{ p.version.version_id }}</code></a></td>
<td>{{ p.kind }}</td><td>{{ p.status }}</td><td>{{ (p.decision or {}).get('actor') or '' }}</td>
<td>{{ (p.decision or {}).get('reason') or '' }}</td></tr>{% endfor %}</tbody></table>{% endif %}
{% endif %}{% endblock %}"""

TEMPLATES: dict[str, str] = {
    "decision": _DECISION, "version": _VERSION, "proposals": _PROPOSALS,
    "base": _BASE, "login": _LOGIN, "error": _ERROR, "trajectories": _TRAJECTORIES, "trajectory": _TRAJECTORY,
    "versions": _VERSIONS, "diff": _DIFF, "decisions": _DECISIONS, "signals": _SIGNALS, "quarantine": _QUARANTINE,
}
