#!/usr/bin/env bash
# The scaling benchmark, one command on a host with N GPUs: for the 221M and
# then the 1.1B model (bench/jobs/step_221m.yaml, step_1b.yaml), at world
# sizes 1, 2 (and 4, 8 when the host has them), tokens/s per GPU of
#   - Tessera FP8 and Tessera bf16, through the product path: a local
#     coordinator, one `tessera-worker --device=cuda:i` per GPU, the CLI;
#     reshard_after_forward on (as FSDP2 does for its blocks; RESHARD=false
#     keeps each block's gathered weights from its forward to its backward,
#     the job spec's default);
#   - PyTorch FSDP2 bf16 (bench/torch_fsdp_baseline.py, one process per GPU).
# Each rank keeps the job's micro-batch, so the global batch grows with the
# world size. For every run: step time, tokens/s per GPU, efficiency against
# the same implementation's 1-GPU run, Tessera against FSDP2, the share of
# the step the compute stream waited on collectives (StepPhases.collective_s
# of the slowest rank), control-plane overhead, peak GPU memory of GPU 0
# (nvidia-smi), the all-gather bytes per step, and bench/scaling_model.py's
# prediction from the 1-GPU phases.
#
#   bench/run_scaling_benchmarks.sh BUNDLE_DIR OUT_DIR
# Environment: BENCH_BUDGET_S (540: the 1.1B model starts only if 200 s are
# left), MODELS ("221m 1b": bench/jobs/step_NAME.yaml; an entry ending in
# .yaml is that job file), WORLDS (1 2 4 8, capped at the GPU count),
# TESSERA_TIMEOUT_S (180), TORCH_TIMEOUT_S (240), TORCH_WARMUP (5),
# TORCH_STEPS (15), TESSERA_STEPS (25), VARIANTS ("fp8 bf16": Tessera's
# recipes to run), SHARD_GROUPS ("": hybrid sharding runs besides FSDP over
# the whole world; "4" adds, at every world that 4 divides and exceeds,
# Tessera with parallelism.shard_group_size 4: HSDP 2 x 4 at 8 GPUs),
# RESHARD (true: reshard_after_forward of Tessera's jobs), FSDP2 (1; 0
# leaves PyTorch out, for comparing Tessera
# against itself under settings such as NCCL_MAX_NCHANNELS, which the
# workers inherit from this script's environment). Output: OUT_DIR/scaling.jsonl and OUT_DIR/summary.md
# (printed last); logs per run under OUT_DIR.
#
# A dry run without a GPU (it checks the plumbing, not speed): CPU workers,
# the toy CPU job, PyTorch on gloo through bench/cpu_dryrun.py, its ranks
# started by this script (TORCH_LAUNCH=env: Debian's torch 1.13 launcher
# fails under Python 3.11):
#   GPUS=2 TESSERA_DEVICE=cpu TORCH_DEVICE=cpu TORCH_LAUNCH=env \
#   PYTHON="/usr/bin/python3 bench/cpu_dryrun.py" MODELS=bench/jobs/dryrun_cpu.yaml \
#   bench/run_scaling_benchmarks.sh BUNDLE_DIR OUT_DIR
# GPUS (default: nvidia-smi's count), TESSERA_DEVICE (cuda: worker i gets
# cuda:i; cpu), TORCH_DEVICE (cuda), PYTHON (python3: the interpreter, and
# any wrapper script, for PyTorch), TORCH_LAUNCH (torchrun: python -m
# torch.distributed.run; env: one process per rank with RANK, WORLD_SIZE,
# MASTER_ADDR and MASTER_PORT set here).
set -uo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUNDLE_DIR OUT_DIR" >&2
  exit 2
fi
here="$(cd "$(dirname "$0")" && pwd)"
bundle="$(cd "$1" && pwd)"
out="$2"
mkdir -p "$out"
: >"$out/scaling.jsonl"
budget="${BENCH_BUDGET_S:-540}"
case "${RESHARD:-true}" in
  true | false) ;;
  *)
    echo "RESHARD must be true or false, not '$RESHARD'" >&2
    exit 2
    ;;
esac
start_s=$SECONDS
gpus="${GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)}"
tessera_device="${TESSERA_DEVICE:-cuda}"
torch_device="${TORCH_DEVICE:-cuda}"
read -r -a python <<<"${PYTHON:-python3}"
worlds=()
for w in ${WORLDS:-1 2 4 8}; do ((w <= gpus)) && worlds+=("$w"); done
in_bundle=(bash -c 'source "$0/env.sh" && exec "$@"' "$bundle")
failed=0

pids=()
stop_all() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 1
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  pids=()
}
trap stop_all EXIT

# run_tessera JOB_YAML WORLD fp8|bf16 DIR [SHARD_GROUP]: one job through the
# product path; with SHARD_GROUP, hybrid sharding in groups of that many ranks.
run_tessera() {
  local job="$1" world="$2" variant="$3" dir="$4" group="${5:-}"
  mkdir -p "$dir"
  sed -e "s/^world_size: .*/world_size: $world/" -e "s/^steps: .*/steps: ${TESSERA_STEPS:-25}/" \
    "$job" >"$dir/job.yaml"
  echo "reshard_after_forward: ${RESHARD:-true}" >>"$dir/job.yaml"
  [[ -n "$group" ]] && printf 'parallelism:\n  shard_group_size: %s\n' "$group" >>"$dir/job.yaml"
  if [[ "$variant" == bf16 ]]; then
    sed -i -e '/^fp8:/,/^[a-z]/{/^fp8:/d;/^  /d}' "$dir/job.yaml"
    printf 'fp8:\n  disabled: true\n' >>"$dir/job.yaml"
  fi
  "${in_bundle[@]}" tessera submit "$dir/job.yaml" --dry-run --json >"$dir/jobspec.json" || return 1
  local addr="127.0.0.1:$((52000 + RANDOM % 900))"
  "${in_bundle[@]}" tessera-coordinator --listen="$addr" --state_dir="$dir/state" >"$dir/coordinator.log" 2>&1 &
  pids+=($!)
  for ((g = 0; g < world; ++g)); do
    local device="$tessera_device"
    [[ "$device" == cuda ]] && device="cuda:$g"
    "${in_bundle[@]}" tessera-worker --coordinator="$addr" --device="$device" >"$dir/worker$g.log" 2>&1 &
    pids+=($!)
  done
  local n=0
  for _ in $(seq 1 240); do
    n=$("${in_bundle[@]}" tessera workers --json --coordinator="$addr" 2>/dev/null | grep -o '"worker_id"' | wc -l)
    ((n >= world)) && break
    sleep 0.5
  done
  local base=0
  : >"$dir/mem.csv"
  if [[ "$tessera_device" == cuda ]]; then
    base="$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 | head -1)"
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 250 >"$dir/mem.csv" 2>/dev/null &
    pids+=($!)
  fi
  timeout "${TESSERA_TIMEOUT_S:-180}" "${in_bundle[@]}" tessera submit "$dir/job.yaml" --watch --json \
    --coordinator="$addr" >"$dir/events.jsonl" 2>"$dir/submit.err"
  local rc=$?
  stop_all
  python3 "$here/step_report.py" tessera --events "$dir/events.jsonl" --jobspec "$dir/jobspec.json" \
    --mem "$dir/mem.csv" --mem-baseline "$base" --skip 5 >"$dir/tessera.json" 2>"$dir/report.err" || rc=1
  cat "$dir/tessera.json"
  return "$rc"
}

# run_fsdp2 WORLD DIR: bench/torch_fsdp_baseline.py on WORLD ranks.
run_fsdp2() {
  local world="$1" dir="$2"
  local args=("$here/torch_fsdp_baseline.py" --jobspec "$dir/jobspec.json" --json-out "$dir/fsdp2.json"
    --device "$torch_device" --warmup "${TORCH_WARMUP:-5}" --steps "${TORCH_STEPS:-15}")
  if [[ "${TORCH_LAUNCH:-torchrun}" == torchrun ]]; then
    timeout "${TORCH_TIMEOUT_S:-240}" "${python[0]}" -m torch.distributed.run --standalone \
      --nproc_per_node="$world" "${python[@]:1}" "${args[@]}"
    return
  fi
  local port=$((29500 + RANDOM % 400)) rank rc=0 ranks=()
  for ((rank = 0; rank < world; ++rank)); do
    RANK=$rank LOCAL_RANK=$rank WORLD_SIZE=$world LOCAL_WORLD_SIZE=$world MASTER_ADDR=127.0.0.1 \
      MASTER_PORT=$port timeout "${TORCH_TIMEOUT_S:-240}" "${python[@]}" "${args[@]}" &
    ranks+=($!)
  done
  for p in "${ranks[@]}"; do wait "$p" || rc=$?; done
  return "$rc"
}

for model in ${MODELS:-221m 1b}; do
  job="$here/jobs/step_$model.yaml"
  if [[ "$model" == *.yaml ]]; then
    job="$(cd "$(dirname "$model")" && pwd)/$(basename "$model")"
    model="$(basename "$model" .yaml)"
  fi
  if [[ "$model" != 221m ]] && ((SECONDS - start_s > budget - 200)); then
    echo "== $model skipped: less than 200 s of the ${budget} s budget left"
    continue
  fi
  for world in "${worlds[@]}"; do
    # FSDP over the whole world (group ""), then each hybrid layout.
    layouts=("")
    for g in ${SHARD_GROUPS:-}; do ((g < world && world % g == 0)) && layouts+=("$g"); done
    for group in "${layouts[@]}"; do
      for variant in ${VARIANTS:-fp8 bf16}; do
        dir="$out/$model/tessera-$variant-w$world${group:+-g$group}"
        echo "== $model Tessera $variant, $world GPU(s)${group:+, HSDP $((world / group)) x $group} ($(date -u +%H:%M:%S))"
        if run_tessera "$job" "$world" "$variant" "$dir" "$group"; then
          python3 - "$dir/tessera.json" "$model" "$world" "$variant" "$job" "$group" >>"$out/scaling.jsonl" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read())
w = int(sys.argv[3])
ph = r.get("phases_ms", {})
row = {"model": sys.argv[2], "world": w, "impl": f"tessera-{sys.argv[4]}", "job": sys.argv[5],
       "step_ms": r["step_ms"], "tokens_per_s_per_gpu": round(r["tokens_per_s"] / w),
       "collective_ms": ph.get("collective"), "phases_ms": ph,
       "collective_waits_ms": r.get("collective_waits_ms"),
       "control_overhead_ms": r.get("control_overhead_ms"),
       "peak_mib_gpu0": r.get("gpu_used_mib") or r.get("peak_mib"),
       "loss_first": r.get("loss_first"), "loss_last": r.get("loss_last")}
if sys.argv[6]:
    row["shard_group"] = int(sys.argv[6])
print(json.dumps(row))
PY
        else
          echo "FAILED: Tessera $variant at $world GPU(s)${group:+ in groups of $group} (logs in $dir)"
          tail -n 3 "$dir/submit.err" "$dir/worker0.log" 2>/dev/null
          failed=1
        fi
      done
    done
    [[ "${FSDP2:-1}" == 0 ]] && continue
    dir="$out/$model/fsdp2-w$world"
    mkdir -p "$dir"
    echo "== $model PyTorch FSDP2 bf16, $world GPU(s) ($(date -u +%H:%M:%S))"
    "${in_bundle[@]}" tessera submit "$job" --dry-run --json >"$dir/jobspec.json"
    rm -f "$dir/fsdp2.json"
    if run_fsdp2 "$world" "$dir" >"$dir/torch.log" 2>&1; then
      python3 - "$dir/fsdp2.json" "$model" >>"$out/scaling.jsonl" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read().splitlines()[-1])
print(json.dumps({"model": sys.argv[2], "world": r["world"], "impl": "pytorch-fsdp2",
                  "step_ms": r["step_ms"], "tokens_per_s_per_gpu": r["tokens_per_s_per_gpu"],
                  "peak_mib_gpu0": r["peak_alloc_mib"], "loss_first": r["loss_first"], "loss_last": r["loss_last"]}))
PY
      tail -n 1 "$dir/fsdp2.json"
    else
      echo "FAILED: FSDP2 at $world GPU(s)"
      tail -n 5 "$dir/torch.log"
      failed=1
    fi
  done
done

python3 - "$out/scaling.jsonl" "$here" >"$out/summary.md" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[2])
import scaling_model
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("| model | impl | GPUs | shard x replicas | step ms | tokens/s/GPU | efficiency | vs FSDP2 | collective wait | control ms | peak MiB (GPU 0) | all-gather MB/step | model tokens/s/GPU |")
print("| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for r in rows:
    # Efficiency against the same recipe's 1-GPU run, hybrid layouts included.
    one = [x for x in rows if x["model"] == r["model"] and x["impl"] == r["impl"] and x["world"] == 1]
    fsdp = [x for x in rows if x["model"] == r["model"] and x["impl"] == "pytorch-fsdp2" and x["world"] == r["world"]]
    eff = r["tokens_per_s_per_gpu"] / one[0]["tokens_per_s_per_gpu"] if one else None
    vs = r["tokens_per_s_per_gpu"] / fsdp[0]["tokens_per_s_per_gpu"] if fsdp and r["impl"] != "pytorch-fsdp2" else None
    wait = r["collective_ms"] / r["step_ms"] if r.get("collective_ms") is not None else None
    pred = ag = "-"
    group = r.get("shard_group") or r["world"]
    if r["impl"].startswith("tessera") and one and one[0].get("phases_ms"):
        m = scaling_model.load_job(r.get("job") or f"{sys.argv[2]}/jobs/step_{r['model']}.yaml")
        p = scaling_model.predict(m, one[0]["phases_ms"], r["world"], fp8=r["impl"].endswith("fp8"),
                                  shard_group=r.get("shard_group"))
        pred, ag = p["tokens_per_s_per_gpu"], f"{p['all_gather_bytes_per_step'] / 1e6:.4g}"
    fmt = lambda v, f: f.format(v) if v is not None else "-"
    print(f"| {r['model']} | {r['impl']} | {r['world']} | {group} x {r['world'] // group} | {r['step_ms']} | {r['tokens_per_s_per_gpu']} | "
          f"{fmt(eff, '{:.3f}')} | {fmt(vs, '{:.2f}x')} | {fmt(wait, '{:.1%}')} | {fmt(r.get('control_overhead_ms'), '{}')} | "
          f"{fmt(r.get('peak_mib_gpu0'), '{}')} | {ag} | {pred} |")
# Where the slowest rank's collective wait went (StepPhases.collective_waits, medians).
waited = [r for r in rows if r.get("collective_waits_ms") and r["world"] > 1]
if waited:
    sites = ["first_gather", "forward_gather", "head_gather", "backward_gather",
             "gradient_buffer", "gradient_reduce", "final_reduce", "all_reduce"]
    print()
    print("| model | impl | GPUs | shard x replicas | collective wait ms | " + " | ".join(s.replace("_", " ") for s in sites) + " |")
    print("| --- | --- | ---: | --- | ---: | " + " | ".join("---:" for _ in sites) + " |")
    for r in waited:
        group = r.get("shard_group") or r["world"]
        w = r["collective_waits_ms"]
        print(f"| {r['model']} | {r['impl']} | {r['world']} | {group} x {r['world'] // group} | {r['collective_ms']} | "
              + " | ".join(f"{w.get(s, 0.0):.3f}" for s in sites) + " |")
PY
echo
cat "$out/summary.md"
exit "$failed"
