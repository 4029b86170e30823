"""Package layering: imports point one way, as docs/architecture.md draws them, and no module reaches
into another module's private names.

Troubleshooting: if an import test fails, move the shared code down a layer (into molt.atdp or
molt.capture) instead of importing upwards. If the private-access test fails, give the module that owns
the name a documented public seam (a method or property) and use that.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "core" / "src" / "molt"

# subpackage (or one-module layer, molt/<name>.py) -> molt subpackages it may import (besides errors,
# registry and itself)
ALLOWED: dict[str, set[str]] = {
    "atdp": set(),
    "store": {"atdp"},
    "capture": {"atdp", "harness"},  # the adapter base applies versions with the gateway's harness code
    "governance": {"atdp", "capture", "store"},
    "harness": {"atdp", "store"},
    "backends": {"atdp", "store", "capture"},
    # molt.lineage (one module): what a learned artifact was made from, and the adapter manifest
    "lineage": {"atdp", "store", "capture", "governance"},
    "gateway": {"atdp", "store", "capture", "governance", "harness", "backends", "lineage"},
    "replay": {"atdp", "store", "capture", "governance", "harness", "backends", "lineage"},
    "control": {"atdp", "store", "capture", "governance", "harness", "backends", "replay", "lineage"},
    "interop": {"atdp", "store", "capture"},  # imports and exports: the capture path's decoders and sinks
    "testing": {"atdp", "capture", "harness"},  # the adapter conformance suite: on top (no subpackage lists it)
}
# molt.status: the status files every Molt process writes and `molt doctor` / `molt evolve run` read (a leaf:
# stdlib and orjson only).
COMMON = {"errors", "registry", "renamed", "status"}


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
        files = list((CORE / pkg).rglob("*.py")) or [CORE / f"{pkg}.py"]
        assert files[0].exists(), f"{pkg} is neither a subpackage nor a module of molt"
        for f in files:
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


# ------------------------------------------------------------------ private names stay in their module

#: Every package whose modules are checked for reach-ins.
SOURCES = [CORE, *sorted(p / "src" for p in (ROOT / "adapters").iterdir() if (p / "src").is_dir()),
           ROOT / "trainer" / "src", ROOT / "demo" / "src"]

#: Underscored names that are public API where they come from: namedtuple's methods (the underscore
#: only keeps them apart from field names).
PUBLIC_UNDERSCORED = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults"})

#: Known reach-ins into third-party internals, each with the reason it stays (a new one fails the test).
KNOWN: dict[tuple[str, str], str] = {
    ("adapters/mcp/src/molt_mcp/middleware.py", "_connection"):
        "the MCP SDK exposes no session id on a request context; the middleware reads it where the SDK "
        "keeps it and falls back to no session when that changes",
}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_reach_ins(files: Iterable[Path], root: Path) -> list[str]:
    """Each place where a module touches a private name it does not define: ``obj._x`` (read or
    assigned) on anything but ``self`` / ``cls``, ``getattr(obj, "_x")`` and its siblings, and
    ``from module import _x``. A module defines a name by a function, a class, an assignment
    (``self.x`` / ``cls.x`` included) or a ``__slots__`` entry."""
    bad = []
    for f in files:
        rel = f.relative_to(root).as_posix()
        own: set[str] = set()
        touched: list[tuple[ast.AST, str, bool]] = []  # (node, name, whether defining it here is enough)
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                own.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                own.add(node.id)
            elif isinstance(node, ast.Attribute) and _private(node.attr):
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    if isinstance(node.ctx, ast.Store):
                        own.add(node.attr)
                else:
                    touched.append((node, node.attr, True))
            elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__"
                                                      for t in node.targets):
                own.update(c.value for c in ast.walk(node.value)
                           if isinstance(c, ast.Constant) and isinstance(c.value, str))
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                  and node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) >= 2
                  and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
                  and _private(node.args[1].value)
                  and not (isinstance(node.args[0], ast.Name) and node.args[0].id in ("self", "cls"))):
                touched.append((node, node.args[1].value, True))
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                touched += [(node, a.name, False) for a in node.names if _private(a.name)]
        for node, name, own_ok in touched:
            if (own_ok and name in own) or name in PUBLIC_UNDERSCORED or (rel, name) in KNOWN:
                continue
            bad.append(f"{rel}:{getattr(node, 'lineno', 0)} touches {name} ({ast.unparse(node)[:80]})")
    return bad


def _sources() -> list[Path]:
    return [f for base in SOURCES for f in sorted(base.rglob("*.py"))]


def test_no_module_touches_another_modules_private_names() -> None:
    bad = private_reach_ins(_sources(), ROOT)
    assert not bad, "\n".join(bad)


def test_the_private_access_check_fails_on_a_planted_reach_in(tmp_path: Path) -> None:
    """A copy of a real module with one reach-in planted (the store's registry, read from outside
    the store) is caught; the unmodified copy is not."""
    original = (CORE / "store" / "tables.py").read_text()
    clean = tmp_path / "tables.py"
    clean.write_text(original)
    assert private_reach_ins([clean], tmp_path) == []
    planted = tmp_path / "planted.py"
    planted.write_text(original + "\n\ndef peek(store):\n    return store._tables\n\n\n"
                       "def lock(rec):\n    return getattr(rec, '_fresh')\n\n\n"
                       "from molt.store.lance import _where  # noqa\n")
    found = private_reach_ins([planted], tmp_path)
    assert sorted(line.split(" touches ")[1].split()[0] for line in found) == ["_fresh", "_tables", "_where"], found


#: A module longer than this holds one idea only if its docstring says why (issue 24's rule).
MAX_LINES = 650


def test_long_modules_say_why_they_are_one_idea() -> None:
    """Every module of core, the adapters, the trainer, the demo and the examples is at most ~600 lines, or
    opens with a docstring that says "One module at ~N lines because it is one idea: …"."""
    long = []
    for src in [*SOURCES, *sorted((ROOT / "examples").glob("*/src"))]:
        for f in src.rglob("*.py"):
            n = len(f.read_text().splitlines())
            doc = ast.get_docstring(ast.parse(f.read_text())) or ""
            if n > MAX_LINES and "because it is one idea" not in doc:
                long.append(f"{f.relative_to(ROOT)}: {n} lines, no reason in its docstring")
    assert not long, "\n".join(long)
