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
# molt.stats: the exact tests and intervals the plane and the replay decide with (a leaf: stdlib only).
COMMON = {"errors", "registry", "stats", "status"}


#: Functions that load a module named by a string: a literal name passed to one counts as an import.
LOADERS = frozenset({"import_module", "find_spec"})


def _loaded_by_name(node: ast.AST) -> str | None:
    """The module ``importlib.import_module("x")`` (or ``importlib.util.find_spec("x")``) loads, when its
    name is a literal."""
    if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)):
        return None
    f = node.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
    return node.args[0].value if name in LOADERS else None


def _imports(path: Path) -> set[str]:
    """Every module ``path`` names in an import (module level, in a function or under TYPE_CHECKING) or
    loads by a literal name."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
        elif (by_name := _loaded_by_name(node)) is not None:
            out.add(by_name)
    return out


#: Modules loaded by name across a layer, each with the reason it stays (a new one fails the tests).
LOADED_BY_NAME: dict[tuple[str, str], str] = {
    ("core/src/molt/capture/recorder.py", "molt.governance.pipeline"):
        "a Recorder's default hook is the governance pipeline; capture, below governance, knows only the "
        "hook protocol, and adapters (which import capture only) get governance by default",
    ("core/src/molt/serve.py", "molt_trainer.requests"):
        "the trainer is an optional distribution; `molt serve --train` loads it when it is installed",
    ("trainer/src/molt_trainer/cli.py", "molt.control.weights"):
        "`molt-trainer serve --agent / --plane-requests` composes the trainer with the control plane's weight "
        "loop, an optional part of an installation; the trainer's library modules never import it",
    ("trainer/src/molt_trainer/cli.py", "molt.control.weight_queue"):
        "`molt-trainer serve --plane-requests` reads the plane's queued weight requests (as above)",
}


def _declared(f: Path, module: str) -> bool:
    return (f.relative_to(ROOT).as_posix(), module) in LOADED_BY_NAME


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
                if target not in allowed | COMMON | {pkg} and not _declared(f, mod):
                    bad.append(f"{f.relative_to(ROOT)} imports {mod}")
    assert not bad, "\n".join(bad)


def test_core_never_imports_adapters_or_trainer() -> None:
    bad = [f"{f.relative_to(ROOT)} imports {m}" for f in CORE.rglob("*.py") for m in _imports(f)
           if m.split(".")[0].startswith(("molt_", "langchain", "crewai", "agents", "verl", "vllm"))
           and not _declared(f, m)]
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
           for m in _imports(f) if m.startswith(("molt.gateway", "molt.control")) and not _declared(f, m)]
    assert not bad, "\n".join(bad)


def test_adapters_take_the_base_options_through_the_base() -> None:
    """An adapter's constructor names only its own parameters and passes ``**options`` to
    :class:`molt.capture.instrumentor.Instrumentor`: the base's keywords are typed and documented once."""
    base = next(n for n in ast.walk(ast.parse((CORE / "capture" / "instrumentor.py").read_text()))
                if isinstance(n, ast.ClassDef) and n.name == "Instrumentor")
    init = next(n for n in base.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    shared = {a.arg for a in init.args.kwonlyargs}
    assert {"tenant_id", "agent_id", "versions", "capture"} <= shared
    bad, seen = [], 0
    for f in sorted((ROOT / "adapters").glob("*/src/**/*.py")):
        for cls in (n for n in ast.walk(ast.parse(f.read_text())) if isinstance(n, ast.ClassDef)):
            if not any("Instrumentor" in ast.unparse(b) for b in cls.bases):
                continue
            for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"):
                seen += 1
                named = {a.arg for a in [*fn.args.args, *fn.args.kwonlyargs]} & shared
                if named or fn.args.kwarg is None:
                    bad.append(f"{f.relative_to(ROOT)}: {cls.name}.__init__ restates {sorted(named)}"
                               if named else f"{f.relative_to(ROOT)}: {cls.name}.__init__ takes no **options")
    assert seen >= 5 and not bad, "\n".join(bad)


# ------------------------------------------------------------------ no import cycles


def _type_checking_only(tree: ast.Module) -> set[int]:
    """The ids of the nodes under ``if TYPE_CHECKING:``: imports for annotations, never run."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return out


def module_graph(roots: Iterable[Path]) -> dict[str, set[str]]:
    """Module → the modules of ``roots`` it imports when it runs: at module level, inside functions, and
    by a literal name (``importlib.import_module("…")``); not those under ``if TYPE_CHECKING:``.
    ``from package import name`` imports the submodule ``package.name`` when there is one, else the
    package. Importing ``a.b`` also runs ``a/__init__``, but that is not an edge here: a package that
    re-exports its submodules would otherwise close a loop with each of them."""
    files: dict[str, Path] = {}
    for root in roots:
        for f in root.rglob("*.py"):
            parts = list(f.relative_to(root).with_suffix("").parts)
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f

    def known(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, f in files.items():
        package = mod if f.name == "__init__.py" else mod.rpartition(".")[0]
        tree = ast.parse(f.read_text())
        skip = _type_checking_only(tree)
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*up, base] if base else up)
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            elif (by_name := _loaded_by_name(node)) is not None:
                names = [by_name]
            graph[mod].update(t for t in map(known, names) if t is not None and t != mod)
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, edges = work[-1]
            w = next(edges, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def _cycle_path(graph: dict[str, set[str]], component: list[str]) -> str:
    """One loop through ``component``, for the failure message: ``a → b → a``."""
    inside = set(component)
    path = [component[0]]
    while True:
        nxt = min(graph[path[-1]] & inside)
        if nxt in path:
            return " → ".join([*path[path.index(nxt):], nxt])
        path.append(nxt)


def test_no_import_cycles() -> None:
    """Troubleshooting: two modules that need each other share an idea; move what both use into a module
    below them both (as molt.stats holds the tests that clusters, evidence and the replay decide with)
    instead of importing inside a function."""
    graph = module_graph([CORE.parent, *SOURCES[1:], *sorted((ROOT / "examples").glob("*/src"))])
    assert {"molt.control.plane", "molt_trainer.cli"} <= set(graph)
    assert "molt.stats" in graph["molt.control.significance"]
    cycles = import_cycles(graph)
    assert not cycles, "\n".join(_cycle_path(graph, c) for c in cycles)


def test_the_cycle_check_sees_function_level_and_by_name_imports(tmp_path: Path) -> None:
    """A loop closed by an import inside a function, or by ``importlib.import_module`` of a literal name,
    is found; one closed only under TYPE_CHECKING (annotations, never run) is not."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import B\n")
    (pkg / "b.py").write_text("B = 1\n\ndef late():\n    from pkg import a\n    return a\n")
    (pkg / "c.py").write_text("import importlib\n\ndef late():\n    return importlib.import_module('pkg.d')\n")
    (pkg / "d.py").write_text("from . import c\n")
    (pkg / "e.py").write_text("from typing import TYPE_CHECKING\nfrom pkg import f\n"
                              "if TYPE_CHECKING:\n    from pkg.g import G\n")
    (pkg / "f.py").write_text("")
    (pkg / "g.py").write_text("from pkg.e import f\nG = f\n")
    graph = module_graph([tmp_path])
    assert sorted(import_cycles(graph)) == [["pkg.a", "pkg.b"], ["pkg.c", "pkg.d"]]
    assert _cycle_path(graph, ["pkg.a", "pkg.b"]) == "pkg.a → pkg.b → pkg.a"


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


#: No module of core is longer than this, whatever its docstring says (issue 48): past it a module holds
#: more than one idea a newcomer can name, and one of them moves out.
HARD_MAX_LINES = 800


def test_no_core_module_is_over_the_hard_limit() -> None:
    """Troubleshooting: move a coherent idea out of the module named (as control/plane.py's canary looks,
    gates and selection rules, or the Recorder's delivery thread, each went to a module of its own)."""
    over = [f"{f.relative_to(ROOT)}: {n} lines" for f in sorted((ROOT / "core" / "src").rglob("*.py"))
            if (n := len(f.read_text().splitlines())) > HARD_MAX_LINES]
    assert not over, "\n".join(over)
