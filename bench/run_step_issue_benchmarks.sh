#!/usr/bin/env bash
# The training-step benchmarks in one command, on one GPU host:
#   ops    bench/ops_bench.py: FP8 GEMM against torch._scaled_mm (8192^3 and
#          the 221M model's shapes), FusedAdam with FP8 re-quantize on 1.07B
#          parameters in uneven shards against the measured copy bandwidth,
#          and the fused linear + cross-entropy at N 8192, H 4096, V 131072
#          against PyTorch; every output checked before any speed is shown.
#   221m   the 221M model's step (bench/gpu_step_bench.sh): Tessera FP8 with
#          PyTorch eager and torch.compile, then Tessera bf16.
#   1b     the same for the 1.1B model.
#   loss   FP8 against bf16 loss curves, 300 steps on real text
#          (bench/loss_curves.sh).
# Every stage logs under OUT_DIR/<stage>; a failing stage is reported and the
# next still runs. The tables are printed last; the exit code is 0 only if
# every stage passed.
#
# Usage, on the GPU host from the repository root:
#   bench/run_step_issue_benchmarks.sh BUNDLE_DIR OUT_DIR
# BUNDLE_DIR is a deploy/bundle.sh directory built with //bench:ops_bench.
# Environment: STAGES (221m ops 1b loss), TORCH_MODES for the step stages
# (eager,compile).
set -uo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUNDLE_DIR OUT_DIR" >&2
  exit 2
fi
here="$(cd "$(dirname "$0")" && pwd)"
bundle="$(cd "$1" && pwd)"
mkdir -p "$2"
out="$(cd "$2" && pwd)"
cd "$here/.."
stages="${STAGES:-221m ops 1b loss}"
failed=()
summary=()

stage() {  # stage NAME LOG CMD...: runs CMD, keeps its output in LOG
  local name="$1" log="$2"
  shift 2
  echo "== $name ($(date -u +%H:%M:%S))"
  if "$@" >"$log" 2>&1; then
    summary+=("$name: passed")
  else
    summary+=("$name: FAILED (exit $?, log $log)")
    failed+=("$name")
  fi
  tail -n 12 "$log"
}

step_pair() {  # step_pair NAME FP8_JOB BF16_JOB
  local name="$1"
  mkdir -p "$out/$name"
  stage "$name fp8" "$out/$name/fp8.log" env TORCH_MODES="${TORCH_MODES:-eager,compile}" \
    bench/gpu_step_bench.sh "$bundle" "$2" "$out/$name/fp8"
  stage "$name bf16" "$out/$name/bf16.log" env TORCH_MODES=none \
    bench/gpu_step_bench.sh "$bundle" "$3" "$out/$name/bf16"
}

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
for s in $stages; do
  case "$s" in
    ops)
      mkdir -p "$out/ops"
      stage ops "$out/ops/run.log" python3 bench/ops_bench.py --binary "$bundle/bin/ops_bench" \
        --lib-path "$bundle/lib:/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64" \
        --json-out "$out/ops/ops.jsonl" --table-out "$out/ops/ops.md" --log "$out/ops/binary.log"
      ;;
    221m) step_pair 221m bench/jobs/step_221m.yaml bench/jobs/step_221m_bf16.yaml ;;
    1b) step_pair 1b bench/jobs/step_1b.yaml bench/jobs/step_1b_bf16.yaml ;;
    loss) stage loss "$out/loss.log" bench/loss_curves.sh "$bundle" "$out/loss" ;;
    *) summary+=("$s: unknown stage"); failed+=("$s") ;;
  esac
done

echo
echo "== summary"
printf '%s\n' "${summary[@]}"
for t in "$out"/ops/ops.md "$out"/*/fp8/table.md "$out"/*/bf16/table.md "$out"/loss/loss_gap.md; do
  [[ -f "$t" ]] && { echo; echo "-- $t"; cat "$t"; }
done
((${#failed[@]} == 0))
