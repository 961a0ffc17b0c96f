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
source "$here/local_stack.sh"
stack_start "$bundle" "$out" cuda:0 "${NCU:-ncu}" --metrics gpu__time_duration.sum -f -o "$out/step"
timeout "${PROFILE_TIMEOUT_S:-420}" "${in_bundle[@]}" tessera submit "$out/job.yaml" --watch --json \
  --coordinator="$stack_addr" >"$out/events.jsonl" 2>"$out/submit.err" || echo "submit exited $?"
# The worker shuts down cleanly on SIGTERM; Nsight Compute then writes the
# report.
pkill -TERM -f "^$bundle/bin/tessera-worker" || true
for _ in $(seq 1 240); do kill -0 "$stack_worker_pid" 2>/dev/null || break; sleep 0.5; done
stack_stop
"${in_bundle[@]}" "${NCU:-ncu}" -i "$out/step.ncu-rep" --csv --page raw \
  --metrics gpu__time_duration.sum >"$out/kernels.csv"
python3 "$here/kernel_profile.py" "$out/kernels.csv" --sequence "$out/sequence.txt" | tee "$out/profile.md"
