#!/usr/bin/env bash
# The README's first command: installs what is missing, builds Tessera, and
# runs the default job on the embedded setup — a local coordinator plus two
# CPU worker daemons on loopback training a small Llama-style decoder on a
# synthetic addition task. Shows live progress and a summary, then shuts the
# processes down cleanly.
#
# Environment: TESSERA_JOB (job file, default client/examples/default_job.yaml),
# TESSERA_PORT (coordinator port, default: a free one).
set -euo pipefail
cd "$(dirname "$0")/.."

bash deploy/setup.sh
echo "quickstart: building (the first build takes a few minutes)"
bazel build //server:tessera-coordinator //worker:tessera-worker //client:tessera
bin="$(bazel info bazel-bin 2>/dev/null)"

job="${TESSERA_JOB:-client/examples/default_job.yaml}"
port="${TESSERA_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')}"
addr="127.0.0.1:${port}"
run_dir="$(mktemp -d /tmp/tessera-quickstart.XXXXXX)"
pids=()

shutdown() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap shutdown EXIT INT TERM

wait_for_line() {  # file, text, what
  for _ in $(seq 1 300); do
    if grep -q "$2" "$1"; then return 0; fi
    sleep 0.1
  done
  echo "quickstart: $3 did not start; its log:" >&2
  cat "$1" >&2
  return 1
}

"$bin/server/tessera-coordinator" --listen="$addr" --state_dir="$run_dir/state" \
  >"$run_dir/coordinator.log" 2>&1 &
pids+=($!)
wait_for_line "$run_dir/coordinator.log" "listening on" "the coordinator"
for i in 0 1; do
  "$bin/worker/tessera-worker" --coordinator="$addr" --device=cpu >"$run_dir/worker-$i.log" 2>&1 &
  pids+=($!)
done
for i in 0 1; do wait_for_line "$run_dir/worker-$i.log" "serving on" "worker $i"; done
echo "quickstart: coordinator at $addr, 2 CPU workers; logs in $run_dir"

set +e
"$bin/client/tessera" submit "$job" --watch --coordinator="$addr"
rc=$?
set -e
echo "quickstart: shutting down"
exit "$rc"
