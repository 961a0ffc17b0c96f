#!/usr/bin/env bash
# What the bf16 shadow loss (fp8.shadow_interval_steps) costs, through the
# product path: a local coordinator and one worker train each job of JOBS
# (the 221M and 1.1B models on one GPU) twice on the same worker, without
# the shadow and with it every INTERVAL steps, one after the other in one
# call. The shadow's two forwards run after their step and are not in the
# step's step_time_s; each shadow step's record says how long they took
# (shadow.time_s). So the cost is the shadow time summed over the run,
# spread over the timed steps, against the median step time without the
# shadow; the median step times of the two runs are reported too (they
# should agree: the shadow changes no step). A median alone cannot see a
# cost paid once every INTERVAL steps, hence the sum. The wall columns
# count everything the job paid, whatever EXTRA_FP8 adds too (statistics
# steps run eagerly): wall time per timed step, with against without.
#
#   bench/gpu_shadow_bench.sh BUNDLE_DIR OUT_DIR
# Environment: JOBS ("bench/jobs/step_221m.yaml bench/jobs/step_1b.yaml"),
# STEPS (200: two shadow steps at INTERVAL 100), INTERVAL (100), SKIP (5
# warm-up steps left out of the medians and the spread), EXTRA_FP8 (more
# `key: value` lines for the fp8 section of the shadowed run, e.g.
# "stats_interval_steps: 100"), TIMEOUT_S (900 per run), TESSERA_DEVICE
# (cuda; cpu for a dry run of the plumbing with JOBS=bench/jobs/dryrun_cpu.yaml
# STEPS=12 INTERVAL=4).
# Output: OUT_DIR/<job>_{off,on}/events.jsonl, OUT_DIR/shadow_report.json
# and OUT_DIR/table.md (printed).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/local_cluster.sh"
bench_dirs "$@"
jobs="${JOBS:-$here/jobs/step_221m.yaml $here/jobs/step_1b.yaml}"
steps="${STEPS:-200}"
interval="${INTERVAL:-100}"
device="${TESSERA_DEVICE:-cuda}"
rc=0

# The fp8 lines the shadowed run adds.
shadow_lines="shadow_interval_steps: $interval"
[[ -n "${EXTRA_FP8:-}" ]] && shadow_lines+=$'\n'"$EXTRA_FP8"

cluster_start "$bundle" "$out" 1 "$device" || exit 1
for job in $jobs; do
  base="$(basename "$job" .yaml)"
  for mode in off on; do
    run="$out/${base}_$mode"
    mkdir -p "$run"
    lines=""
    [[ "$mode" == on ]] && lines="$shadow_lines"
    cluster_job_variant "$job" "$run/job.yaml" "shadow-$base-$mode" "$steps" "$lines"
    cluster_train "$run/job.yaml" "$run" "${TIMEOUT_S:-900}" || rc=1
    echo "== $base shadow $mode: $(tail -c 300 "$run/submit.err")"
  done
done
cluster_stop

PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" python3 - "$out" "${SKIP:-5}" "$jobs" >"$out/shadow_report.json" <<'PY' || rc=1
import json, os, statistics, sys
from job_events import read_job_events
out, skip, jobs = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()

def read(run):
    e = read_job_events(os.path.join(run, "events.jsonl"))
    return e.steps, e.state, e.reason

report = []
for job in jobs:
    base = os.path.basename(job)[:-len(".yaml")]
    runs = {}
    for mode in ("off", "on"):
        steps, state, reason = read(os.path.join(out, f"{base}_{mode}"))
        timed = [s for s in steps if int(s.get("step", 0)) >= skip]
        shadows = [s["shadow"] for s in steps if isinstance(s.get("shadow"), dict)]
        runs[mode] = {
            "state": state, "reason": reason if state != "SUCCEEDED" else "",
            "steps": len(steps), "timed_steps": len(timed),
            "median_step_ms": round(statistics.median(float(s.get("step_time_s", 0))
                                                      for s in timed) * 1e3, 3) if timed else None,
            "shadow_steps": len(shadows),
            "shadow_ms": [round(float(s.get("time_s", 0)) * 1e3, 2) for s in shadows],
            "shadow_total_s": sum(float(s.get("time_s", 0)) for s in shadows),
            "gaps": [round(float(s.get("gap", 0)), 5) for s in shadows],
            "warnings": [s["warning"] for s in shadows if s.get("warning")],
            # What the job paid, everything included (shadows, statistics
            # steps run eagerly, the coordinator): wall time per step from
            # the step record before the first timed step to the last.
            "wall_ms_per_step": round((timed[-1]["_time_ms"] - steps[skip - 1]["_time_ms"])
                                      / len(timed), 3) if len(timed) > 1 and skip >= 1 else None,
        }
    off, on = runs["off"], runs["on"]
    cost = None
    if off["median_step_ms"] and on["timed_steps"]:
        per_step_ms = on["shadow_total_s"] * 1e3 / max(1, on["steps"])
        cost = round(100 * per_step_ms / off["median_step_ms"], 3)
    wall_cost = None
    if off["wall_ms_per_step"] and on["wall_ms_per_step"]:
        wall_cost = round(100 * (on["wall_ms_per_step"] / off["wall_ms_per_step"] - 1), 3)
    report.append({"job": base, "off": off, "on": on, "shadow_cost_percent": cost,
                   "wall_cost_percent": wall_cost})
json.dump(report, sys.stdout, indent=1)
print()
PY

python3 - "$out/shadow_report.json" >"$out/table.md" <<'PY'
import json, sys
print("| job | state off / on | median step ms off | on | shadow steps | ms per shadow step | shadow cost % of step time | wall ms per step off | on | wall cost % | gaps |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
for r in json.load(open(sys.argv[1])):
    off, on = r["off"], r["on"]
    per = round(sum(on["shadow_ms"]) / len(on["shadow_ms"]), 2) if on["shadow_ms"] else "-"
    print(f"| {r['job']} | {off['state']} / {on['state']} {(off['reason'] + on['reason'])[:80]} | "
          f"{off['median_step_ms']} | {on['median_step_ms']} | {on['shadow_steps']} | {per} | "
          f"{r['shadow_cost_percent']} | {off['wall_ms_per_step']} | {on['wall_ms_per_step']} | "
          f"{r['wall_cost_percent']} | {' '.join(f'{g:+.4f}' for g in on['gaps'])} |")
PY
cat "$out/table.md"
exit "$rc"
