#!/usr/bin/env bash
# Run Molt's whole test suite, in one command (this is what .ci/run calls):
#
#   bash scripts/test.sh             # everything
#   bash scripts/test.sh -k hash -x  # extra arguments go to the main pytest run
#
# 1. scripts/setup.sh --no-run creates or updates the environments (seconds when nothing changed), so a
#    fresh clone works.
# 2. The main suite (tests/ without tests/adapters/crewai) runs in .venv.
# 3. tests/adapters/crewai runs in .venv-crewai, where crewai lives, if it holds any test files.
# Exits non-zero if any run fails. pytest's "no tests collected" (exit 5) is a failure for the main
# suite, and a noted skip for the crewai directory. Tests find the other environments' interpreters in
# MOLT_CREWAI_PYTHON and MOLT_VLLM_PYTHON. MOLT_NO_VLLM=1 skips building the vLLM environment.
set -euo pipefail

# shellcheck source=scripts/_envs.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/_envs.sh"
cd -- "$MOLT_ROOT"

bash "$MOLT_ROOT/scripts/setup.sh" --no-run
MOLT_LOG_TAG="test"

# Tests run offline: no model hub, no telemetry; everything they need was installed by setup.sh.
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}" TRANSFORMERS_OFFLINE="${TRANSFORMERS_OFFLINE:-1}"
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 CREWAI_DISABLE_TELEMETRY=true
export MOLT_CREWAI_PYTHON="$MOLT_VENV_CREWAI/bin/python"
export MOLT_VLLM_PYTHON="$MOLT_VENV_VLLM/bin/python"

reports="$(mktemp -d "${TMPDIR:-/tmp}/molt-test.XXXXXX")"
trap 'rm -rf -- "$reports"' EXIT

# counts JUNIT_XML: "passed failed skipped" from a pytest junit report (errors count as failed).
counts() {
  "$MOLT_PYTHON" - "$1" <<'EOF'
import sys
import xml.etree.ElementTree as ET

try:
    root = ET.parse(sys.argv[1]).getroot()
except (OSError, ET.ParseError):
    print("0 0 0")
    raise SystemExit
suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
total = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
failed = total["failures"] + total["errors"]
print(total["tests"] - failed - total["skipped"], failed, total["skipped"])
EOF
}

passed=0 failed=0 skipped=0 status=0
notes=()
add_counts() {
  local p f s
  read -r p f s < <(counts "$1") || true
  passed=$((passed + ${p:-0})) failed=$((failed + ${f:-0})) skipped=$((skipped + ${s:-0}))
}

# --- main suite, in .venv -------------------------------------------------------------------------
say "main suite: $MOLT_VENV/bin/python -m pytest --ignore=tests/adapters/crewai $*"
rc=0
# --durations prints the slowest tests, so the CI log shows where the suite's time goes.
"$MOLT_VENV/bin/python" -m pytest --ignore=tests/adapters/crewai --durations=30 \
  --junitxml="$reports/main.xml" "$@" || rc=$?
add_counts "$reports/main.xml"
case "$rc" in
  0) notes+=("main suite passed") ;;
  5)
    notes+=("main suite FAILED: pytest collected no tests (exit 5)")
    status=1
    ;;
  *)
    notes+=("main suite FAILED (pytest exit $rc)")
    status=1
    ;;
esac

# --- crewai adapter tests, in .venv-crewai ---------------------------------------------------------
crewai_dir=tests/adapters/crewai
if [[ -d "$crewai_dir" ]] &&
  [[ -n "$(find "$crewai_dir" -type f \( -name 'test_*.py' -o -name '*_test.py' \) -print -quit)" ]]; then
  say "crewai suite: $MOLT_VENV_CREWAI/bin/python -m pytest $crewai_dir"
  rc=0
  "$MOLT_VENV_CREWAI/bin/python" -m pytest "$crewai_dir" --junitxml="$reports/crewai.xml" || rc=$?
  add_counts "$reports/crewai.xml"
  case "$rc" in
    0) notes+=("crewai suite passed") ;;
    5) notes+=("crewai suite skipped: pytest collected no tests in $crewai_dir") ;;
    *)
      notes+=("crewai suite FAILED (pytest exit $rc)")
      status=1
      ;;
  esac
else
  notes+=("crewai suite skipped: no test files in $crewai_dir yet")
fi

for note in "${notes[@]}"; do say "$note"; done
printf 'summary: %d passed, %d failed, %d skipped\n' "$passed" "$failed" "$skipped"
exit "$status"
