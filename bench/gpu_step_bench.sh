#!/usr/bin/env bash
# Model-step benchmark on one GPU: Tessera against PyTorch on the same job, in
# one device call. Tessera trains JOB_FILE through the product path (CLI ->
# coordinator -> tessera-worker --device=cuda:0, FP8 as the job says); then
# bench/torch_baseline.py runs the same model, batch and optimizer in
# PyTorch, eager and torch.compile, reading them from the same job file (the
# CLI's `submit --dry-run --json`). Step ms, tokens/s and peak GPU memory of
# each go to OUT_DIR/step.jsonl as JSON lines and to OUT_DIR/table.md as a
# Markdown table, which is printed last. Tessera's memory is the peak of
# nvidia-smi's memory.used while its worker runs, less the value before.
#
# Run on the GPU host from the repository root, with an unpacked
# deploy/bundle.sh bundle:
#   bench/gpu_step_bench.sh BUNDLE_DIR JOB_FILE OUT_DIR
# Environment (defaults): TORCH_MODES (eager,compile; "none" runs Tessera only), TORCH_WARMUP (5),
# TORCH_STEPS (20), TESSERA_SKIP (5 warm-up steps left out of Tessera's
# median), TESSERA_TIMEOUT_S (300), TORCH_TIMEOUT_S (400), TESSERA_DEVICE
# (cuda:0), TORCH_DEVICE (cuda), PYTHON (python3; a dry run without a GPU
# uses "python3 bench/cpu_dryrun.py" with TESSERA_DEVICE=cpu TORCH_DEVICE=cpu
# and a CPU job). Exit code 0 only if Tessera's job succeeded and the
# baseline ran; a failure is reported and the other side still runs.
set -euo pipefail
if [[ $# -ne 3 ]]; then
  echo "usage: $0 BUNDLE_DIR JOB_FILE OUT_DIR" >&2
  exit 2
fi
here="$(cd "$(dirname "$0")" && pwd)"
bundle="$(cd "$1" && pwd)"
job="$2"
out="$3"
mkdir -p "$out"
modes="${TORCH_MODES:-eager,compile}"
skip="${TESSERA_SKIP:-5}"
device="${TESSERA_DEVICE:-cuda:0}"
read -r -a python <<<"${PYTHON:-python3}"
# Tessera's binaries run with the bundle's libraries; Python keeps this
# shell's environment.
in_bundle=(bash -c 'source "$0/env.sh" && exec "$@"' "$bundle")
port="${TESSERA_PORT:-$((50100 + RANDOM % 800))}"
addr="127.0.0.1:$port"

# Every process this script starts is in pids, and goes when it exits or is
# told to stop (a signal interrupts `wait`, so the trap runs at once).
pids=()
stop_all() {  # SIGTERM, up to 10 s to exit, then SIGKILL
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    for _ in $(seq 1 40); do
      kill -0 "$p" 2>/dev/null || break
      sleep 0.25
    done
    kill -9 "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  pids=()
}
trap stop_all EXIT
trap 'exit 143' TERM INT
# bounded SECONDS CMD...: CMD under timeout, in the background so that a
# signal to this script reaches it; returns CMD's status (124: timed out).
bounded() {
  timeout "$@" &
  local p=$! rc
  pids+=("$p")
  wait "$p"
  rc=$?
  pids=("${pids[@]:0:${#pids[@]}-1}")  # reaped: forget it (it was the last one added)
  return "$rc"
}

echo "== step benchmark: $job ($(date -u +%H:%M:%S))"
"${in_bundle[@]}" tessera submit "$job" --dry-run --json >"$out/jobspec.json"

# ---- Tessera: coordinator + one worker + the CLI ----
tessera_ok=1
rm -rf "$out/state" "$out/tessera_mem.csv"
mem_base=0
gpu_index="${device#cuda:}"
if [[ "$device" == cuda:* ]] && command -v nvidia-smi >/dev/null; then
  mem_base="$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i "$gpu_index" | head -1)"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i "$gpu_index" -lms 250 \
    >"$out/tessera_mem.csv" 2>/dev/null &
  pids+=($!)
fi
"${in_bundle[@]}" tessera-coordinator --listen="$addr" --state_dir="$out/state" >"$out/coordinator.log" 2>&1 &
pids+=($!)
"${in_bundle[@]}" tessera-worker --coordinator="$addr" --device="$device" >"$out/worker.log" 2>&1 &
worker=$!
pids+=($worker)
registered=0
for _ in $(seq 1 120); do
  "${in_bundle[@]}" tessera workers --json --coordinator="$addr" >"$out/workers.json" 2>/dev/null || true
  if grep -q '"worker_id"' "$out/workers.json"; then
    registered=1
    break
  fi
  kill -0 "$worker" 2>/dev/null || break
  sleep 0.5
done
if ((registered)); then
  set +e
  bounded "${TESSERA_TIMEOUT_S:-300}" "${in_bundle[@]}" tessera submit "$job" --watch --json \
    --coordinator="$addr" >"$out/tessera_events.jsonl" 2>"$out/tessera_submit.err"
  submit_rc=$?
  set -e
  ((submit_rc == 0)) || { echo "tessera submit exited $submit_rc (124: timed out)"; tessera_ok=0; }
else
  echo "FAILED: the worker exited or did not register within 60 s (see $out/worker.log)"
  : >"$out/tessera_events.jsonl"
  tessera_ok=0
fi
stop_all

if python3 "$here/step_report.py" tessera --events "$out/tessera_events.jsonl" --jobspec "$out/jobspec.json" \
  --mem "$out/tessera_mem.csv" --mem-baseline "$mem_base" --skip "$skip" >"$out/tessera.json"; then
  :
else
  tessera_ok=0
fi
cat "$out/tessera.json"
if ((!tessera_ok)); then
  echo "FAILED: Tessera's job (logs in $out); last lines:"
  tail -n 3 "$out/tessera_events.jsonl" "$out/tessera_submit.err" "$out/worker.log" "$out/coordinator.log" 2>/dev/null || true
fi

# ---- PyTorch: the same model and batch, eager and compiled ----
rm -f "$out/torch.jsonl"
torch_rc=0
if [[ "$modes" != none ]]; then
  set +e
  bounded "${TORCH_TIMEOUT_S:-400}" "${python[@]}" "$here/torch_baseline.py" --jobspec "$out/jobspec.json" \
    --modes "$modes" --warmup "${TORCH_WARMUP:-5}" --steps "${TORCH_STEPS:-20}" \
    --device "${TORCH_DEVICE:-cuda}" --json-out "$out/torch.jsonl" >"$out/torch.log" 2>&1
  torch_rc=$?
  set -e
  stop_all
  cat "$out/torch.log"
  ((torch_rc == 0)) || echo "FAILED: torch_baseline.py exited $torch_rc (124: timed out)"
fi

cat "$out/tessera.json" "$out/torch.jsonl" 2>/dev/null | grep '^{' >"$out/step.jsonl" || true
python3 "$here/step_report.py" table "$out/step.jsonl" >"$out/table.md"
echo
cat "$out/table.md"
((tessera_ok && torch_rc == 0))
