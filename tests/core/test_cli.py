"""The `molt` command: schema, trajectories ls/show/export, reward, verify, doctor."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from molt.capture import Recorder
from molt.store import Store


class Result:
    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


_capsys: pytest.CaptureFixture[str] | None = None



@pytest.mark.parametrize("args", [["serve", "--capture-recycle", "5"], ["serve", "--max-sessions", "5"],
                                  ["serve", "--port", "many"]])
def test_an_invalid_option_value_is_one_usage_line_and_status_2(molt_home: Path, args: list[str]) -> None:
    r = molt(*args, home=molt_home, check=False)
    assert r.returncode == 2 and "Invalid value" in r.stderr and args[1] in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


@pytest.fixture(autouse=True)
def _wide_terminal(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    global _capsys
    _capsys = capsys
    monkeypatch.setenv("COLUMNS", "250")


def molt(*args: str, home: Path, check: bool = True) -> Result:
    """Run `molt` in-process (as the console script does) under MOLT_HOME=home."""
    import os

    from molt.cli import run

    assert _capsys is not None
    _capsys.readouterr()
    old = os.environ["MOLT_HOME"]
    os.environ["MOLT_HOME"] = str(home)
    try:
        rc = run(list(args))
    finally:
        os.environ["MOLT_HOME"] = old
    out, err = _capsys.readouterr()
    if check and rc != 0:
        raise AssertionError(f"molt {' '.join(args)} exited {rc}:\n{out}\n{err}")
    return Result(rc, out, err)


def test_console_script_exit_codes(molt_home: Path) -> None:
    """The installed entry point: a clean error line and status 2, no traceback."""
    Store.open(molt_home / "store").close()
    proc = subprocess.run([sys.executable, "-m", "molt.cli", "trajectories", "show", "nope"],
                          capture_output=True, text=True, timeout=120,
                          env={"MOLT_HOME": str(molt_home), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2 and "No trajectory nope" in proc.stderr and "Traceback" not in proc.stderr


@pytest.fixture
def filled(molt_home: Path, event_factory) -> list[str]:  # type: ignore[no-untyped-def]
    store = Store.open(molt_home / "store", auto_compact=False)
    with Recorder(store, spool_dir=molt_home / "spool") as rec:
        tids = [rec.new_trajectory() for _ in range(3)]
        for tid in tids:
            for i in range(4):
                rec.record(event_factory(tid, i, tenant="acme" if tid != tids[2] else "globex"))
        assert rec.flush(deliver=True)
    store.close()
    return tids


def test_schema(molt_home: Path, tmp_path: Path) -> None:
    out = molt("schema", home=molt_home).stdout
    assert json.loads(out)["version"] == "1.0"
    molt("schema", "-o", str(tmp_path / "s.json"), home=molt_home)
    assert json.loads((tmp_path / "s.json").read_text())["title"].startswith("ATDP")


def test_ls_show_export(molt_home: Path, filled: list[str], tmp_path: Path) -> None:
    lines = molt("trajectories", "ls", "--json", "--tenant", "acme", home=molt_home).stdout.splitlines()
    assert {json.loads(x)["trajectory_id"] for x in lines} == set(filled[:2])
    table = molt("trajectories", "ls", home=molt_home).stdout
    assert all(t in table for t in filled)
    shown = json.loads(molt("trajectories", "show", filled[0], "--json", home=molt_home).stdout)
    assert [e["seq"] for e in shown["events"]] == [0, 1, 2, 3]
    assert "tool_call" in molt("trajectories", "show", filled[0], home=molt_home).stdout
    molt("trajectories", "export", str(tmp_path / "x.parquet"), "--tenant", "globex", home=molt_home)
    assert pq.read_table(tmp_path / "x.parquet").num_rows == 4


def test_reward_then_verify(molt_home: Path, filled: list[str]) -> None:
    molt("reward", filled[0], "--value", "-0.5", "--source", "user_correction", "--reason", "wrong", "--dim",
         "helpfulness=0.1", home=molt_home)
    shown = json.loads(molt("trajectories", "show", filled[0], "--json", home=molt_home).stdout)
    assert shown["rewards"][0]["value"] == -0.5 and shown["rewards"][0]["dimensions"] == {"helpfulness": 0.1}
    out = molt("verify", home=molt_home).stdout
    assert "3 of 3 trajectories verify" in out


def test_verify_fails_on_tampering(molt_home: Path, filled: list[str]) -> None:
    store = Store.open(molt_home / "store", auto_compact=False)
    store.table("events").update(where=f"trajectory_id = '{filled[1]}' AND seq = 2",
                                 values={"payload": b'{"action":{"type":"tool_call","tool_name":"evil"}}'})
    store.close()
    proc = molt("verify", home=molt_home, check=False)
    assert proc.returncode == 1
    assert "FAIL" in proc.stderr and filled[1] in proc.stderr
    assert "2 of 3" in proc.stdout


def test_bad_input_gives_one_clear_line_and_exit_2(molt_home: Path, filled: list[str]) -> None:
    proc = molt("trajectories", "show", "nope", home=molt_home, check=False)
    assert proc.returncode == 2 and "No trajectory nope" in proc.stderr and "Traceback" not in proc.stderr
    proc = molt("reward", filled[0], "--value", "nan", home=molt_home, check=False)
    assert proc.returncode == 2 and "finite" in proc.stderr
    proc = molt("reward", filled[0], "-v", "1", "--source", "vibes", home=molt_home, check=False)
    assert proc.returncode == 2 and "source" in proc.stderr
    proc = molt("trajectories", "ls", "--outcome", "meh", home=molt_home, check=False)
    assert proc.returncode == 2 and "outcome" in proc.stderr
    assert "3 of 3" in molt("verify", home=molt_home).stdout  # nothing was altered


def test_doctor_and_molt_home_isolation(molt_home: Path, filled: list[str], tmp_path: Path) -> None:
    out = molt("doctor", home=molt_home).stdout
    assert "molt-core" in out and "12 rows" in out
    other = tmp_path / "other-home"
    assert "No Molt store at" in molt("doctor", home=other).stdout
    assert molt("trajectories", "ls", "--json", home=other, check=False).stdout == ""
    assert not (other / "store").exists()  # a read never creates a store


def test_smoke_command(molt_home: Path) -> None:
    assert "OK" in molt("smoke", home=molt_home).stdout


def test_reads_are_tenant_scoped_once_keys_exist(molt_home: Path, filled: list[str], tmp_path: Path) -> None:
    (molt_home / "keys.toml").write_text(
        '[[keys]]\nkey = "k-acme"\ntenant = "acme"\nrole = "reader"\n'
        '[[keys]]\nkey = "k-globex"\ntenant = "globex"\nrole = "admin"\n')
    proc = molt("trajectories", "ls", home=molt_home, check=False)
    assert proc.returncode == 2 and "--api-key" in proc.stderr  # no anonymous reads any more
    acme = molt("trajectories", "ls", "--json", "--api-key", "k-acme", home=molt_home).stdout.splitlines()
    assert {json.loads(x)["trajectory_id"] for x in acme} == set(filled[:2])
    proc = molt("trajectories", "show", filled[2], "--api-key", "k-acme", home=molt_home, check=False)
    assert proc.returncode == 2 and "No trajectory" in proc.stderr  # globex's, invisible to acme
    proc = molt("trajectories", "export", str(tmp_path / "a.parquet"), "--api-key", "k-acme", home=molt_home,
                check=False)
    assert proc.returncode == 2 and "may not export" in proc.stderr  # readers cannot export
    molt("trajectories", "export", str(tmp_path / "g.parquet"), "--api-key", "k-globex", home=molt_home)
    assert set(pq.read_table(tmp_path / "g.parquet").column("tenant_id").to_pylist()) == {"globex"}
    proc = molt("reward", filled[0], "-v", "1", "--api-key", "k-globex", home=molt_home, check=False)
    assert proc.returncode == 2 and "No trajectory" in proc.stderr  # cannot reward another tenant's run
    proc = molt("trajectories", "ls", "--api-key", "nope", home=molt_home, check=False)
    assert proc.returncode == 2 and "not known" in proc.stderr
    assert "3 of 3" in molt("verify", "--operator", home=molt_home).stdout


# ------------------------------------------------------------------ messages that name what to do


def test_a_wrong_molt_home_says_so_and_creates_nothing(tmp_path: Path, filled: list[str]) -> None:
    wrong = tmp_path / "typo-home"
    for args in (["trajectories", "ls"], ["verify"], ["trajectories", "show", filled[0]],
                 ["reward", filled[0], "-v", "1"]):
        r = molt(*args, home=wrong, check=False)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        line = r.stderr.strip()
        assert "\n" not in line and "Traceback" not in line
        assert f"No Molt store at {wrong / 'store'}" in line and f"MOLT_HOME={wrong}" in line, line
        assert "Point MOLT_HOME at" in line
    assert not wrong.exists()


def test_a_molt_home_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    afile = tmp_path / "home.txt"
    afile.write_text("not a directory")
    for args in (["trajectories", "ls"], ["doctor"], ["evolve", "run", "--tenant", "default", "--agent", "a"],
                 ["serve", "--port", "1"]):
        r = molt(*args, home=afile, check=False)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert r.stderr.strip() == (f"error: MOLT_HOME={afile} is a file, not a directory: point MOLT_HOME at the "
                                    f"directory Molt records to (default ~/.molt)."), r.stderr


def test_an_unknown_id_names_the_store_it_looked_in(molt_home: Path, filled: list[str]) -> None:
    r = molt("trajectories", "show", "01-not-an-id", home=molt_home, check=False)
    assert r.returncode == 2
    assert f"No trajectory 01-not-an-id in the store {molt_home / 'store'} (MOLT_HOME={molt_home})" in r.stderr
    assert "molt trajectories ls" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = molt("verify", "01-not-an-id", home=molt_home, check=False)
    assert r.returncode == 1 and str(molt_home / "store") in r.stderr
    assert str(molt_home / "store") in molt("verify", home=molt_home).stdout


def test_pending_spool_events_are_counted_with_what_delivers_them(molt_home: Path, event_factory) -> None:  # type: ignore[no-untyped-def]
    Store.open(molt_home / "store", auto_compact=False).close()
    rec = Recorder(None, spool_dir=molt_home / "spool")  # a Recorder without a store: it only spools
    tid = rec.new_trajectory()
    for i in range(3):
        rec.record(event_factory(tid, i))
    assert rec.flush()
    r = molt("trajectories", "ls", home=molt_home)
    assert "3 events wait in the spool" in r.stderr and str(molt_home / "spool") in r.stderr
    assert "Recorder(Store.open())" in r.stderr  # held by a live process without a store: say how to give it one
    assert "3 events wait in the spool" in molt("verify", home=molt_home).stderr
    assert "3 events wait" in molt("doctor", home=molt_home, check=False).stdout.replace("\n", " ")
    r = molt("spool", "deliver", home=molt_home, check=False)
    assert r.returncode == 2 and "held by a running process" in r.stderr
    rec.close()
    r = molt("trajectories", "ls", home=molt_home)
    assert "molt spool deliver" in r.stderr and tid not in r.stdout
    assert "Delivered 3 records" in molt("spool", "deliver", home=molt_home).stdout
    r = molt("trajectories", "ls", home=molt_home)
    assert tid in r.stdout and "spool" not in r.stderr


@pytest.mark.parametrize("width", [60, 80])
def test_ids_are_never_cut_in_a_narrow_terminal(molt_home: Path, filled: list[str], width: int,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from molt import cli

    monkeypatch.setattr(cli.console, "_width", width)
    out = molt("trajectories", "ls", home=molt_home).stdout
    assert all(t in out for t in filled), out
    assert "…" not in out and max(len(line) for line in out.splitlines()) <= max(width, len(filled[0]) + 2)
    shown = molt("trajectories", "show", filled[0], home=molt_home).stdout
    events = json.loads(molt("trajectories", "show", filled[0], "--json", home=molt_home).stdout)["events"]
    assert all(e["event_id"] in shown for e in events), shown  # what `molt reward --event` takes


def test_an_agent_beside_molt_serve_records_through_its_own_spool(molt_home: Path, event_factory) -> None:  # type: ignore[no-untyped-def]
    """`molt serve` holds $MOLT_HOME/spool; an agent started beside it with the quickstart's
    Recorder(Store.open()) records through a spool of its own instead of failing, and leaves none."""
    store = Store.open(molt_home / "store", auto_compact=False)
    serving = Recorder(store, spool_dir=molt_home / "spool")  # what the gateway's capture holds
    agent = Recorder(store)  # the default spool: taken, so spool.<pid>
    try:
        tid = agent.new_trajectory()
        agent.record(event_factory(tid, 0))
        assert agent.flush(deliver=True)
        assert store.trajectory(tid).events
    finally:
        assert agent.close()
        serving.close()
    assert [p.name for p in molt_home.iterdir() if p.name.startswith("spool")] == ["spool"]
    # one that ended before delivering is counted, and delivered by `molt spool deliver`
    stranded = Recorder(None, spool_dir=molt_home / "spool.4242")
    tid = stranded.new_trajectory()
    stranded.record(event_factory(tid, 0))
    assert stranded.flush()
    stranded.close()
    said = molt("trajectories", "ls", home=molt_home).stderr
    assert "1 events wait in the spool" in said and "molt spool deliver" in said
    assert "molt serve" not in said  # `molt serve` delivers only MOLT_HOME/spool, not an agent's spool.<pid>
    assert "Delivered 1 records from" in molt("spool", "deliver", home=molt_home).stdout
    assert tid in molt("trajectories", "ls", home=molt_home).stdout and not (molt_home / "spool.4242").exists()


def test_doctor_says_what_is_good_or_bad_and_warns_of_queued_weight_updates(molt_home: Path, filled: list[str]) -> None:
    """Doctor knows the project's own environments (a package in .venv-crewai is installed there), and a
    weight update queued in the store with no trainer running is a red warning naming what takes it."""
    from molt.control.diagnose import Candidate
    from molt.control.weight_queue import WeightQueue
    from molt.store import Store

    with Store.open(molt_home / "store", auto_compact=False) as store:
        WeightQueue(store)("acme", "support", Candidate(kind="weight_update", cluster="math|answer|sum",
                                                        description="train the weights", cost=50.0,
                                                        payload={"task": "math"}))
    out = molt("doctor", home=molt_home).stdout
    assert "1 queued and no trainer is running to take them" in out and "molt-trainer serve --plane-requests" in out
    for line in out.splitlines():
        if line.strip().startswith("│ crewai") or line.strip().startswith("crewai"):
            assert "not installed" not in line or "nor in .venv-crewai" in line, line
