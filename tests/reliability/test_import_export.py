"""Trajectory export → import: a round trip keeps every byte and chain; a hostile file is refused whole.

The import (``molt trajectories import``, :func:`molt.capture.importer.import_parquet`) trusts nothing
in the file: tampered bytes, a forged tenant column, a truncated chain, oversized rows, path-like ids,
and paths that are not Parquet files.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from molt.atdp import Event, EventKind, UserMessage
from molt.capture import Recorder
from molt.capture.importer import import_parquet
from molt.errors import MoltError
from molt.store import Store


def _fill(home: Path, trajectories: dict[str, str], n: int = 4) -> Store:
    """A store with ``n`` events in each trajectory id → tenant of ``trajectories``."""
    store = Store.open(home / "store", auto_compact=False)
    rec = Recorder(store, spool_dir=home / "spool")
    for tid, tenant in trajectories.items():
        for i in range(n):
            rec.record(Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE, metadata={"tenant_id": tenant},
                             action=UserMessage(content=f"{tenant}-marker-{tid}-{i}")))
    assert rec.flush(timeout=60, deliver=True)
    rec.close()
    return store


@pytest.fixture
def exported(tmp_path: Path) -> dict[str, Any]:
    tids = {"t-acme-1": "acme", "t-acme-2": "acme", "t-globex-1": "globex"}
    src = _fill(tmp_path / "src", tids)
    path = tmp_path / "all.parquet"
    assert src.export_parquet(path) == 12
    return {"src": src, "path": path, "tids": tids}


def _dst(tmp_path: Path) -> Store:
    return Store.open(tmp_path / "dst" / "store", auto_compact=False)


def _rewrite(path: Path, out: Path, edit: Any) -> Path:
    """``path``'s rows, changed in place by ``edit`` (or replaced by what it returns), written to ``out``."""
    rows = pq.read_table(path).to_pylist()
    rows = edit(rows) or rows
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(path)), out)
    return out


def test_round_trip_keeps_records_byte_identical_and_a_rerun_imports_nothing(exported: dict[str, Any],
                                                                            tmp_path: Path) -> None:
    src, dst = exported["src"], _dst(tmp_path)
    report = import_parquet(dst, exported["path"])
    assert (report.rows, report.imported, report.duplicates, report.trajectories) == (12, 12, 0, 3)
    for tid, tenant in exported["tids"].items():
        assert dst.sealed_events(tid) == src.sealed_events(tid)  # envelope, payload, salt, chain: same bytes
        assert dst.verify(tid).ok
        assert dst.trajectory_tenant(tid) == tenant
    again = import_parquet(dst, exported["path"])
    assert (again.imported, again.duplicates) == (0, 12)
    assert dst.count("events") == 12


def test_an_import_continues_a_stored_trajectory_only_from_its_head(exported: dict[str, Any], tmp_path: Path) -> None:
    path = exported["path"]
    head = _rewrite(path, tmp_path / "head.parquet",
                    lambda rows: [r for r in rows if r["trajectory_id"] == "t-acme-1" and r["seq"] < 2])
    tail = _rewrite(path, tmp_path / "tail.parquet",
                    lambda rows: [r for r in rows if r["trajectory_id"] == "t-acme-1" and r["seq"] >= 2])
    dst = _dst(tmp_path)
    with pytest.raises(MoltError, match="expected seq 0"):  # a tail alone does not start a chain
        import_parquet(dst, tail)
    assert dst.count("events") == 0
    assert import_parquet(dst, head).imported == 2
    assert import_parquet(dst, tail).imported == 2  # now it links after the stored head
    assert dst.verify("t-acme-1").ok and dst.count("events") == 4


@pytest.mark.parametrize("column", ["envelope", "payload"])
def test_a_tampered_byte_refuses_the_whole_file(exported: dict[str, Any], tmp_path: Path, column: str) -> None:
    def edit(rows: list[dict[str, Any]]) -> None:
        b = bytearray(rows[5][column])
        b[len(b) // 2] ^= 0x01
        rows[5][column] = bytes(b)

    bad = _rewrite(exported["path"], tmp_path / "bad.parquet", edit)
    dst = _dst(tmp_path)
    with pytest.raises(MoltError, match="Nothing imported") as err:
        import_parquet(dst, bad)
    assert "edited" in str(err.value) or "not valid JSON" in str(err.value)
    assert dst.count("events") == 0  # all or nothing: the 11 good rows are not written either


def test_the_tenant_comes_from_the_hashed_record_not_the_file_columns(exported: dict[str, Any],
                                                                      tmp_path: Path) -> None:
    def forge(rows: list[dict[str, Any]]) -> None:
        for r in rows:
            r["tenant_id"] = "acme"  # globex's rows relabelled in the index column only

    forged = _rewrite(exported["path"], tmp_path / "forged.parquet", forge)
    dst = _dst(tmp_path)
    with pytest.raises(MoltError, match="belongs to tenant 'globex'"):
        import_parquet(dst, forged, tenant_id="acme")  # an acme key cannot import globex's events
    assert dst.count("events") == 0
    import_parquet(dst, forged)  # the operator can; the rows land under the tenant their envelope names
    assert dst.trajectory_tenant("t-globex-1") == "globex"
    assert dst.count("events", "tenant_id = 'acme'") == 8


def test_oversized_rows_and_malformed_columns_are_refused_with_their_row(exported: dict[str, Any],
                                                                        tmp_path: Path) -> None:
    dst = _dst(tmp_path)
    with pytest.raises(MoltError, match=r"row 1 .*record limit"):
        import_parquet(dst, exported["path"], max_record_bytes=64)

    def break_chain(rows: list[dict[str, Any]]) -> None:
        rows[2]["chain"] = "not-a-chain"

    with pytest.raises(MoltError, match=r"row 3 .*chain column is malformed"):
        import_parquet(dst, _rewrite(exported["path"], tmp_path / "c.parquet", break_chain))
    assert dst.count("events") == 0


def test_path_like_ids_are_data(tmp_path: Path) -> None:
    """Ids are never turned into paths: ``../`` ids round-trip and no file appears outside the store."""
    tids = {"../../escape-traj": "acme", "/etc/passwd": "acme"}
    src = _fill(tmp_path / "src", tids, n=2)
    path = tmp_path / "ids.parquet"
    src.export_parquet(path)
    before = set(tmp_path.rglob("*"))
    dst = _dst(tmp_path / "deep" / "er")
    assert import_parquet(dst, path).imported == 4
    created = {p for p in set(tmp_path.rglob("*")) - before if not str(p).startswith(str(tmp_path / "deep"))}
    assert created == set()
    assert not (tmp_path.parent / "escape-traj").exists()
    assert [e.trajectory_id for e in dst.trajectory("../../escape-traj").events] == ["../../escape-traj"] * 2


def test_paths_that_are_not_a_parquet_export_are_refused(tmp_path: Path) -> None:
    dst = _dst(tmp_path)
    with pytest.raises(MoltError, match="not a regular file"):
        import_parquet(dst, tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # reading it would block forever
    with pytest.raises(MoltError, match="not a regular file"):
        import_parquet(dst, fifo)
    (tmp_path / "x.parquet").write_text("hello")
    with pytest.raises(MoltError, match="not a Parquet file"):
        import_parquet(dst, tmp_path / "x.parquet")
    pq.write_table(pa.table({"a": [1]}), tmp_path / "other.parquet")
    with pytest.raises(MoltError, match="not a Molt trajectory export"):
        import_parquet(dst, tmp_path / "other.parquet")
    with pytest.raises(MoltError, match="Cannot read"):
        import_parquet(dst, tmp_path / "missing.parquet")


@pytest.mark.slow
def test_cli_import_is_scoped_to_the_keys_tenant(exported: dict[str, Any], tmp_path: Path, monkeypatch: Any,
                                                 capsys: Any) -> None:
    from molt.cli import run

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("MOLT_HOME", str(home))
    monkeypatch.delenv("MOLT_KEYS", raising=False)
    keys = {"sk-acme-admin": ("acme", "admin"), "sk-acme-reader": ("acme", "reader")}
    (home / "keys.toml").write_text("\n".join(f'[[keys]]\nkey = "{k}"\ntenant = "{t}"\nrole = "{r}"\n'
                                              for k, (t, r) in keys.items()))
    acme_only = _rewrite(exported["path"], tmp_path / "acme.parquet",
                         lambda rows: [r for r in rows if r["tenant_id"] == "acme"])
    for argv, rc_want, text in (
        ([str(exported["path"])], 2, "api-key"),  # a key file exists: no key is an error
        ([str(exported["path"]), "--api-key", "sk-acme-reader"], 2, "may not"),
        ([str(exported["path"]), "--api-key", "sk-acme-admin"], 2, "globex"),  # globex's rows: refused whole
        ([str(acme_only), "--api-key", "sk-acme-admin"], 0, "Imported 8 events of 2 trajectories"),
    ):
        rc = run(["trajectories", "import", *argv])
        out = capsys.readouterr()
        assert rc == rc_want and text in out.out + out.err, (argv, out)
    store = Store.open(home / "store", auto_compact=False)
    assert store.count("events") == 8 and store.count("events", "tenant_id = 'globex'") == 0


def test_a_tenants_import_never_extends_another_tenants_trajectory(tmp_path: Path) -> None:
    """Issue 27: the import path follows the same ownership rule as chat, OTLP and feedback."""
    src = _fill(tmp_path / "src", {"order-4711-run": "acme"})
    path = tmp_path / "acme.parquet"
    assert src.export_parquet(path) == 4
    dst = _fill(tmp_path / "dst", {"order-4711-run": "globex"}, n=2)
    before = [s.hash for s in dst.sealed_events("order-4711-run")]
    with pytest.raises(MoltError, match="another tenant's events"):
        import_parquet(dst, path, tenant_id="acme")
    assert [s.hash for s in dst.sealed_events("order-4711-run")] == before and dst.verify("order-4711-run").ok
    assert dst.trajectory_tenant("order-4711-run") == "globex"
