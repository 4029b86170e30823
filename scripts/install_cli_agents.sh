#!/usr/bin/env bash
# Installs the coding-agent CLIs that tests/core/gateway/test_cli_agents.py drives as unmodified agents
# against `molt serve` — Claude Code and Codex CLI, pinned — from the npm registry into .cli-agents/ (an
# ignored folder of this repo; MOLT_CLI_AGENTS overrides it). Called by scripts/setup.sh; safe to rerun
# (a stamp of the pinned versions makes a rerun with nothing changed a no-op). Without npm it says so and
# exits 0: the tests then skip, naming the reason.
set -euo pipefail

ROOT="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)"
DEST="${MOLT_CLI_AGENTS:-$ROOT/.cli-agents}"
PACKAGES=("@anthropic-ai/claude-code@2.1.332" "@openai/codex@0.171.0")

if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  echo "[setup] cli-agents skipped: node/npm not found (the Claude Code and Codex CLI tests skip)"
  exit 0
fi
want="${PACKAGES[*]} node $(node --version)"
if [[ -f "$DEST/.molt-stamp" && "$(cat "$DEST/.molt-stamp")" == "$want" ]]; then
  echo "[setup] cli-agents current in $DEST (${PACKAGES[*]})"
  exit 0
fi
mkdir -p "$DEST"
# No telemetry or update checks from npm itself; the CLIs' own are turned off by the tests' environment.
if npm install --prefix "$DEST" --no-audit --no-fund --no-update-notifier --loglevel=error "${PACKAGES[@]}" \
    >"$DEST/install.log" 2>&1; then
  printf '%s' "$want" >"$DEST/.molt-stamp"
  echo "[setup] cli-agents installed in $DEST (${PACKAGES[*]})"
else
  echo "[setup] cli-agents could not be installed (the CLI tests skip): $(tail -n 3 "$DEST/install.log")"
fi
