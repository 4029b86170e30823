#!/usr/bin/env bash
# Set Molt up on a fresh machine and run the main job, in one command:
#
#   bash scripts/setup.sh            # create/update .venv, .venv-crewai, .venv-vllm, then run the demo
#
# Options:
#   --no-vllm   skip the vLLM server environment (.venv-vllm, ~3.5 GB, ~2-3 min on a fresh machine);
#               also MOLT_NO_VLLM=1. Nothing else needs it unless you serve through vLLM.
#   --no-run    only create/update the environments (and Debian's chromium for the console's browser
#               tests, when apt can install it); do not run the main job (scripts/test.sh uses this)
#   --fresh     delete the environments and build them again from nothing
#   -h, --help  show this text
#
# The environments (see scripts/_envs.sh and shared/DESIGN.md, "Dependency environments") come from
# the package registry through venv + pip only. Each is rebuilt only when what shaped it changed
# (requirement files, pyproject.toml files, the helper scripts, the interpreter), so a re-run is fast.
# The main job: `molt demo --quick` once `molt demo` exists; until then `python -m molt.smoke`
# (capture -> store -> read-back through the Recorder, under a temporary MOLT_HOME).
set -euo pipefail

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }

with_vllm=1
run_main=1
fresh=0
if [[ "${MOLT_NO_VLLM:-0}" == 1 ]]; then with_vllm=0; fi
while (($#)); do
  case "$1" in
    --no-vllm) with_vllm=0 ;;
    --no-run) run_main=0 ;;
    --fresh) fresh=1 ;;
    -h | --help)
      usage
      exit 0
      ;;
    *)
      usage >&2
      printf '\nsetup.sh: unknown option %q\n' "$1" >&2
      exit 2
      ;;
  esac
  shift
done

# shellcheck source=scripts/_envs.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/_envs.sh"
MOLT_LOG_TAG=setup
cd -- "$MOLT_ROOT"

t_start="$(_now_ds)"
check_python
say "python: $("$MOLT_PYTHON" -c 'import sys; print(sys.version.split()[0], sys.executable)')"

# The web console's browser tests drive Debian's chromium (Playwright with executable_path; never a
# browser download). Install it once when it is missing and apt can be used (as root, or through
# passwordless sudo); otherwise say how, and those tests skip with that reason. On a fresh machine
# apt-get update + install take a minute or more, mostly downloading: it runs beside the environment
# builds (its lines are printed after theirs).
ensure_chromium() {
  [[ -x /usr/bin/chromium ]] && return 0
  local -a asroot=()
  if [[ "$(id -u)" != 0 ]]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then asroot=(sudo -n); else
      say "chromium missing (console browser tests will skip): run 'apt-get install chromium' as root"
      return 0
    fi
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    say "chromium missing and apt-get is not available: install chromium at /usr/bin/chromium yourself"
    return 0
  fi
  say "installing Debian's chromium for the console browser tests"
  if ! { "${asroot[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
    "${asroot[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; } \
    >/dev/null; then
    say "chromium could not be installed with apt-get (console browser tests will skip)"
  fi
}
chromium_out="$(mktemp "${TMPDIR:-/tmp}/molt-setup-out.XXXXXX")"
ensure_chromium >"$chromium_out" 2>&1 &
chromium_job=$!
# Claude Code and Codex CLI from npm into .cli-agents/ (the gateway's tests drive them as unmodified agents).
cli_agents_out="$(mktemp "${TMPDIR:-/tmp}/molt-setup-out.XXXXXX")"
bash "$MOLT_ROOT/scripts/install_cli_agents.sh" >"$cli_agents_out" 2>&1 &
cli_agents_job=$!

# The environments are independent (each its own venv, lock and log), so they build at the same time:
# on a fresh machine the vLLM one alone takes as long as the other two together, mostly downloading.
# Each one's progress lines are printed when it is done, so that they do not interleave.
env_jobs=() env_outs=()
ensure_env_bg() {
  local out
  out="$(mktemp "${TMPDIR:-/tmp}/molt-setup-out.XXXXXX")"
  (ensure_env "$@") >"$out" 2>&1 &
  env_jobs+=("$!")
  env_outs+=("$out")
}
ensure_env_bg main "$MOLT_VENV" "$(env_manifest main "${MAIN_INPUTS[@]}")" "$fresh" build_main
ensure_env_bg crewai "$MOLT_VENV_CREWAI" "$(env_manifest crewai "${CREWAI_INPUTS[@]}")" "$fresh" build_crewai
if ((with_vllm)); then
  ensure_env_bg vllm "$MOLT_VENV_VLLM" "$(env_manifest vllm "${VLLM_INPUTS[@]}")" "$fresh" build_vllm
fi
env_failed=0
for i in "${!env_jobs[@]}"; do
  wait "${env_jobs[$i]}" || env_failed=1
  cat -- "${env_outs[$i]}"
  rm -f -- "${env_outs[$i]}"
done
((with_vllm)) || say "vllm    skipped (--no-vllm)"
((env_failed == 0)) || die "an environment could not be built (its lines above say which, and where its log is)"
say "environments ready in $(_fmt_ds $(($(_now_ds) - t_start)))"

# The compiled (mypyc) build of the redaction detectors, in core/build/native: ~20 s when a detector
# source changed, nothing otherwise (a stamp of the sources' digests decides). Without it (no C
# compiler) redaction runs the same Python modules, slower; see molt.governance.redaction.native.
native_log="$MOLT_ROOT/core/build/native-build.log"
mkdir -p "$MOLT_ROOT/core/build"
if "$MOLT_VENV/bin/molt" native build --if-stale >"$native_log" 2>&1; then
  say "native  redaction detectors compiled and current (molt native status)"
else
  say "native  build failed, redaction runs its Python modules: $(tail -n 3 "$native_log")"
fi

wait "$chromium_job" || true
cat -- "$chromium_out"
rm -f -- "$chromium_out"
wait "$cli_agents_job" || true
cat -- "$cli_agents_out"
rm -f -- "$cli_agents_out"

# `molt` lives in the environment, not on PATH: say how to reach it (also after the demo below, from its
# exit trap, so it is the last thing printed).
path_hint() {
  say "molt is installed in $MOLT_VENV; to run it as \`molt\`, either"
  say "  source $MOLT_VENV/bin/activate            # this shell only"
  say "  export PATH=\"$MOLT_VENV/bin:\$PATH\"       # add to ~/.bashrc to keep it"
  say "or call it by path: $MOLT_VENV/bin/molt --help"
}
((run_main)) || { path_hint; exit 0; }
trap path_hint EXIT

# The main job. Nothing here may reach a model hub: everything it needs was installed above.
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}" TRANSFORMERS_OFFLINE="${TRANSFORMERS_OFFLINE:-1}"
if "$MOLT_VENV/bin/molt" demo --help >/dev/null 2>&1; then
  # Its report goes under .molt/ (ignored), not into the clone as an untracked folder.
  say "running: molt demo --quick --out .molt/demo"
  "$MOLT_VENV/bin/molt" demo --quick --out "$MOLT_ROOT/.molt/demo"
else
  say "running: python -m molt.smoke ('molt demo' does not exist yet)"
  "$MOLT_VENV/bin/python" -m molt.smoke
fi
