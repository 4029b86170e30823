"""The compiled build of the redaction hot path (mypyc), and the check that decides whether it is used.

Detection is the hot path of governance: every string of every captured event goes through the
detectors, the :class:`~molt.governance.redaction.redactor.Redactor` and the event walker. Their
modules (:data:`MODULES`) are ordinary, fully typed Python; :func:`build` compiles them with
`mypyc <https://mypyc.readthedocs.io>`_ (it ships with mypy, the project's type checker) into C
extensions: redaction + eligibility of typical agent events runs about 1.3× (field memo on) to 1.6×
(memo off) faster, with the same behaviour — the test suite runs against whichever build is in use,
and ``tests/core/governance/test_redaction_native.py`` checks that both give the same spans and the
same redacted events.

What compiling asks of these modules: their annotations are enforced at run time (a ``list[Span]``
that is handed a ``None`` raises), their classes cannot be monkeypatched, and a class meant to be
subclassed in Python says so (``@mypyc_attr(allow_interpreted_subclasses=True)`` on ``Redactor``).
Pydantic models cannot be compiled; they live in modules outside the list (``report``, ``policy``).

The build lives outside the source tree (``core/build/native`` next to ``core/src``, or
``MOLT_NATIVE_DIR``), with a stamp of the SHA-256 of every source it was made from. On import,
:mod:`molt.governance.redaction` calls :func:`activate`, which puts the compiled modules in front of
the sources only when every stamped digest matches the source file as it is now and the interpreter
is the one it was built for. An edited source therefore never runs stale compiled code: the Python
module is used until the build is made again (``scripts/setup.sh`` does it; by hand::

    molt native build      # ~20 s with a C compiler
    molt native status     # in use? if not, why

``MOLT_NATIVE=0`` turns the compiled build off. No build, a stale one, or one that fails to load
all fall back to the Python modules (with a warning for the last), so redaction never depends on it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

__all__ = ["MODULES", "NativeBuildError", "activate", "build", "native_dir", "probe", "status"]

#: The modules compiled, in this package, in import order. What they import from outside the list
#: (pydantic models, the registry) is typed ``Any`` in the build and stays an ordinary Python call.
MODULES = (
    "checksums", "lexicon", "patterns", "internet", "credentials", "national_ids", "addresses", "entity_words",
    "positions", "entity_facts", "entity_lowercase", "entity_context", "entities", "mentions", "redactor", "fields",
    "walk",
)  # fmt: skip
PACKAGE = "molt.governance.redaction"
_HERE = Path(__file__).resolve().parent
_STAMP = "stamp.json"
# mypy settings for the build: only the compiled modules are analysed (everything they import from
# elsewhere is typed Any, so it stays an ordinary Python call), which keeps the build to seconds.
_MYPY_INI = """[mypy]
python_version = {major}.{minor}
follow_imports = skip
ignore_missing_imports = True
warn_unused_ignores = False
"""

#: What :func:`activate` decided in this process: ``(in use, reason)``.
_decision: tuple[bool, str] = (False, "not checked yet")


class NativeBuildError(RuntimeError):
    """The compiled build could not be made (no compiler, no mypyc, a compile error)."""


def native_dir() -> Path | None:
    """Where the build lives: ``MOLT_NATIVE_DIR``, else ``core/build/native`` for a source checkout
    (``core/src/molt/...``); ``None`` for an installed wheel without the variable."""
    env = os.environ.get("MOLT_NATIVE_DIR")
    if env:
        return Path(env)
    src = _HERE.parents[2]  # .../src (redaction -> governance -> molt -> src)
    if src.name != "src":
        return None
    return src.parent / "build" / "native"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _abi() -> str:
    return importlib.machinery.EXTENSION_SUFFIXES[0]


def probe(root: Path | None) -> str | None:
    """Why the build under ``root`` cannot be used, or ``None`` when it can."""
    if root is None:
        return "no build directory (not a source checkout; set MOLT_NATIVE_DIR)"
    try:
        stamp = json.loads((root / _STAMP).read_bytes())
    except FileNotFoundError:
        return f"not built ({root})"
    except (OSError, ValueError) as exc:
        return f"unreadable stamp {root / _STAMP}: {exc}"
    if not isinstance(stamp, dict) or not isinstance(stamp.get("sources"), dict):
        return f"malformed stamp {root / _STAMP}"
    if stamp.get("abi") != _abi():
        return f"built for {stamp.get('abi')!r}, this interpreter needs {_abi()!r}"
    sources: dict[str, Any] = stamp["sources"]
    if set(sources) != set(MODULES):
        return f"built from {sorted(sources)}, expected {sorted(MODULES)}"
    for name in MODULES:
        if sources[name] != _digest(_HERE / f"{name}.py"):
            return f"stale: {name}.py changed since the build"
        if not (root / "pkg" / f"{name}{_abi()}").is_file():
            return f"missing {name}{_abi()} in {root / 'pkg'}"
    return None


def activate(package_path: list[str]) -> bool:
    """Put the compiled modules in front of the sources on ``package_path`` (the package's
    ``__path__``) when the build is current; import them to be sure they load. ``True`` if in use."""
    global _decision
    if os.environ.get("MOLT_NATIVE", "1").strip().lower() in ("0", "false", "no", "off"):
        _decision = (False, "off (MOLT_NATIVE=0)")
        return False
    root = native_dir()
    why = probe(root)
    if why is not None:
        _decision = (False, why)
        return False
    assert root is not None
    # base is not compiled and outlives a failed attempt: the detectors registry the modules fill
    from molt.governance.redaction.base import detectors

    registered = {name: detectors.get(name) for name in detectors.names()}
    pkg, lib = str(root / "pkg"), str(root / "lib")
    package_path.insert(0, pkg)
    added_lib = lib not in sys.path
    if added_lib:
        sys.path.append(lib)  # mypyc's shared runtime of the group: a uniquely named top-level module
    try:
        for name in MODULES:
            mod = importlib.import_module(f"{PACKAGE}.{name}")
            if not str(getattr(mod, "__file__", "")).endswith(_abi()):
                raise ImportError(f"{mod.__name__} was already imported from {mod.__file__}")
    except Exception as exc:  # a build that does not load: back to the sources, say so
        package_path.remove(pkg)
        if added_lib:
            sys.path.remove(lib)
        package = sys.modules.get(PACKAGE)
        for name in MODULES:
            sys.modules.pop(f"{PACKAGE}.{name}", None)
            if package is not None and name in vars(package):
                delattr(package, name)  # else `from package import name` would hand the compiled one back
        # what compiled modules registered before one failed goes too, so the sources can register
        # (the other registries live in compiled modules themselves, and go with them)
        for name in detectors.names():
            if registered.get(name) is not detectors.get(name):
                detectors.unregister(name)
        _decision = (False, f"failed to load ({type(exc).__name__}: {exc})")
        warnings.warn(f"Molt's compiled redaction detectors are not used: {_decision[1]}", RuntimeWarning, stacklevel=2)
        return False
    _decision = (True, f"compiled ({root})")
    return True


def status() -> dict[str, Any]:
    """Whether this process uses the compiled detectors, and why (not)."""
    root = native_dir()
    return {
        "in_use": _decision[0],
        "reason": _decision[1],
        "dir": str(root) if root else None,
        "build": probe(root) or "current",
        "modules": {name: str(getattr(sys.modules.get(f"{PACKAGE}.{name}"), "__file__", None)) for name in MODULES},
    }


def build(root: Path | None = None, *, opt_level: str = "3", if_stale: bool = False) -> Path:
    """Compile :data:`MODULES` with mypyc into ``root`` (default :func:`native_dir`) and stamp it.

    The sources are copied to a scratch tree and compiled there; the result replaces ``root`` only
    once complete, so a failed build leaves the previous one (or none) in place. ``if_stale`` skips
    the work when the build is already current. Raises :class:`NativeBuildError`.
    """
    root = root or native_dir()
    if root is None:
        raise NativeBuildError("no build directory: not a source checkout; set MOLT_NATIVE_DIR")
    if if_stale and probe(root) is None:
        return root
    try:
        import mypyc  # noqa: F401
    except ImportError as exc:
        raise NativeBuildError("mypyc is not installed (it comes with mypy: pip install 'mypy>=1.13')") from exc
    if shutil.which(os.environ.get("CC", "cc")) is None and shutil.which("gcc") is None:
        raise NativeBuildError("no C compiler (cc or gcc) on PATH")
    root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="molt-native-", dir=root.parent) as scratch_dir:
        scratch = Path(scratch_dir)
        tree = scratch / "src" / Path(*PACKAGE.split("."))
        tree.mkdir(parents=True)
        for pkg in (tree.parents[1], tree.parent, tree):  # molt/, molt/governance/, .../redaction/
            (pkg / "__init__.py").write_text("")
        sources = {}
        for name in MODULES:
            data = (_HERE / f"{name}.py").read_bytes()
            (tree / f"{name}.py").write_bytes(data)
            sources[name] = hashlib.sha256(data).hexdigest()
        ini = scratch / "mypy.ini"
        ini.write_text(_MYPY_INI.format(major=sys.version_info[0], minor=sys.version_info[1]))
        rel = [str(Path(*PACKAGE.split("."), f"{name}.py")) for name in MODULES]
        cmd = [sys.executable, "-m", "mypyc", "--config-file", str(ini), *rel]
        env = {**os.environ, "MYPYC_OPT_LEVEL": opt_level}
        done = subprocess.run(cmd, cwd=scratch / "src", env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = (done.stdout + done.stderr).strip().splitlines()[-15:]
            raise NativeBuildError("mypyc failed:\n" + "\n".join(tail))
        out = scratch / "out"
        (out / "pkg").mkdir(parents=True)
        (out / "lib").mkdir()
        for name in MODULES:
            so = tree / f"{name}{_abi()}"
            if not so.is_file():
                raise NativeBuildError(f"mypyc made no {so.name}")
            shutil.move(str(so), out / "pkg" / so.name)
        for shared in (scratch / "src").glob(f"*__mypyc{_abi()}"):
            shutil.move(str(shared), out / "lib" / shared.name)
        stamp = {"abi": _abi(), "python": sys.version.split()[0], "sources": sources, "opt_level": opt_level}
        (out / _STAMP).write_text(json.dumps(stamp, indent=2) + "\n")
        old = scratch / "old"
        if root.exists():
            root.rename(old)
        out.rename(root)
    return root
