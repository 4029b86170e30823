"""The store on object storage, for real: an S3-compatible server (moto) on loopback."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from molt.capture import Recorder
from molt.store import Store


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    pytest.importorskip("moto", reason="moto[server] is part of the dev environment")
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    import boto3

    deadline = time.monotonic() + 30
    while True:
        try:
            boto3.client("s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id="test",
                         aws_secret_access_key="test").create_bucket(Bucket="molt")
            break
        except Exception:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.2)
    yield url
    proc.terminate()
    proc.wait(10)


@pytest.mark.s3
def test_store_on_s3_records_reads_back_and_verifies(s3_endpoint, molt_home, event_factory) -> None:  # type: ignore[no-untyped-def]
    opts = {"aws_endpoint": s3_endpoint, "aws_access_key_id": "test", "aws_secret_access_key": "test",
            "aws_region": "us-east-1", "allow_http": "true"}
    store = Store.open("s3://molt/store", storage_options=opts, auto_compact=False)
    rec = Recorder(store, spool_dir=molt_home / "spool")
    tids = [rec.new_trajectory() for _ in range(5)]
    for i in range(100):
        rec.record(event_factory(tids[i % 5], i // 5))
    assert rec.flush(deliver=True, timeout=60)
    rec.close()
    store.compact()
    # a second process-like handle sees the same data through S3
    again = Store.open("s3://molt/store", storage_options=opts, auto_compact=False)
    assert again.count() == 100
    for tid in tids:
        traj = again.trajectory(tid)
        assert [e.seq for e in traj.events] == list(range(20))
        assert again.verify(tid).ok
    import boto3

    keys = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1", aws_access_key_id="test",
                        aws_secret_access_key="test").list_objects_v2(Bucket="molt", Prefix="store/")
    assert keys["KeyCount"] > 0, "nothing was written to the bucket"
