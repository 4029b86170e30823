"""Package layering: imports point one way, as ../shared/DESIGN.md draws them.

Troubleshooting: if this fails, move the shared code down a layer (into molt.atdp or molt.capture)
instead of importing upwards.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "core" / "src" / "molt"

# subpackage -> molt subpackages it may import (besides errors, registry and itself)
ALLOWED: dict[str, set[str]] = {
    "atdp": set(),
    "store": {"atdp"},
    "capture": {"atdp", "harness"},  # the adapter base applies versions with the gateway's harness code
    "governance": {"atdp", "capture", "store"},
    "harness": {"atdp", "store"},
    "backends": {"atdp", "store", "capture"},
    "gateway": {"atdp", "store", "capture", "governance", "harness", "backends"},
    "replay": {"atdp", "store", "capture", "governance", "harness", "backends"},
    "control": {"atdp", "store", "capture", "governance", "harness", "backends", "replay"},
}
COMMON = {"errors", "registry"}


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def test_core_subpackages_import_downwards_only() -> None:
    bad = []
    for pkg, allowed in ALLOWED.items():
        for f in (CORE / pkg).rglob("*.py"):
            for mod in _imports(f):
                parts = mod.split(".")
                if parts[0] != "molt" or len(parts) < 2:
                    continue
                target = parts[1]
                if target not in allowed | COMMON | {pkg}:
                    bad.append(f"{f.relative_to(ROOT)} imports {mod}")
    assert not bad, "\n".join(bad)


def test_core_never_imports_adapters_or_trainer() -> None:
    bad = [f"{f.relative_to(ROOT)} imports {m}" for f in CORE.rglob("*.py") for m in _imports(f)
           if m.split(".")[0].startswith(("molt_", "langchain", "crewai", "agents", "verl", "vllm"))]
    assert not bad, "\n".join(bad)


def test_adapters_import_only_core_and_their_framework() -> None:
    adapters = {p.name: next(d.name for d in (p / "src").iterdir() if d.is_dir() and not d.name.endswith("-info"))
                for p in (ROOT / "adapters").iterdir() if p.is_dir()}
    bad = []
    for name, _module in adapters.items():
        others = {m for n, m in adapters.items() if n != name} | {"molt_trainer"}
        for f in (ROOT / "adapters" / name / "src").rglob("*.py"):
            for mod in _imports(f):
                if mod.split(".")[0] in others:
                    bad.append(f"{f.relative_to(ROOT)} imports {mod}")
                if mod.startswith(("molt.gateway", "molt.control", "molt.replay", "molt.store")):
                    bad.append(f"{f.relative_to(ROOT)} imports {mod} (adapters use molt.capture/atdp only)")
    assert not bad, "\n".join(bad)


def test_trainer_never_imports_gateway_or_control() -> None:
    bad = [f"{f.relative_to(ROOT)} imports {m}" for f in (ROOT / "trainer" / "src").rglob("*.py")
           for m in _imports(f) if m.startswith(("molt.gateway", "molt.control"))]
    assert not bad, "\n".join(bad)
