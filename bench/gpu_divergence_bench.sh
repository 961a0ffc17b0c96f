#!/usr/bin/env bash
# A provoked FP8 divergence on one GPU, through the product path, and what
# the watching (README "Watching FP8") says about it before the loss does:
# a local coordinator and one worker train JOB (the 221M FP8 job) twice, one
# after the other on the same worker, for STEPS steps: first as it is (the
# control), then with its learning rate (and min_lr) LR_FACTOR times higher,
# which blows the activations and gradients past their FP8 scales within a
# few steps. Both runs take FP8 statistics every STATS_INTERVAL steps and
# the bf16 shadow loss every SHADOW_INTERVAL steps, so the control shows
# what the same watching says of a healthy run.
#
# Per run, from its events (`tessera submit --watch --json`): the first
# step's loss; the first step whose loss exceeds 1.5x it (or is not
# finite); the first FP8 numerics WARNING, its step and its text (which
# names the block, the linear and the tensor); how many numerics warnings
# there were; the shadow steps' largest |gap| and the first shadow warning
# (fp8.shadow_gap_warn); and how the job ended. A warning that comes steps
# before the loss diverges is what the statistics are for.
#
#   bench/gpu_divergence_bench.sh BUNDLE_DIR OUT_DIR
# Environment: JOB (bench/jobs/step_221m.yaml), STEPS (40), LR_FACTOR (100),
# STATS_INTERVAL (1), SHADOW_INTERVAL (5), SHADOW_SEQUENCES (0: the
# default, fp8.shadow_batch_sequences), EXTRA_FP8 (more `key: value` lines
# for both runs' fp8 sections, e.g. "saturation_warn_fraction: 0.05": the
# tiny CPU job saturates past the default 0.1% even at its normal learning
# rate), TIMEOUT_S (1200 per run),
# TESSERA_DEVICE (cuda; cpu for a dry run of the plumbing with a tiny CPU
# job: JOB=bench/jobs/dryrun_cpu.yaml TESSERA_DEVICE=cpu).
# Output: OUT_DIR/{control,provoked}/events.jsonl (and job.yaml, submit.err),
# OUT_DIR/divergence_report.json and OUT_DIR/table.md (printed).
# Exit status: 0 when both runs were followed to their end and the report
# was written, whatever the runs showed; 1 otherwise.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/local_cluster.sh"
bench_dirs "$@"
job="${JOB:-$here/jobs/step_221m.yaml}"
steps="${STEPS:-40}"
lr_factor="${LR_FACTOR:-100}"
device="${TESSERA_DEVICE:-cuda}"
rc=0

# The fp8 lines both runs add: statistics and the shadow, often.
watch_lines="stats_interval_steps: ${STATS_INTERVAL:-1}"
watch_lines+=$'\n'"shadow_interval_steps: ${SHADOW_INTERVAL:-5}"
[[ "${SHADOW_SEQUENCES:-0}" != 0 ]] && watch_lines+=$'\n'"shadow_batch_sequences: $SHADOW_SEQUENCES"
[[ -n "${EXTRA_FP8:-}" ]] && watch_lines+=$'\n'"$EXTRA_FP8"

# Multiplies the optimizer's lr and min_lr in job file $1 by $2.
scale_learning_rate() {
  python3 - "$1" "$2" <<'PY'
import re, sys
path, factor = sys.argv[1], float(sys.argv[2])
text, count = re.subn(r"(?m)^(\s+(?:min_)?lr:\s*)(\S+)\s*$",
                      lambda m: f"{m.group(1)}{float(m.group(2)) * factor:g}",
                      open(path).read())
if not re.search(r"(?m)^\s+lr:", text):
    sys.exit(f"{path}: no optimizer lr to scale")
open(path, "w").write(text)
PY
}

cluster_start "$bundle" "$out" 1 "$device" || exit 1
base="$(basename "$job" .yaml)"
for mode in control provoked; do
  run="$out/$mode"
  mkdir -p "$run"
  cluster_job_variant "$job" "$run/job.yaml" "divergence-$base-$mode" "$steps" "$watch_lines"
  if [[ "$mode" == provoked ]]; then
    scale_learning_rate "$run/job.yaml" "$lr_factor" || { rc=1; continue; }
  fi
  # A diverging job may end FAILED (a non-finite loss): that is a result,
  # not a failure of the bench, so only a timeout counts against it.
  cluster_train "$run/job.yaml" "$run" "${TIMEOUT_S:-1200}"
  [[ $? -eq 124 ]] && { echo "== $mode: timed out" >&2; rc=1; }
  echo "== $mode (lr $(sed -n -E 's/^\s+lr:\s*//p' "$run/job.yaml")): $(tail -c 300 "$run/submit.err")"
done
cluster_stop

PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" python3 - "$out" "$lr_factor" >"$out/divergence_report.json" <<'PY' || rc=1
import json, math, os, sys
from job_events import read_job_events
out, lr_factor = sys.argv[1], float(sys.argv[2])

def number(x):
    # Proto JSON writes NaN and infinities as strings.
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")

def read(run):
    path = os.path.join(run, "events.jsonl")
    if not os.path.exists(path):
        return [], [], None, "no events"
    e = read_job_events(path)
    return e.steps, e.numerics_warnings, e.state, e.reason

report = {"lr_factor": lr_factor, "runs": {}}
for mode in ("control", "provoked"):
    steps, warnings, state, reason = read(os.path.join(out, mode))
    r = {"state": state, "reason": reason, "steps": len(steps), "first_loss": None,
         "diverged_step": None, "diverged_loss": None, "first_warning_step": None,
         "first_warning": None, "numerics_warnings": len(warnings), "shadow_steps": 0,
         "max_abs_gap": None, "first_shadow_warning_step": None, "first_shadow_warning": None}
    steps.sort(key=lambda s: int(s.get("step", 0)))
    if steps:
        first = number(steps[0].get("loss"))
        r["first_loss"] = first
        for s in steps:
            loss = number(s.get("loss"))
            if not math.isfinite(loss) or loss > 1.5 * first:
                r["diverged_step"], r["diverged_loss"] = int(s.get("step", 0)), s.get("loss")
                break
    if warnings:
        w = min(warnings, key=lambda w: int(w.get("step", 0)))
        r["first_warning_step"], r["first_warning"] = int(w.get("step", 0)), w.get("message", "")
    shadows = [(int(s.get("step", 0)), s["shadow"]) for s in steps if isinstance(s.get("shadow"), dict)]
    r["shadow_steps"] = len(shadows)
    gaps = [abs(number(sh.get("gap"))) for _, sh in shadows]
    if gaps:
        r["max_abs_gap"] = max(gaps, key=lambda g: g if math.isfinite(g) else float("inf"))
    for step, sh in shadows:
        if sh.get("warning"):
            r["first_shadow_warning_step"], r["first_shadow_warning"] = step, sh["warning"]
            break
    report["runs"][mode] = r
print(json.dumps(report, indent=1))
PY

python3 - "$out/divergence_report.json" >"$out/table.md" <<'PY' || rc=1
import json, sys
report = json.load(open(sys.argv[1]))

def cell(x, fmt="{}"):
    return "-" if x is None else fmt.format(x)

print(f"FP8 divergence provoked by a {report['lr_factor']:g}x learning rate, against the control\n")
print("| run | end | steps | first loss | loss > 1.5x first at step | first FP8 warning at step "
      "| numerics warnings | shadow steps | max abs gap | first shadow warning at step |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for mode, r in report["runs"].items():
    diverged = cell(r["diverged_step"])
    if r["diverged_step"] is not None:
        diverged += f" (loss {r['diverged_loss']})"
    print(f"| {mode} | {cell(r['state'])} | {r['steps']} | {cell(r['first_loss'], '{:.4f}')} "
          f"| {diverged} | {cell(r['first_warning_step'])} | {r['numerics_warnings']} "
          f"| {r['shadow_steps']} | {cell(r['max_abs_gap'], '{:.4f}')} "
          f"| {cell(r['first_shadow_warning_step'])} |")
print()
for mode, r in report["runs"].items():
    print(f"{mode}: first FP8 warning: {r['first_warning'] or 'none'}")
    print(f"{mode}: first shadow warning: {r['first_shadow_warning'] or 'none'}")
    if r["state"] != "SUCCEEDED" and r["reason"]:
        print(f"{mode}: ended {r['state']}: {r['reason']}")
    w, d = r["first_warning_step"], r["diverged_step"]
    if w is not None and d is not None:
        print(f"{mode}: the first warning came {d - w} step(s) before the loss passed 1.5x "
              f"its first value" if w < d else
              f"{mode}: the loss passed 1.5x its first value {w - d} step(s) before the first warning"
              if w > d else f"{mode}: the first warning and the divergence came at the same step")
PY
cat "$out/table.md"
exit "$rc"
