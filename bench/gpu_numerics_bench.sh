#!/usr/bin/env bash
# What FP8 statistics cost (README "Watching FP8"), through the product
# path: a local coordinator and one worker run each job of JOBS twice on one
# GPU, without statistics and with fp8.stats_interval_steps: INTERVAL, one
# after the other on the same worker. Statistics steps (0, INTERVAL,
# 2*INTERVAL, ...) run eagerly and measure every FP8 tensor; the steps
# between replay the captured step and must cost nothing. So the report
# gives, per run, the median step time (of the steps after SKIP), the mean
# over the same steps (the statistics steps included, which is what a job
# pays per step), and the statistics steps' own times; the cost in percent
# is the mean with statistics over the mean without, less one. STEPS should
# reach past two statistics steps after SKIP (the default 205 holds steps
# 100 and 200).
#
#   bench/gpu_numerics_bench.sh BUNDLE_DIR OUT_DIR
# Environment: JOBS ("bench/jobs/step_221m.yaml bench/jobs/step_1b.yaml"),
# STEPS (205), INTERVAL (100), SKIP (5 warm-up steps left out), TIMEOUT_S
# (1200 per run), TESSERA_DEVICE (cuda; cpu for a dry run of the plumbing
# with a CPU job, e.g. JOBS=bench/jobs/dryrun_cpu.yaml STEPS=24 INTERVAL=5).
# Output: OUT_DIR/<job>_<off|on>/events.jsonl, OUT_DIR/numerics_report.json
# and OUT_DIR/table.md (printed).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/local_cluster.sh"
bench_dirs "$@"
jobs="${JOBS:-$here/jobs/step_221m.yaml $here/jobs/step_1b.yaml}"
steps="${STEPS:-205}"
interval="${INTERVAL:-100}"
device="${TESSERA_DEVICE:-cuda}"
rc=0

cluster_start "$bundle" "$out" 1 "$device" || exit 1
for job in $jobs; do
  base="$(basename "$job" .yaml)"
  for mode in off on; do
    run="$out/${base}_$mode"
    mkdir -p "$run"
    lines=""
    [[ "$mode" == on ]] && lines="stats_interval_steps: $interval"
    cluster_job_variant "$job" "$run/job.yaml" "numerics-$base-$mode" "$steps" "$lines"
    sed -i -e "s/^world_size: .*/world_size: 1/" "$run/job.yaml"
    cluster_train "$run/job.yaml" "$run" "${TIMEOUT_S:-1200}" || rc=1
    echo "== $base statistics $mode: $(tail -c 300 "$run/submit.err")"
  done
done
cluster_stop

python3 - "$out" "${SKIP:-5}" "$interval" >"$out/numerics_report.json" <<'PY' || rc=1
import glob, json, os, statistics, sys
out, skip, interval = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

def read(run):
    steps, records, warnings, state = {}, 0, 0, None
    for line in open(os.path.join(run, "events.jsonl")):
        line = line.strip()
        if not line.startswith("{"):
            continue
        e = json.loads(line)
        if isinstance(e.get("step"), dict):
            steps[int(e["step"].get("step", 0))] = float(e["step"].get("step_time_s", 0))
        elif "numerics" in e:
            records += 1
        elif "numerics_warning" in e:
            warnings += 1
        elif "state_change" in e:
            state = e["state_change"].get("state")
    return steps, records, warnings, state

report = {"interval": interval, "skip": skip, "jobs": {}}
for off_dir in sorted(glob.glob(os.path.join(out, "*_off"))):
    base = os.path.basename(off_dir)[:-4]
    entry = {}
    for mode in ("off", "on"):
        steps, records, warnings, state = read(os.path.join(out, f"{base}_{mode}"))
        timed = {s: t for s, t in steps.items() if s >= skip}
        between = [t for s, t in timed.items() if s % interval != 0]
        entry[mode] = {
            "state": state,
            "steps": len(steps),
            "median_s": statistics.median(between) if between else None,
            "mean_s": statistics.mean(timed.values()) if timed else None,
            "stats_steps_s": {str(s): t for s, t in sorted(timed.items()) if s % interval == 0}
                             if mode == "on" else {},
            "numerics_records": records,
            "numerics_warnings": warnings,
        }
    off, on = entry["off"], entry["on"]
    entry["cost_percent"] = (100 * (on["mean_s"] / off["mean_s"] - 1)
                             if off["mean_s"] and on["mean_s"] else None)
    entry["median_change_percent"] = (100 * (on["median_s"] / off["median_s"] - 1)
                                      if off["median_s"] and on["median_s"] else None)
    report["jobs"][base] = entry
json.dump(report, sys.stdout, indent=1)
PY

python3 - "$out/numerics_report.json" >"$out/table.md" <<'PY' || rc=1
import json, sys
r = json.load(open(sys.argv[1]))
f = lambda v, d=4: "-" if v is None else f"{v:.{d}f}"
print(f"FP8 statistics every {r['interval']} steps (steps from {r['skip']} on)\n")
print("| job | median off (s) | median on (s) | mean off (s) | mean on (s) | statistics steps (s) | cost |")
print("|---|---|---|---|---|---|---|")
for name, e in r["jobs"].items():
    stats = ", ".join(f"{s}: {t:.4f}" for s, t in e["on"]["stats_steps_s"].items()) or "-"
    print(f"| {name} | {f(e['off']['median_s'])} | {f(e['on']['median_s'])} | "
          f"{f(e['off']['mean_s'])} | {f(e['on']['mean_s'])} | {stats} | "
          f"{f(e['cost_percent'], 2)}% |")
    print(f"|  | {e['off']['state']} | {e['on']['state']}, {e['on']['numerics_records']} records, "
          f"{e['on']['numerics_warnings']} warnings | | | | |")
PY
cat "$out/table.md"
exit $rc
