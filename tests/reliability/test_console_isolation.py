"""Property: the web console never shows a tenant another tenant's rows (issue 10, item 6: "console
pages" among the cross-tenant queries).

Hypothesis draws worlds of two or three tenants — random tenant ids, agent names (shared across
tenants or not), message and answer texts (HTML metacharacters and non-ASCII included), rewards,
errors, late rewards, quarantined records, policy versions and decisions — writes each world into a
fresh store, and :func:`console_probe.probe` asks every console page and JSON endpoint with each
tenant's admin and reader key (see that module). Any other tenant's marker or id in a response body,
a detail page of another tenant's id that is not a 404, or another tenant's live version moved by a
rollback fails the example.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from console_probe import TenantSpec, TrajectorySpec, run_world
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

EXAMPLES = int(os.environ.get("MOLT_CONSOLE_ISOLATION_EXAMPLES", "6"))

_name = st.from_regex(r"[a-z][a-z0-9_.-]{0,10}", fullmatch=True)
_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")) | st.sampled_from("<>&\"'\n"),
                max_size=30)


@st.composite
def worlds(draw: st.DrawFn) -> list[TenantSpec]:
    n = draw(st.integers(2, 3))
    tenants = draw(st.lists(st.from_regex(r"t[0-9a-f]{8}", fullmatch=True), min_size=n, max_size=n, unique=True))
    markers = draw(st.lists(st.from_regex(r"mk[0-9a-f]{10}", fullmatch=True), min_size=n, max_size=n, unique=True))
    shared = draw(_name)
    specs = []
    for tenant, marker in zip(tenants, markers, strict=True):
        own = draw(st.lists(_name, min_size=1, max_size=2, unique=True))
        agents = list(dict.fromkeys([shared, *own] if draw(st.booleans()) else own))
        trajs = draw(st.lists(st.builds(
            TrajectorySpec, agent=st.sampled_from(agents), text=_text, answer=_text,
            reward=st.none() | st.sampled_from([0.0, 1.0]), error=st.booleans(),
            late=st.none() | st.sampled_from([-0.5, 1.0])), min_size=1, max_size=3))
        specs.append(TenantSpec(
            tenant=tenant, marker=marker, agents=agents, trajectories=trajs,
            quarantine=draw(st.lists(_text, max_size=2)),
            decisions=draw(st.lists(st.tuples(st.sampled_from(agents), _text), max_size=2)), prompt=draw(_text)))
    return specs


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(worlds())
def test_no_console_page_or_endpoint_shows_another_tenants_rows(specs: list[TenantSpec]) -> None:
    with tempfile.TemporaryDirectory(prefix="molt-console-iso-") as home:
        got = run_world(Path(home), specs)
    assert got.probes > 0
    assert not got.leaks, f"{len(got.leaks)} of {got.probes} probes leaked:\n" + "\n".join(got.leaks[:10])
