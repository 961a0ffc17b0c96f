#!/usr/bin/env bash
# Starts a coordinator and two CPU workers, then drives a job from Python
# (grpcio + stubs generated from proto/) through the v1 API alone.
set -euo pipefail
root="${TEST_SRCDIR}/${TEST_WORKSPACE:-tessera}"
source "$root/tests/shell_stack.sh" pyclient

"$root/server/tessera-coordinator" --listen="$addr" --state_dir="$dir/state" >"$dir/coordinator.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 300); do grep -q "listening on" "$dir/coordinator.log" && break; sleep 0.1; done
for i in 0 1; do
  "$root/worker/tessera-worker" --coordinator="$addr" --device=cpu >"$dir/worker-$i.log" 2>&1 &
  pids+=($!)
done
for i in 0 1; do
  for _ in $(seq 1 300); do grep -q "serving on" "$dir/worker-$i.log" && break; sleep 0.1; done
done

if ! /usr/bin/python3 "$root/tests/python_client.py" "$root" "$dir/stubs" "$addr"; then
  echo "--- logs ---"; tail -n 50 "$dir"/*.log
  exit 1
fi
