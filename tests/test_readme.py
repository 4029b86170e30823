"""Every Python and shell block of every README runs as written — against `molt serve --backend stub` on a
loopback port — and a Python block lands something in the store (so no quickstart rots, and none only
looks like it works).

One gateway serves every block (its port replaces the READMEs' ``127.0.0.1:8000``); each block runs in a
fresh interpreter with ``MOLT_HOME`` set to the gateway's, like a user's second terminal. A block that
needs a framework's own environment runs there (CrewAI: ``$MOLT_CREWAI_PYTHON``, default
``.venv-crewai``). A block that needs a service the test cannot provide is marked in the README with
``<!-- readme-test: skip: <reason> -->`` on the line before it, and its reason is printed here.

Shell blocks (```` ```bash ````) run after every Python block, with bash (``set -euo pipefail``), the
environment's ``molt`` first on ``PATH`` and ``KEY`` set to the console admin key the gateway printed.
A ``molt serve`` line with no options is the test's gateway, already running, so it is not started again;
a block that installs packages, starts other servers or needs other data is marked skip with the reason.
A shell block must exit 0 and print no OpenAI-style error object.

Troubleshooting: an API in the snippet changed (update the README with it), or the block records
nothing (a quickstart that records nothing shows the user nothing either).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted({ROOT / "README.md", ROOT / "core" / "README.md", ROOT / "trainer" / "README.md",
               ROOT / "demo" / "README.md", ROOT / "bench" / "README.md", *ROOT.glob("docs/*.md"),
               *ROOT.glob("adapters/*/README.md"), *ROOT.glob("core/src/molt/*/README.md")})
_BLOCK = re.compile(r"(?:<!--\s*readme-test:\s*(?P<mark>[^>]*?)\s*-->\s*\n)?```python\n(?P<code>.*?)```", re.S)
_SHELL = re.compile(r"(?:<!--\s*readme-test:\s*(?P<mark>[^>]*?)\s*-->\s*\n)?```(?:bash|sh|shell)\n(?P<code>.*?)```",
                    re.S)
_PORT_IN_DOCS = "127.0.0.1:8000"
#: A README line that starts the gateway the test already runs (``molt serve``, nothing but a comment after).
_SERVE_LINE = re.compile(r"^molt serve(?:\s+--backend stub)?\s*(?:#.*)?$")


def _blocks(pattern: re.Pattern[str], kind: str = "") -> list[tuple[str, str, str]]:
    out = []
    for doc in DOCS:
        for i, m in enumerate(pattern.finditer(doc.read_text())):
            out.append((f"{doc.relative_to(ROOT)}#{kind}{i}", m.group("code"), (m.group("mark") or "").strip()))
    return out


BLOCKS = _blocks(_BLOCK)
SHELL_BLOCKS = _blocks(_SHELL, "sh")


def _python_for(code: str) -> str:
    if "crewai" in code:
        return os.environ.get("MOLT_CREWAI_PYTHON") or str(ROOT / ".venv-crewai" / "bin" / "python")
    return sys.executable


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """`molt serve --backend stub` as a user starts it, on a free loopback port and a fresh MOLT_HOME (its
    log, with the console admin key it printed once, is ``serve.log`` there)."""

    from molt.gateway.loopback import free_port, wait_healthy

    home = tmp_path_factory.mktemp("readme-home")
    port = free_port("127.0.0.1")
    env = {**os.environ, "MOLT_HOME": str(home)}
    log = open(home / "serve.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", "molt.cli", "serve", "--backend", "stub", "--port", str(port),
                             "--evolve-every", "0"], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:  # start-up takes minutes on a loaded 2-core machine
        wait_healthy(url, proc, timeout_s=300, detail=lambda: (home / "serve.log").read_text()[-3000:])
    except RuntimeError:
        log.close()
        raise
    try:
        yield f"127.0.0.1:{port}", home
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()


def _landed(home: Path) -> int:
    """Events and rewards in the gateway's store (what `molt trajectories ls` reads)."""
    from molt.store import Store

    with Store.open(home / "store", auto_compact=False) as s:
        return int(s.count("events")) + int(s.count("rewards"))


@pytest.mark.parametrize(("where", "code", "mark"), BLOCKS, ids=[b[0] for b in BLOCKS])
def test_readme_block_runs_and_lands(where: str, code: str, mark: str, gateway: tuple[str, Path],
                                     tmp_path: Path) -> None:
    if mark.startswith("skip:"):
        pytest.skip(f"{where}: {mark.removeprefix('skip:').strip()}")
    hostport, home = gateway
    before = _landed(home)
    script = tmp_path / "block.py"
    script.write_text(code.replace(_PORT_IN_DOCS, hostport))
    proc = subprocess.run([_python_for(code), str(script)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "MOLT_HOME": str(home), "PYTHONUNBUFFERED": "1"})
    assert proc.returncode == 0, f"{where} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    for expected in re.findall(r"#\s*prints:\s*([^(\n]+)", code):  # `print(...)  # prints: 0 True`
        assert expected.strip() in proc.stdout, f"{where} printed {proc.stdout!r}, the README says {expected!r}"
    deadline = time.monotonic() + 30  # the gateway records off the request path: give it a moment
    while _landed(home) <= before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _landed(home) > before, f"{where} ran but recorded nothing in {home / 'store'}:\n{proc.stdout[-2000:]}"


def _console_key(home: Path) -> str:
    """The console admin key `molt serve` printed once on its fresh MOLT_HOME (what the user copies)."""
    found = re.search(r"console admin key \(shown once\): (\S+)", (home / "serve.log").read_text())
    assert found, "molt serve printed no console admin key:\n" + (home / "serve.log").read_text()[-2000:]
    return found.group(1)


@pytest.mark.parametrize(("where", "code", "mark"), SHELL_BLOCKS, ids=[b[0] for b in SHELL_BLOCKS])
def test_readme_shell_block_runs(where: str, code: str, mark: str, gateway: tuple[str, Path], tmp_path: Path) -> None:
    """After the Python blocks (which put traffic of agent ``my-agent`` and others in the gateway's store)."""
    if mark.startswith("skip:"):
        pytest.skip(f"{where}: {mark.removeprefix('skip:').strip()}")
    hostport, home = gateway
    lines = [("# the test's gateway, already running: " + line) if _SERVE_LINE.match(line.strip()) else line
             for line in code.replace(_PORT_IN_DOCS, hostport).splitlines()]
    script = tmp_path / "block.sh"
    script.write_text("set -euo pipefail\n" + "\n".join(lines) + "\n")
    env = {**os.environ, "MOLT_HOME": str(home), "KEY": _console_key(home), "COLUMNS": "200",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    out = f"{where}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, out
    assert '{"error"' not in proc.stdout.replace(" ", ""), out
    for expected in re.findall(r"#\s*prints:\s*([^(\n]+)", code):
        assert expected.strip() in proc.stdout, f"{where} printed {proc.stdout!r}, the README says {expected!r}"
