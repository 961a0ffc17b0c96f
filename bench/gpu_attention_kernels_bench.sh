#!/usr/bin/env bash
# The training step under each attention implementation
# (JobSpec.attention_kernels), through the product path: a local
# coordinator and GPUS workers train each job of JOBS once per variant, one
# after the other on the same workers, in one call. Variants:
#   tessera  attention_kernels: ATTENTION_KERNELS_TESSERA (our kernels)
#   auto     the default (AUTO): Tessera's kernels, deterministic backward
#   atomic   the default plus nondeterministic_attention_backward: true
#            (AUTO then runs Tessera's atomic backward; cuDNN's before
#            AUTO's rule changed, bench/RESULTS.md)
#   tessera_atomic  our kernels with nondeterministic_attention_backward:
#            true (their atomic backward)
#   cudnn_atomic    cuDNN's attention with nondeterministic_attention_backward:
#            true (its atomic backward)
# The median step time (the job's own step_time_s, slowest rank) after SKIP
# warm-up steps, tokens/s per GPU, the backward and forward phases, and each
# variant's speed over the first variant's are printed as a Markdown table.
# The PyTorch baselines for the same shapes are separate scripts run in the
# same device call (../shared/anchors/torch_best.py, torch_fsdp_anchor.py).
#
#   bench/gpu_attention_kernels_bench.sh BUNDLE_DIR OUT_DIR
# Environment: JOBS ("bench/jobs/step_221m.yaml bench/jobs/step_1b_s8k.yaml"),
# VARIANTS ("tessera auto"), STEPS (30), SKIP (5), GPUS (1), WORLD_SIZE (the
# job file's; set it to run a job on that many of the GPUS workers, e.g. the
# one-GPU step jobs or the 4-GPU 8B plan on 2), TIMEOUT_S (900
# per run), TESSERA_DEVICE (cuda; cpu with JOBS=bench/jobs/dryrun_cpu.yaml
# STEPS=8 SKIP=2 for a dry run of the plumbing, where every variant runs
# the CPU engine's one attention).
# Output: OUT_DIR/<job>_<variant>/events.jsonl, OUT_DIR/report.json and
# OUT_DIR/table.md (printed). Exit code 1 if any run did not succeed.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/local_cluster.sh"
bench_dirs "$@"
jobs="${JOBS:-$here/jobs/step_221m.yaml $here/jobs/step_1b_s8k.yaml}"
variants="${VARIANTS:-tessera auto}"
steps="${STEPS:-30}"
gpus="${GPUS:-1}"
device="${TESSERA_DEVICE:-cuda}"
rc=0

variant_lines() {
  case "$1" in
    tessera) echo "attention_kernels: ATTENTION_KERNELS_TESSERA" ;;
    auto) echo "" ;;
    atomic) echo "nondeterministic_attention_backward: true" ;;
    tessera_atomic) printf '%s\n' "attention_kernels: ATTENTION_KERNELS_TESSERA" \
      "nondeterministic_attention_backward: true" ;;
    cudnn_atomic) printf '%s\n' "attention_kernels: ATTENTION_KERNELS_CUDNN" \
      "nondeterministic_attention_backward: true" ;;
    *) echo "unknown variant $1 (tessera, auto, atomic, tessera_atomic, cudnn_atomic)" >&2
      return 1 ;;
  esac
}

cluster_start "$bundle" "$out" "$gpus" "$device" || exit 1
for job in $jobs; do
  base="$(basename "$job" .yaml)"
  for v in $variants; do
    run="$out/${base}_$v"
    mkdir -p "$run"
    lines="$(variant_lines "$v")" || { rc=1; continue; }
    cluster_job_variant "$job" "$run/job.yaml" "attn-$base-$v" "$steps"
    [[ -n "${WORLD_SIZE:-}" ]] && sed -i "s/^world_size: .*/world_size: $WORLD_SIZE/" "$run/job.yaml"
    [[ -n "$lines" ]] && echo "$lines" >>"$run/job.yaml"
    cluster_train "$run/job.yaml" "$run" "${TIMEOUT_S:-900}" || rc=1
    echo "== $base $v: $(tail -c 200 "$run/submit.err")"
  done
done
cluster_stop

PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" python3 - "$out" "${SKIP:-5}" "$jobs" "$variants" >"$out/report.json" <<'PY' || rc=1
import json, os, statistics, sys
from job_events import read_job_events
out, skip, jobs, variants = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()

def read(run):
    e = read_job_events(os.path.join(run, "events.jsonl"))
    return e.steps, e.state, e.reason, e.spec

def median_ms(timed, key, phase=False):
    vals = [float((s.get("phases", {}) if phase else s).get(key, 0)) for s in timed]
    return round(statistics.median(vals) * 1e3, 2) if vals else None

report = []
for job in jobs:
    base = os.path.basename(job)[:-len(".yaml")]
    first = None
    for v in variants:
        steps, state, reason, spec = read(os.path.join(out, f"{base}_{v}"))
        timed = [s for s in steps if int(s.get("step", 0)) >= skip]
        step_ms = median_ms(timed, "step_time_s")
        model = spec.get("model", {})
        tokens = int(spec.get("data", {}).get("micro_batch_size", 1)) * int(model.get("seq_len", 0))
        r = {"job": base, "variant": v, "state": state,
             "reason": reason if state != "SUCCEEDED" else "", "timed_steps": len(timed),
             "step_ms": step_ms,
             "forward_ms": median_ms(timed, "forward_s", True),
             "backward_ms": median_ms(timed, "backward_s", True),
             "tokens_per_s_per_gpu": round(tokens / (step_ms / 1e3)) if step_ms else None,
             "final_loss": float(steps[-1].get("loss", 0)) if steps else None}
        if first is None and step_ms:
            first = step_ms
        r["speed_over_first"] = round(first / step_ms, 3) if first and step_ms else None
        report.append(r)
json.dump(report, sys.stdout, indent=1)
print()
sys.exit(1 if any(r["state"] != "SUCCEEDED" or not r["timed_steps"] for r in report) else 0)
PY

python3 - "$out/report.json" >"$out/table.md" <<'PY'
import json, sys
print("| job | attention | state | step ms | forward ms | backward ms | tok/s per GPU | speed over first | final loss |")
print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for r in json.load(open(sys.argv[1])):
    print(f"| {r['job']} | {r['variant']} | {r['state']} {r['reason'][:60]} | {r['step_ms']} | "
          f"{r['forward_ms']} | {r['backward_ms']} | {r['tokens_per_s_per_gpu']} | "
          f"{r['speed_over_first']} | {r['final_loss']} |")
PY
cat "$out/table.md"
exit "$rc"
