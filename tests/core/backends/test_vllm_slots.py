"""``molt serve --backend vllm`` sizes the started server's ``--max-loras`` from the tenants it serves
adapters to (the governance policy's tenants that train), and keeps twice that many adapters in vLLM's
CPU-memory LRU; no server is started here, the command line is what is checked."""

from __future__ import annotations

import itertools
from pathlib import Path

import orjson
import pytest

from molt.backends import create_backend
from molt.backends.vllm import VLLMServer, lora_slots
from molt.serve import size_lora_slots


def _args(cmd: list[str]) -> dict[str, str]:
    return {k: v for k, v in itertools.pairwise(cmd) if k in ("--max-loras", "--max-cpu-loras")}


def test_max_loras_follows_the_tenants_that_train(tmp_path: Path) -> None:
    policy = tmp_path / "governance.json"
    tenants = {t: {"training": {"opt_in": True}} for t in ("acme", "globex", "initech")}
    policy.write_text(orjson.dumps({"tenants": {**tenants, "umbrella": {"training": {"opt_in": False}}}}).decode())
    be = create_backend("vllm", server=VLLMServer(Path("/models/m"), python="/venv/bin/python"))
    row = size_lora_slots(be, str(policy))
    assert _args(be.server.command()) == {"--max-loras": "6", "--max-cpu-loras": "12"}, row
    assert row is not None and "acme, globex, initech" in row and "umbrella" not in row
    # the built-in policy opts no tenant in: one slot pair (an operator's shared adapter and its canary)
    be = create_backend("vllm", server=VLLMServer(Path("/models/m"), python="/venv/bin/python"))
    size_lora_slots(be, "default")
    assert _args(be.server.command()) == {"--max-loras": "2", "--max-cpu-loras": "4"}
    # a server this process does not start is not sized
    assert size_lora_slots(create_backend("vllm", base_url="http://127.0.0.1:9/v1"), str(policy)) is None


def test_lora_slots_bounds() -> None:
    assert [lora_slots(n) for n in (0, 1, 4, 100)] == [1, 2, 8, 64]
    assert lora_slots(3, per_tenant=1, most=2) == 2
    with pytest.raises(ValueError):
        lora_slots(-1)
