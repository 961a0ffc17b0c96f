#!/usr/bin/env bash
# Per-rank memory of the 8B and 70B-class shapes (bench/jobs/plan_8b.yaml,
# plan_70b.yaml) under each activation recomputation policy, from
# `tessera submit --dry-run`: the estimate SetupJob refuses a job by
# (common/memory_estimate.h, held to the trainer's real allocation by
# worker/trainer/recompute_test and fsdp_trainer_test). Needs no device;
# prints markdown tables for bench/RESULTS.md.
#
#   bench/memory_plan.sh [path/to/tessera]
set -euo pipefail
cd "$(dirname "$0")/.."
tessera=${1:-bazel-bin/client/tessera}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# One dry-run: job file, world size, shard group (0: plain FSDP), policy,
# every_n_blocks, and optionally sequences per rank (the job's when left
# out). Prints the total and the components in GiB.
estimate() {
  local job=$1 world=$2 group=$3 policy=$4 every=$5 batch=${6:-} spec="$work/job.yaml"
  sed -e "s/^world_size: .*/world_size: $world/" "$job" > "$spec"
  if [ -n "$batch" ]; then sed -i -e "s/^  micro_batch_size: .*/  micro_batch_size: $batch/" "$spec"; fi
  printf 'memory:\n  recompute: %s\n  every_n_blocks: %s\n' "$policy" "$every" >> "$spec"
  if [ "$group" != 0 ]; then printf 'parallelism:\n  shard_group_size: %s\n' "$group" >> "$spec"; fi
  "$tessera" submit "$spec" --dry-run | sed -n 's/^# memory per rank[^:]*: //p' |
    sed -E 's/ GiB \(parameter shards / | /; s/ GiB, gathered / | /; s/ GiB, activations / | /;
            s/ GiB( \([0-9.]+ GiB without recomputation\))?, scratch / | /;
            s/ GiB, engine workspace / | /; s/ GiB\)$//'
}

row() {  # label, then estimate's arguments
  local label=$1; shift
  local parts total shards gathered activations scratch workspace
  parts=$(estimate "$@")
  IFS='|' read -r total shards gathered activations scratch workspace <<< "$parts"
  printf '| %s | %s GiB | %s | %s | %s | %.2f |\n' "$label" "$(echo $total)" "$(echo $shards)" \
    "$(echo $gathered)" "$(echo $activations)" "$(echo "$scratch + $workspace" | bc)"
}

header() {
  echo "| $1 | per rank | parameter shards | gathered | activations | scratch + workspace |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: |"
}

echo "8B shape, 4 ranks, reshard_after_forward:"
echo
header "recompute"
for p in "NONE 1" "SELECTIVE 1" "BLOCKS 4" "BLOCKS 2" "BLOCKS 1"; do
  set -- $p
  row "$1$( [ "$1" = BLOCKS ] && echo ", every $2" )" bench/jobs/plan_8b.yaml 4 0 "$1" "$2"
done
echo
echo "8B shape, 8 ranks, 2 sequences of 8192 per rank (not yet run), reshard_after_forward:"
echo
header "recompute"
for p in "NONE 1" "SELECTIVE 1" "BLOCKS 2" "BLOCKS 1"; do
  set -- $p
  row "$1$( [ "$1" = BLOCKS ] && echo ", every $2" )" bench/jobs/plan_8b.yaml 8 0 "$1" "$2" 2
done
echo
echo "70B-class shape, reshard_after_forward:"
echo
header "ranks (shard group), recompute"
for world in 8 16 32 64; do
  for p in "NONE 1" "SELECTIVE 1" "BLOCKS 2" "BLOCKS 1"; do
    set -- $p
    row "$world, $1$( [ "$1" = BLOCKS ] && echo ", every $2" )" bench/jobs/plan_70b.yaml "$world" 0 "$1" "$2"
  done
done
for p in "NONE 1" "SELECTIVE 1" "BLOCKS 1"; do
  set -- $p
  row "16 to 64 (HSDP groups of 8), $1" bench/jobs/plan_70b.yaml 64 8 "$1" "$2"
done
