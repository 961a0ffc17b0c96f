#!/usr/bin/env bash
# Kernel-level profile of one training step, for deciding what to optimise.
# Runs JOB_FILE (shortened to STEPS steps, 3 by default) through coordinator
# + one worker, the worker under Nsight Compute collecting only each
# kernel's GPU duration (one replay pass per kernel, so the kernels are
# serialised but their own durations are the same as in a normal run).
# bench/kernel_profile.py then splits the kernel sequence into steps at the
# embedding forward kernel and prints, for the last step, time per kernel
# name and per step phase.
#
# Usage, on the GPU host from the repository root with an unpacked bundle:
#   bench/profile_step.sh BUNDLE_DIR JOB_FILE OUT_DIR
# Environment: STEPS (3), NCU (ncu), PROFILE_TIMEOUT_S (420).
set -euo pipefail
if [[ $# -ne 3 ]]; then
  echo "usage: $0 BUNDLE_DIR JOB_FILE OUT_DIR" >&2
  exit 2
fi
here="$(cd "$(dirname "$0")" && pwd)"
bundle="$(cd "$1" && pwd)"
out="$3"
mkdir -p "$out"
steps="${STEPS:-3}"
sed -E "s/^steps: .*/steps: $steps/" "$2" >"$out/job.yaml"
in_bundle=(bash -c 'source "$0/env.sh" && exec "$@"' "$bundle")
port="$((50900 + RANDOM % 90))"
addr="127.0.0.1:$port"
pids=()
stop_all() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 1
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  pids=()
}
trap stop_all EXIT
"${in_bundle[@]}" tessera-coordinator --listen="$addr" --state_dir="$out/state" >"$out/coordinator.log" 2>&1 &
pids+=($!)
"${in_bundle[@]}" "${NCU:-ncu}" --metrics gpu__time_duration.sum -f -o "$out/step" \
  "$bundle/bin/tessera-worker" --coordinator="$addr" --device=cuda:0 >"$out/worker.log" 2>&1 &
profiler=$!
pids+=($profiler)
for _ in $(seq 1 240); do
  "${in_bundle[@]}" tessera workers --json --coordinator="$addr" 2>/dev/null | grep -q '"worker_id"' && break
  sleep 0.5
done
timeout "${PROFILE_TIMEOUT_S:-420}" "${in_bundle[@]}" tessera submit "$out/job.yaml" --watch --json \
  --coordinator="$addr" >"$out/events.jsonl" 2>"$out/submit.err" || echo "submit exited $?"
# The worker shuts down cleanly on SIGTERM; Nsight Compute then writes the
# report.
pkill -TERM -f "^$bundle/bin/tessera-worker" || true
for _ in $(seq 1 240); do kill -0 "$profiler" 2>/dev/null || break; sleep 0.5; done
stop_all
"${in_bundle[@]}" "${NCU:-ncu}" -i "$out/step.ncu-rep" --csv --page raw \
  --metrics gpu__time_duration.sum >"$out/kernels.csv"
python3 "$here/kernel_profile.py" "$out/kernels.csv" --sequence "$out/sequence.txt" | tee "$out/profile.md"
