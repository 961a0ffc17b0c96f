#!/usr/bin/env bash
# Exact resume on the CUDA engine, through the product path: runs a short
# 221M FP8 job with a checkpoint at its middle step, then the same job with
# checkpoint.resume_from set to that step, and compares the resumed steps'
# losses with the unbroken run's. Prints both loss lists, then
# "resume: EXACT" (bit for bit) or "resume: DIFFERS" with the largest
# relative difference; exits non-zero unless exact. Both runs choose their
# GEMM algorithms by the same fixed rule (nothing is timed unless a job sets
# nondeterministic_gemm_tuning, which this one does not), so the resumed run
# runs the unbroken run's algorithms and EXACT is expected; a job file that
# sets the opt-out may differ.
#
# Usage, on the GPU host from the repository root with an unpacked bundle:
#   bench/gpu_resume_check.sh BUNDLE_DIR OUT_DIR [JOB_FILE]
set -euo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: $0 BUNDLE_DIR OUT_DIR [JOB_FILE]" >&2
  exit 2
fi
here="$(cd "$(dirname "$0")" && pwd)"
bundle="$(cd "$1" && pwd)"
mkdir -p "$2"
out="$(cd "$2" && pwd)"
job="${3:-$here/jobs/step_221m.yaml}"
steps=8
middle=4
source "$here/local_stack.sh"
stack_start "$bundle" "$out" cuda:0
for run in full resumed; do
  sed -E "s/^steps: .*/steps: $steps/; s/^name: .*/name: resume-$run/" "$job" >"$out/$run.yaml"
  {
    echo "checkpoint:"
    echo "  dir: $out/ckpt"
    echo "  interval_steps: $middle"
    [[ "$run" == resumed ]] && echo "  resume_from: \"$middle\""
  } >>"$out/$run.yaml"
  timeout 300 "${in_bundle[@]}" tessera submit "$out/$run.yaml" --watch --json \
    --coordinator="$stack_addr" >"$out/$run.events.jsonl" 2>"$out/$run.err" ||
    { echo "$run run exited $?"; cat "$out/$run.err"; exit 1; }
done
PYTHONPATH="$here" python3 - "$out/full.events.jsonl" "$out/resumed.events.jsonl" "$middle" <<'PY'
import sys
from loss_gap import step_losses

full, resumed, middle = (step_losses(sys.argv[1])[0], step_losses(sys.argv[2])[0],
                         int(sys.argv[3]))
print("full   ", [full[k] for k in sorted(full)])
print("resumed", [resumed[k] for k in sorted(resumed)])
same = sorted(resumed) == [k for k in sorted(full) if k >= middle] and all(
    resumed[k] == full[k] for k in resumed)
worst = max((abs(resumed[k] - full[k]) / abs(full[k]) for k in resumed if k in full),
            default=float("nan"))
print("resume:", "EXACT" if same else f"DIFFERS (largest relative difference {worst:.2e})")
sys.exit(0 if same else 1)
PY
