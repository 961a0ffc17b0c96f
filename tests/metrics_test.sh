#!/usr/bin/env bash
# The coordinator's /metrics after a 20-step job on two CPU workers (with a
# checkpoint every 10 steps), parsed
# by prometheus_client (metrics_check.py says what is checked).
set -euo pipefail
root="${TEST_SRCDIR}/${TEST_WORKSPACE:-tessera}"
source "$root/tests/shell_stack.sh" metrics

start_coordinator --metrics_listen=127.0.0.1:0
url=$(grep -o 'http://[^ ]*/metrics' "$dir/coordinator.log") || fail "no metrics line"
start_cpu_workers

cat >"$dir/job.yaml" <<'JOB'
name: metrics
model: {vocab_size: 256, d_model: 32, n_layers: 1, n_heads: 2, ffn_dim: 64, seq_len: 16}
data: {synthetic: {task: COPY}, micro_batch_size: 2}
optimizer: {lr: 0.003, warmup_steps: 1}
world_size: 2
device_kind: CPU
steps: 20
seed: 5
JOB
echo "checkpoint: {dir: $dir/ckpt, interval_steps: 10}" >>"$dir/job.yaml"
out=$("$root/client/tessera" submit "$dir/job.yaml" --watch --coordinator="$addr") \
  || fail "job did not succeed: $out"
job=$(grep -o 'submitted job-[0-9]*' <<<"$out" | cut -d' ' -f2)
/usr/bin/python3 "$root/tests/metrics_check.py" "$url" "$job" 20 2 || fail "metrics check"
