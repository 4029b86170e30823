"""molt.store.Filter: the typed query seam, against a real LanceDB table (hostile values included)."""

from __future__ import annotations

import ast
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import lancedb
import pyarrow as pa
import pytest

from molt.store import Filter
from molt.store.scoped import TenantView

ROOT = Path(__file__).resolve().parents[3]
T0 = datetime(2026, 12, 1, tzinfo=UTC)

#: Values an attacker (or an unlucky user) could put in an id: quotes, doubled quotes, comment and
#: statement markers, backslashes, SQL keywords, unicode quotes, newlines, and the empty string.
HOSTILE = ["x' OR '1'='1", "'", "''", "a''b", "o'brien", "--", "/* */", "a; DROP TABLE events", "\\", "\\'",
           "x\\' OR 1=1 --", "‘smart’ “quotes”", "line\nbreak", "tab\tbed", "%", "_", "NULL", "TRUE",
           "tenant_id", ") OR (1=1", "", " ", "日本語", "😀'😀"]


def _random_texts(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    alphabet = "ab'\"\\%_ ;-()=*/\n\tOR1é😀"
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))) for _ in range(n)]


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Any:
    ids = list(dict.fromkeys(HOSTILE + _random_texts(200)))
    rows = [{"id": v, "tenant_id": ("acme" if i % 3 else None), "n": i, "score": i / 10, "flag": bool(i % 2),
             "ts": T0 + timedelta(hours=i)} for i, v in enumerate(ids)]
    schema = pa.schema([("id", pa.string()), ("tenant_id", pa.string()), ("n", pa.int64()),
                        ("score", pa.float64()), ("flag", pa.bool_()), ("ts", pa.timestamp("us", tz="UTC"))])
    db = lancedb.connect(str(tmp_path_factory.mktemp("filters")))
    return db.create_table("t", pa.Table.from_pylist(rows, schema=schema))


def _ids(table: Any, f: Filter) -> set[str]:
    return set(table.search().where(str(f)).select(["id"]).limit(None).to_arrow().column("id").to_pylist())


def test_each_hostile_value_matches_exactly_its_own_row(table: Any) -> None:
    everything = set(table.to_arrow().column("id").to_pylist())
    for v in sorted(everything):
        assert _ids(table, Filter(id=v)) == {v}, repr(v)
        assert _ids(table, Filter().other_than("id", [v])) == everything - {v}, repr(v)
    subset = sorted(everything)[::7]
    assert _ids(table, Filter().among("id", subset)) == set(subset)
    assert _ids(table, Filter().among("id", [])) == set()


def test_comparisons_nulls_and_alternatives_select_what_python_selects(table: Any) -> None:
    rows = table.to_arrow().to_pylist()

    def want(pred: Any) -> set[str]:
        return {r["id"] for r in rows if pred(r)}

    cut = T0 + timedelta(hours=50)
    assert _ids(table, Filter().before("ts", cut)) == want(lambda r: r["ts"] < cut)
    assert _ids(table, Filter().since("ts", cut)) == want(lambda r: r["ts"] >= cut)
    assert _ids(table, Filter().after("n", 40).at_or_before("n", 60)) == want(lambda r: 40 < r["n"] <= 60)
    assert _ids(table, Filter(flag=True).before("score", 3.05)) == want(lambda r: r["flag"] and r["score"] < 3.05)
    assert _ids(table, Filter().absent("tenant_id")) == want(lambda r: r["tenant_id"] is None)
    assert _ids(table, Filter(tenant_id="acme").present("tenant_id")) == want(lambda r: r["tenant_id"] == "acme")
    either = Filter().either(Filter(tenant_id="acme").before("n", 10), Filter().absent("tenant_id").since("n", 200))
    assert _ids(table, either) == want(lambda r: (r["tenant_id"] == "acme" and r["n"] < 10)
                                       or (r["tenant_id"] is None and r["n"] >= 200))
    assert _ids(table, Filter().none_of(Filter(flag=True), Filter().before("n", 5))) == want(
        lambda r: not r["flag"] and r["n"] >= 5)
    # a naive time is local time, as datetime.astimezone reads it
    local = cut.astimezone().replace(tzinfo=None)
    assert _ids(table, Filter().before("ts", local)) == want(lambda r: r["ts"] < cut)


def test_chunks_cover_every_value_once_in_bounded_lists(table: Any) -> None:
    everything = sorted(set(table.to_arrow().column("id").to_pylist()))
    parts = list(Filter(tenant_id="acme").chunks("id", everything, size=50))
    assert len(parts) == -(-len(everything) // 50)
    got = [_ids(table, p) for p in parts]
    assert set().union(*got) == {r["id"] for r in table.to_arrow().to_pylist() if r["tenant_id"] == "acme"}
    assert sum(len(g) for g in got) == len(set().union(*got))


def test_bad_values_and_columns_are_refused_with_a_reason() -> None:
    with pytest.raises(ValueError, match="NUL"):
        Filter(id="a\x00b")
    with pytest.raises(ValueError, match="finite"):
        Filter(score=float("nan"))
    with pytest.raises(ValueError, match="not a column name"):
        Filter().among("id) OR (1=1", ["a"])
    with pytest.raises(ValueError, match="not a column name"):
        Filter(**{"tenant_id = 'a' OR 1": "x"})
    with pytest.raises(TypeError, match="absent"):  # a missing tenant id never means "the untagged rows"
        Filter(tenant_id=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="str, int, float, bool or datetime"):
        Filter(id=["a", "b"])  # type: ignore[arg-type]
    assert Filter.given(tenant_id="acme", agent_id=None) == Filter(tenant_id="acme")
    assert not Filter() and str(Filter()) == "TRUE"
    assert str(Filter(flag=False, n=3)) == "flag = FALSE AND n = 3"


def test_a_hostile_agent_id_stays_inside_the_tenant_view(store: Any, molt_home: Path, event_factory: Any) -> None:
    from molt.capture import Recorder

    rec = Recorder(store, spool_dir=molt_home / "spool")
    for tenant in ("acme", "globex"):
        tid = rec.new_trajectory()
        for i in range(2):
            rec.record(event_factory(tid, i, tenant=tenant))
    assert rec.flush(30, deliver=True)
    acme = TenantView.for_tenant(store, "acme")
    for hostile in ("x' OR tenant_id = 'globex", "') OR ('1'='1", "x' OR 1=1 --"):
        assert acme.trajectories(agent=hostile) == []
        assert acme.scan("events", where=Filter(agent_id=hostile)).num_rows == 0
        assert store.trajectories(tenant=hostile) == []
    assert {r["tenant_id"] for r in acme.scan("events", where=Filter(seq=0), columns=["tenant_id"]).to_pylist()} \
        == {"acme"}
    rec.close()


def test_no_query_string_is_built_outside_the_store() -> None:
    """Code outside molt.store says which rows it wants with a Filter: it never calls the store's
    literal quoting, and never passes an f-string or a concatenation as a filter."""
    bad = []
    sources = [ROOT / "core" / "src", ROOT / "trainer" / "src", ROOT / "demo" / "src",
               *sorted((ROOT / "adapters").glob("*/src")), *sorted((ROOT / "examples").glob("*/src"))]
    for base in sources:
        for f in base.rglob("*.py"):
            if f.is_relative_to(ROOT / "core" / "src" / "molt" / "store"):
                continue
            for node in ast.walk(ast.parse(f.read_text())):
                if (isinstance(node, ast.Name) and node.id == "sql_str") or (
                        isinstance(node, ast.ImportFrom) and any(a.name == "sql_str" for a in node.names)):
                    bad.append(f"{f.relative_to(ROOT)}:{node.lineno} uses sql_str")
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                    # LanceDB's filter-taking calls take it first; the store's take it as where=
                    args = [k.value for k in node.keywords if k.arg == "where"]
                    if node.func.attr in {"where", "count_rows", "delete"}:
                        args += node.args[:1]
                    if any(isinstance(a, ast.JoinedStr) or (isinstance(a, ast.BinOp) and isinstance(a.op, ast.Add))
                           for a in args):
                        bad.append(f"{f.relative_to(ROOT)}:{node.lineno} builds a filter string: "
                                   f"{ast.unparse(node)[:80]}")
    assert not bad, "\n".join(bad)
