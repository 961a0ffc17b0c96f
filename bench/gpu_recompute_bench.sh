#!/usr/bin/env bash
# What activation recomputation saves and costs, through the product path:
# a local coordinator and one worker per GPU run JOB once per policy in
# POLICIES (memory.recompute and every_n_blocks), one after the other on
# the same workers; then, in the same call, PyTorch FSDP2 trains the same
# shape without and with per-block activation checkpointing
# (bench/torch_fsdp_baseline.py --recompute). For each run the report
# gives the median step time and its phases (recompute_s among them), the
# engine's peak (StepMetrics.peak_memory_bytes, the fullest rank), the
# highest nvidia-smi memory.used of any GPU while it ran, less what that
# GPU used before, and the dry-run's estimate for the same job.
#
#   bench/gpu_recompute_bench.sh BUNDLE_DIR OUT_DIR
# Environment: JOB (bench/jobs/plan_8b.yaml), GPUS (4), STEPS (12), SKIP
# (4 warm-up steps left out of the medians), POLICIES ("NONE:1 SELECTIVE:1
# BLOCKS:2 BLOCKS:1"), RECIPES ("fp8"; "fp8 bf16" runs every policy also
# with fp8.disabled, as run dirs ending in -bf16), TORCH_RECOMPUTE ("none
# blocks"; "" skips PyTorch),
# TORCH_STEPS (8), TIMEOUT_S (900 per run), TESSERA_DEVICE (cuda; cpu for a
# dry run of the plumbing with a CPU job), PYTHON (python3; a dry run
# without a GPU uses "python3 bench/cpu_dryrun.py").
# Output: OUT_DIR/<policy>/events.jsonl, OUT_DIR/torch.jsonl,
# OUT_DIR/recompute_report.json and OUT_DIR/table.md (printed).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/local_cluster.sh"
bench_dirs "$@"
job="${JOB:-$here/jobs/plan_8b.yaml}"
gpus="${GPUS:-4}"
steps="${STEPS:-12}"
device="${TESSERA_DEVICE:-cuda}"
read -r -a python <<<"${PYTHON:-python3}"
rc=0

# nvidia-smi memory.used of every GPU, twice a second, into FILE until the
# sampler is killed (nothing without nvidia-smi).
sample_memory() {
  command -v nvidia-smi >/dev/null || return 0
  while true; do
    nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits >>"$1" 2>/dev/null
    sleep 0.5
  done
}
baseline_memory() {
  command -v nvidia-smi >/dev/null || return 0
  nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits >"$1" 2>/dev/null
}

cluster_start "$bundle" "$out" "$gpus" "$device" || exit 1
for recipe in ${RECIPES:-fp8}; do
for policy in ${POLICIES:-NONE:1 SELECTIVE:1 BLOCKS:2 BLOCKS:1}; do
  name="${policy%%:*}" every="${policy##*:}"
  suffix=""
  [[ "$recipe" != fp8 ]] && suffix="-$recipe"
  run="$out/${name,,}_every$every$suffix"
  mkdir -p "$run"
  sed -e "s/^world_size: .*/world_size: $gpus/" -e "s/^steps: .*/steps: $steps/" \
    -e "s/^name: .*/name: recompute-${name,,}-$every$suffix/" "$job" >"$run/job.yaml"
  [[ "$device" == cpu ]] && sed -i -e "s/^device_kind: .*/device_kind: CPU/" "$run/job.yaml"
  printf 'memory:\n  recompute: %s\n  every_n_blocks: %s\n' "$name" "$every" >>"$run/job.yaml"
  if [[ "$recipe" == bf16 ]]; then  # the job's fp8 section gives way to fp8.disabled
    sed -i -e '/^fp8:/,/^[a-z]/{/^fp8:/d;/^  /d}' "$run/job.yaml"
    printf 'fp8:\n  disabled: true\n' >>"$run/job.yaml"
  fi
  "${in_bundle[@]}" tessera submit "$run/job.yaml" --dry-run >"$run/dry_run.yaml" 2>&1
  baseline_memory "$run/smi_before.csv"
  sample_memory "$run/smi.csv" &
  sampler=$!
  timeout "${TIMEOUT_S:-900}" "${in_bundle[@]}" tessera submit "$run/job.yaml" --watch --json \
    --coordinator="$cluster_addr" >"$run/events.jsonl" 2>"$run/submit.err" || rc=1
  kill "$sampler" 2>/dev/null
  wait "$sampler" 2>/dev/null
  echo "== $name every $every $recipe: $(tail -c 300 "$run/submit.err")"
done
done
cluster_stop

# PyTorch FSDP2 on the same shape, without and with per-block checkpointing.
"${in_bundle[@]}" tessera submit "$job" --dry-run --json >"$out/jobspec.json" 2>/dev/null
: >"$out/torch.jsonl"
for mode in ${TORCH_RECOMPUTE-none blocks}; do
  baseline_memory "$out/torch_${mode}_smi_before.csv"
  timeout "${TIMEOUT_S:-900}" "${python[@]}" -m torch.distributed.run --standalone \
    --nproc_per_node="$gpus" "$here/torch_fsdp_baseline.py" --jobspec "$out/jobspec.json" \
    --steps "${TORCH_STEPS:-8}" --warmup 3 --recompute "$mode" --json-out "$out/torch.jsonl" \
    $([[ "$device" == cpu ]] && echo --device cpu) >"$out/torch_$mode.log" 2>&1 || {
    echo "PyTorch FSDP2 --recompute $mode failed: $(tail -c 400 "$out/torch_$mode.log")"
  }
done

PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" python3 - "$out" "${SKIP:-4}" "$gpus" >"$out/recompute_report.json" <<'PY' || rc=1
import glob, json, os, re, statistics, sys
from job_events import read_job_events
out, skip, gpus = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

def smi_peak(run):
    """Highest memory.used of any GPU during the run, less its value before (MiB)."""
    before, peak = {}, {}
    try:
        for line in open(os.path.join(run, "smi_before.csv")):
            i, used = line.split(",")
            before[i.strip()] = float(used)
        for line in open(os.path.join(run, "smi.csv")):
            i, used = line.split(",")
            peak[i.strip()] = max(peak.get(i.strip(), 0.0), float(used))
    except (OSError, ValueError):
        return None
    return max((peak[i] - before.get(i, 0.0) for i in peak), default=None)

runs = []
for run in sorted(glob.glob(os.path.join(out, "*_every*"))):
    events = read_job_events(os.path.join(run, "events.jsonl"))
    steps, state, reason = events.steps, events.state, events.reason
    timed = [s for s in steps if int(s.get("step", 0)) >= skip]
    med = lambda key: statistics.median(float(s.get(key, 0)) for s in timed) if timed else None
    phase = lambda key: (statistics.median(float(s.get("phases", {}).get(key, 0)) for s in timed)
                         if timed else None)
    dry = open(os.path.join(run, "dry_run.yaml")).read()
    m = re.search(r"# memory per rank[^:]*: ([\d.]+) GiB", dry)
    runs.append({
        "run": os.path.basename(run), "state": state, "reason": reason if state != "SUCCEEDED" else "",
        "steps": len(steps),
        "step_ms": round(med("step_time_s") * 1e3, 2) if timed else None,
        "tokens_per_s_per_gpu": round(med("tokens_per_s") / gpus) if timed else None,
        "phases_ms": {k[:-2]: round(phase(k) * 1e3, 2) for k in
                      ("forward_s", "loss_s", "backward_s", "recompute_s", "optimizer_s",
                       "collective_s", "host_s")} if timed else None,
        "engine_peak_gib": round(max(int(s.get("peak_memory_bytes", 0)) for s in steps) / 2**30, 2)
                           if steps else None,
        "smi_peak_gib": (round(smi_peak(run) / 1024, 2) if smi_peak(run) is not None else None),
        "estimate_gib": float(m.group(1)) if m else None,
    })
torch_runs = []
try:
    for line in open(os.path.join(out, "torch.jsonl")):
        if line.strip():
            torch_runs.append(json.loads(line))
except OSError:
    pass
json.dump({"tessera": runs, "torch": torch_runs}, sys.stdout, indent=1)
print()
PY

python3 - "$out/recompute_report.json" >"$out/table.md" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
# Each run against the NONE run of its own recipe (run dirs end in -bf16 for bf16).
recipe = lambda run: run.partition("-")[2]
base = {}
for x in r["tessera"]:
    if x["run"].startswith("none") and x["step_ms"]:
        base.setdefault(recipe(x["run"]), x["step_ms"])
print("| run | state | step ms | vs NONE | tok/s per GPU | recompute ms | engine peak GiB | nvidia-smi peak GiB | estimate GiB |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for x in r["tessera"]:
    b = base.get(recipe(x["run"]))
    vs = f"{x['step_ms'] / b - 1:+.1%}" if b and x["step_ms"] else "-"
    rec = x["phases_ms"]["recompute"] if x["phases_ms"] else "-"
    print(f"| Tessera {x['run']} | {x['state']} {x['reason'][:80]} | {x['step_ms']} | {vs} | "
          f"{x['tokens_per_s_per_gpu']} | {rec} | {x['engine_peak_gib']} | {x['smi_peak_gib']} | {x['estimate_gib']} |")
for t in r["torch"]:
    print(f"| PyTorch FSDP2, recompute {t.get('recompute', 'none')} | - | {t['step_ms']} | - | "
          f"{t['tokens_per_s_per_gpu']} | - | {round((t.get('peak_alloc_mib') or 0) / 1024, 2)} | - | - |")
PY
cat "$out/table.md"
exit "$rc"
