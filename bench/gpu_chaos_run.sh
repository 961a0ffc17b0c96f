#!/usr/bin/env bash
# Exact recovery on GPUs, through the product path: a local coordinator and
# one worker per GPU run the same FP8 job (checkpoints every INTERVAL steps,
# automatic restarts) once unbroken, then once per kill step K in KILLS:
# when the job reports K steps done, the worker on GPU (K mod GPUS) gets
# SIGKILL and is started again on the same GPU. Every run must SUCCEED and
# end with the unbroken run's final loss, bit for bit. Per kill: whether it
# landed during an asynchronous checkpoint write (the killed worker had
# logged a snapshot whose write it had not finished), the recovery time
# (RESTARTING to the first step of the next attempt, and from the kill
# itself), and the steps redone.
#
#   bench/gpu_chaos_run.sh BUNDLE_DIR OUT_DIR
# Environment: JOB (bench/jobs/step_221m.yaml), GPUS (2), STEPS (60),
# INTERVAL (10), KILLS ("12 27 41": right after a checkpoint, while it is
# written, and mid-interval), TIMEOUT_S (300 per run), TESSERA_DEVICE (cuda;
# cpu for a dry run). Output: OUT_DIR/chaos_report.json (printed); exits
# non-zero unless every run is exact.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/local_cluster.sh"
bench_dirs "$@"
job="${JOB:-$here/jobs/step_221m.yaml}"
gpus="${GPUS:-2}"
steps="${STEPS:-60}"
interval="${INTERVAL:-10}"
device="${TESSERA_DEVICE:-cuda}"
cluster_start "$bundle" "$out" "$gpus" "$device" || exit 1

make_job() {  # NAME -> OUT/NAME.yaml
  sed -e "s/^world_size: .*/world_size: $gpus/" -e "s/^steps: .*/steps: $steps/" \
    -e "s/^name: .*/name: $1/" "$job" >"$out/$1.yaml"
  [[ "$device" == cpu ]] && sed -i -e "s/^device_kind: .*/device_kind: CPU/" "$out/$1.yaml"
  cat >>"$out/$1.yaml" <<EOF
max_restarts: 3
checkpoint:
  dir: $out/ckpt-$1
  interval_steps: $interval
  keep_last: 2
EOF
}

make_job unbroken
timeout "${TIMEOUT_S:-300}" "${in_bundle[@]}" tessera submit "$out/unbroken.yaml" --watch --json \
  --coordinator="$cluster_addr" >"$out/unbroken.events.jsonl" 2>"$out/unbroken.err" ||
  { echo "unbroken run failed"; cat "$out/unbroken.err"; exit 1; }
rm -rf "$out/ckpt-unbroken"

for k in ${KILLS:-12 27 41}; do
  name="kill$k"
  make_job "$name"
  id=$("${in_bundle[@]}" tessera submit "$out/$name.yaml" --json --coordinator="$cluster_addr" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  timeout "${TIMEOUT_S:-300}" "${in_bundle[@]}" tessera watch "$id" --json --coordinator="$cluster_addr" \
    >"$out/$name.events.jsonl" 2>"$out/$name.err" &
  watcher=$!
  g=$((k % gpus))
  for _ in $(seq 1 3000); do
    done_steps=$("${in_bundle[@]}" tessera status "$id" --json --coordinator="$cluster_addr" 2>/dev/null |
      python3 -c 'import json,sys; print(json.load(sys.stdin).get("steps_done", 0))' 2>/dev/null)
    ((${done_steps:-0} >= k)) && break
    sleep 0.02
  done
  kill -9 "${cluster_worker_pid[$g]}"
  date +%s%3N >"$out/$name.kill_ms"
  wait "${cluster_worker_pid[$g]}" 2>/dev/null
  # What the killed worker had said about this job when it died.
  grep -F "$id" "$out/worker$g.log" >"$out/$name.killed_worker.log"
  cluster_start_worker "$g"
  wait "$watcher"
  rm -rf "$out/ckpt-$name"
done
cluster_stop

python3 - "$out" "$gpus" ${KILLS:-12 27 41} >"$out/chaos_report.json" <<'PY'
import json, re, struct, sys
out, gpus, kills = sys.argv[1], int(sys.argv[2]), [int(k) for k in sys.argv[3:]]

def run(path):
    last, state, restarting_ms, first_after_ms, attempts = {}, None, None, None, {}
    for line in open(path):
        if not line.startswith("{"):
            continue
        e = json.loads(line)
        t = int(e.get("time_unix_ms", 0))
        if "step" in e and isinstance(e["step"], dict):
            m = e["step"]
            a, s = int(m.get("attempt", 0)), int(m.get("step", 0))
            attempts.setdefault(a, []).append(s)
            last[s] = (a, m.get("loss"))
            if a > 0 and restarting_ms is not None and first_after_ms is None:
                first_after_ms = t
        elif "state_change" in e:
            state = e["state_change"].get("state")
            if state == "RESTARTING" and restarting_ms is None:
                restarting_ms = t
    final_step = max(last) if last else -1
    loss = last[final_step][1] if last else None
    redone = 0
    if 0 in attempts and len(attempts) > 1:
        later = min(min(v) for a, v in attempts.items() if a > 0)
        redone = max(attempts[0]) + 1 - later
    recovery = (first_after_ms - restarting_ms) / 1000 if first_after_ms and restarting_ms else None
    return {"state": state, "final_step": final_step, "final_loss": loss,
            "restarts": len(attempts) - 1, "recovery_s": recovery, "steps_redone": redone,
            "first_after_ms": first_after_ms}

def bits(x):
    return struct.unpack("<I", struct.pack("<f", float(x)))[0] if x is not None else None

def during_write(k):
    # The newest snapshot the killed worker logged, and whether it had
    # reported that write done before it died.
    text = open(f"{out}/kill{k}.killed_worker.log").read()
    snaps = re.findall(r"checkpoint of step (\d+): .* writing in the background", text)
    writes = set(re.findall(r"checkpoint written to \S*step-(\d+)/", text))
    return bool(snaps) and snaps[-1] not in writes

base = run(f"{out}/unbroken.events.jsonl")
report = {"unbroken": base, "kills": []}
exact_all = base["state"] == "SUCCEEDED"
for k in kills:
    r = run(f"{out}/kill{k}.events.jsonl")
    r["kill_after_steps"] = k
    r["gpu"] = k % gpus
    r["exact"] = r["state"] == "SUCCEEDED" and bits(r["final_loss"]) == bits(base["final_loss"])
    r["killed_during_async_write"] = during_write(k)
    kill_ms = int(open(f"{out}/kill{k}.kill_ms").read())
    r["kill_to_first_step_s"] = (r.pop("first_after_ms") - kill_ms) / 1000 if r.get("first_after_ms") else None
    exact_all = exact_all and r["exact"]
    report["kills"].append(r)
report["all_exact"] = exact_all
json.dump(report, sys.stdout, indent=1)
print()
sys.exit(0 if exact_all else 1)
PY
rc=$?
cat "$out/chaos_report.json"
exit "$rc"
