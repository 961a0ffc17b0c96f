#!/usr/bin/env bash
# What a checkpoint costs training, through the product path: a local
# coordinator and one worker per GPU run a job that checkpoints every
# INTERVAL steps, and the report gives, per checkpoint,
#   - the stall: the wall time from the step before the checkpoint to the
#     step after it, minus the median interval between other steps (what
#     training lost), next to the commit event's own stall_s (the ranks'
#     wait plus device-to-host copy);
#   - the write: bytes, seconds from the first Checkpoint call to the
#     commit, and each rank's write speed;
# and, first, the disk's own sequential write speed with fsync
# (dd conv=fsync of DD_GIB GiB into the checkpoint directory), the floor a
# checkpoint write cannot beat.
#
#   bench/gpu_checkpoint_bench.sh BUNDLE_DIR OUT_DIR
# Environment: JOB (bench/jobs/step_1b.yaml), GPUS (2), STEPS (450),
# INTERVAL (150), KEEP_LAST (2), DD_GIB (4; 0 skips the dd), TIMEOUT_S (420),
# SYNCHRONOUS (0; 1 sets checkpoint.synchronous, the write before training
# goes on, for the comparison), TESSERA_DEVICE (cuda; cpu for a dry run of
# the plumbing).
# Output: OUT_DIR/events.jsonl, OUT_DIR/checkpoint_report.json (printed).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/local_cluster.sh"
bench_dirs "$@"
job="${JOB:-$here/jobs/step_1b.yaml}"
gpus="${GPUS:-2}"
steps="${STEPS:-450}"
interval="${INTERVAL:-150}"
device="${TESSERA_DEVICE:-cuda}"
in_bundle=(bash -c 'source "$0/env.sh" && exec "$@"' "$bundle")
ckpt="$out/ckpt"
mkdir -p "$ckpt"

# The disk's floor: sequential write with fsync, where the checkpoints go.
: >"$out/dd.txt"
if ((${DD_GIB:-4} > 0)); then
  dd if=/dev/zero of="$ckpt/dd.test" bs=64M count=$((${DD_GIB:-4} * 16)) conv=fsync 2>"$out/dd.txt"
  rm -f "$ckpt/dd.test"
fi
cat "$out/dd.txt"

sed -e "s/^world_size: .*/world_size: $gpus/" -e "s/^steps: .*/steps: $steps/" \
  -e "s/^name: .*/name: checkpoint-bench/" "$job" >"$out/job.yaml"
[[ "$device" == cpu ]] && sed -i -e "s/^device_kind: .*/device_kind: CPU/" "$out/job.yaml"
cat >>"$out/job.yaml" <<EOF
checkpoint:
  dir: $ckpt
  interval_steps: $interval
  keep_last: ${KEEP_LAST:-2}
EOF
[[ "${SYNCHRONOUS:-0}" == 1 ]] && echo "  synchronous: true" >>"$out/job.yaml"
"${in_bundle[@]}" tessera submit "$out/job.yaml" --dry-run >"$out/dry_run.yaml" 2>&1
grep '^# checkpoint' "$out/dry_run.yaml"

cluster_start "$bundle" "$out" "$gpus" "$device" || exit 1
timeout "${TIMEOUT_S:-420}" "${in_bundle[@]}" tessera submit "$out/job.yaml" --watch --json \
  --coordinator="$cluster_addr" >"$out/events.jsonl" 2>"$out/submit.err"
rc=$?
cluster_stop
python3 - "$out/events.jsonl" "$out/dd.txt" "$steps" >"$out/checkpoint_report.json" <<'PY' || rc=1
import json, re, statistics, sys
events_path, dd_path, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
done_ms, commits, skipped, state = {}, [], [], None
for line in open(events_path):
    line = line.strip()
    if not line.startswith("{"):
        continue
    e = json.loads(line)
    if "step" in e and isinstance(e["step"], dict):
        done_ms[int(e["step"].get("step", 0))] = int(e["time_unix_ms"])
    elif "checkpoint" in e:
        commits.append(e["checkpoint"])
    elif "checkpoint_skipped" in e:
        skipped.append(e["checkpoint_skipped"])
    elif "state_change" in e:
        state = e["state_change"].get("state")
intervals = {s: done_ms[s] - done_ms[s - 1] for s in done_ms if s - 1 in done_ms}
checkpoint_steps = {int(c.get("step", 0)) for c in commits}
# A checkpoint of step c is taken before step c runs: the interval that
# ends with step c's record holds the stall.
normal = [v for s, v in intervals.items() if s not in checkpoint_steps and s > 5]
median = statistics.median(normal) if normal else 0
dd = open(dd_path).read()
m = re.search(r"([\d.]+) ([GM])B/s", dd)
disk_gb_s = (float(m.group(1)) / (1000 if m.group(2) == "M" else 1)) if m else None
report = {"state": state, "median_step_interval_ms": median, "disk_dd_fsync_gb_per_s": disk_gb_s,
          "checkpoints": [], "skipped": skipped}
for c in commits:
    s = int(c.get("step", 0))
    ranks = c.get("ranks", [])
    report["checkpoints"].append({
        "step": s,
        "bytes": int(c.get("bytes", 0)),
        "commit_s": c.get("write_s", 0),
        "stall_from_steps_s": (intervals[s] - median) / 1000 if s in intervals else None,
        "stall_reported_s": c.get("stall_s", 0),
        "rank_write_gb_per_s": [r.get("write_gb_per_s", 0) for r in ranks],
        "rank_snapshot_s": [r.get("snapshot_s", 0) for r in ranks],
        "rank_wait_s": [r.get("wait_s", 0) for r in ranks],
        "rank_write_s": [r.get("write_s", 0) for r in ranks],
        "background": all(r.get("background", False) for r in ranks),
        "warning": c.get("warning", ""),
    })
json.dump(report, sys.stdout, indent=1)
print()
PY
cat "$out/checkpoint_report.json"
exit "$rc"
