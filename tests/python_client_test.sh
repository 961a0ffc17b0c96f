#!/usr/bin/env bash
# Starts a coordinator and two CPU workers, then drives a job from Python
# (grpcio + stubs generated from proto/) through the v1 API alone.
set -euo pipefail
root="${TEST_SRCDIR}/${TEST_WORKSPACE:-tessera}"
source "$root/tests/shell_stack.sh" pyclient

start_coordinator
start_cpu_workers

if ! /usr/bin/python3 "$root/tests/python_client.py" "$root" "$dir/stubs" "$addr"; then
  echo "--- logs ---"; tail -n 50 "$dir"/*.log
  exit 1
fi
