#!/usr/bin/env bash
# verl on Ray, end to end, on one GPU machine: recorded traffic -> verl parquet rows -> verl.trainer.main_ppo
# (GRPO, LoRA, the molt_replay agent loop) -> the adapter hot-loaded into a running vLLM -> served through a
# Molt gateway. Prints one JSON line per step and a summary (steps, loss, reward, adapter load time, tokens/s).
#
#   scripts/gpu_check.sh [--dry-run] [MODEL_DIR]
#
# MODEL_DIR: an HF causal LM directory (default $MOLT_GPU_MODEL, else the packaged SmolLM2-135M-Instruct,
# converted once). --dry-run stops before the GPU: it records traffic on the CPU, exports the rows, composes
# and validates the main_ppo config (verl's validate_config) and runs the agent loop's output step on the
# rows; CI runs it (tests/trainer/test_gpu_check.py). Work files go to $MOLT_GPU_CHECK_DIR (default: a new
# temporary directory). Budget: 8 minutes on one GPU (main_ppo is given 6).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${MOLT_PYTHON:-$ROOT/.venv/bin/python}"
VLLM_PY="${MOLT_VLLM_PYTHON:-$ROOT/.venv-vllm/bin/python}"
DRY=0
if [[ "${1:-}" == "--dry-run" ]]; then DRY=1; shift; fi
WORK="${MOLT_GPU_CHECK_DIR:-$(mktemp -d -t molt-gpu-check-XXXXXX)}"
mkdir -p "$WORK"
export HF_HUB_OFFLINE=1 MOLT_HOME="$WORK/home" PYTHONWARNINGS="${PYTHONWARNINGS:-ignore}"
T0=$(date +%s)

MODEL="${1:-${MOLT_GPU_MODEL:-}}"
if [[ -z "$MODEL" ]]; then
  MODEL="$("$PY" -c 'from molt.backends.model import ensure_policy_model; print(ensure_policy_model())')"
fi
echo "{\"step\": \"model\", \"path\": \"$MODEL\", \"work\": \"$WORK\", \"dry_run\": $DRY}"

N_CALLS="${MOLT_GPU_CHECK_CALLS:-64}"
[[ $DRY == 1 ]] && N_CALLS="${MOLT_GPU_CHECK_CALLS:-8}"
"$PY" "$ROOT/scripts/gpu_check_steps.py" record --model "$MODEL" --store "$WORK/store" --n "$N_CALLS"
"$PY" -m molt_trainer.ray.export --store "$WORK/store" --out "$WORK/data.parquet" --train-on-ungoverned-data
BATCH=$(( (N_CALLS < 16 ? N_CALLS : 16) / 4 * 4 ))   # main_ppo's micro-batch is 4 per GPU
(( BATCH >= 4 )) || { echo "gpu_check: at least 4 calls are needed (MOLT_GPU_CHECK_CALLS)" >&2; exit 2; }
"$PY" "$ROOT/scripts/gpu_check_steps.py" config --model "$MODEL" --data "$WORK/data.parquet" --out "$WORK" --batch "$BATCH"
"$PY" "$ROOT/scripts/gpu_check_steps.py" replay --data "$WORK/data.parquet"

if [[ $DRY == 1 ]]; then
  echo "{\"step\": \"done\", \"dry_run\": 1, \"seconds\": $(( $(date +%s) - T0 ))}"
  exit 0
fi

# ---- GPU: train with verl, serve with vLLM ------------------------------------------------------------
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
mapfile -t OVERRIDES < "$WORK/overrides.txt"
set +e
timeout 360 "$PY" -m verl.trainer.main_ppo "${OVERRIDES[@]}" "trainer.save_freq=1" 2>&1 | tee "$WORK/main_ppo.log"
RC=${PIPESTATUS[0]}
set -e
echo "{\"step\": \"main_ppo\", \"rc\": $RC}"
[[ $RC == 0 ]] || { tail -50 "$WORK/main_ppo.log"; exit "$RC"; }
ADAPTER="$(find "$WORK/checkpoints" -name adapter_config.json -printf '%h\n' | sort | tail -1)"
[[ -n "$ADAPTER" ]] || { echo "main_ppo wrote no LoRA adapter under $WORK/checkpoints" >&2; exit 1; }
# verl's console logger prints "step:N - key:value - ..." per step: the last step's figures
"$PY" - "$WORK/main_ppo.log" <<'EOF'
import json, re, sys
steps = [l for l in open(sys.argv[1], errors="replace") if re.search(r"\bstep:\d+ ", l)]
if steps:
    kv = dict(re.findall(r"([\w/@.-]+):(-?[\d.e+-]+)", steps[-1]))
    pick = {k: kv[k] for k in kv if k in ("step", "actor/pg_loss", "critic/score/mean", "perf/throughput",
                                          "timing_s/step", "actor/grad_norm")}
    print(json.dumps({"step": "main_ppo_metrics", "steps": len(steps), **pick}))
EOF

export VLLM_ALLOW_RUNTIME_LORA_UPDATING=True   # /v1/load_lora_adapter
PORT=$("$PY" -c 'from molt.gateway.loopback import free_port; print(free_port())')
"$VLLM_PY" -m vllm.entrypoints.openai.api_server --model "$MODEL" --served-model-name policy --port "$PORT" \
  --enable-lora --max-lora-rank 8 --max-model-len 1024 --gpu-memory-utilization 0.5 > "$WORK/vllm.log" 2>&1 &
VLLM_PID=$!
trap 'kill $VLLM_PID 2>/dev/null || true' EXIT
for _ in $(seq 1 180); do
  curl -sf "http://127.0.0.1:$PORT/v1/models" >/dev/null && break
  kill -0 $VLLM_PID 2>/dev/null || { tail -40 "$WORK/vllm.log"; exit 1; }
  sleep 1
done
"$PY" "$ROOT/scripts/gpu_check_steps.py" publish --model "$MODEL" --adapter "$ADAPTER" --vllm-url "http://127.0.0.1:$PORT/v1"
echo "{\"step\": \"done\", \"dry_run\": 0, \"seconds\": $(( $(date +%s) - T0 ))}"
