# Sourced by bench scripts that run jobs through the product path on this
# host: a coordinator and one worker from an unpacked bundle, on a random
# loopback port, stopped (SIGTERM, then SIGKILL after a second) when the
# script exits.
#
#   source bench/local_stack.sh
#   stack_start BUNDLE OUT_DIR DEVICE [WRAPPER...]
#       starts both (logs in OUT_DIR/coordinator.log and worker.log; the
#       worker runs under WRAPPER, e.g. a profiler, if given) and waits up
#       to 2 minutes for the worker to register. Sets stack_addr (host:port),
#       stack_worker_pid and in_bundle (a command prefix that runs a bundle
#       binary with the bundle's libraries).
#   stack_stop
stack_pids=()
stack_stop() {
  for p in "${stack_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 1
  for p in "${stack_pids[@]}"; do
    kill -9 "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  stack_pids=()
}
trap stack_stop EXIT

stack_start() {
  local bundle="$1" out="$2" device="$3"
  shift 3
  in_bundle=(bash -c 'source "$0/env.sh" && exec "$@"' "$bundle")
  stack_addr="127.0.0.1:$((51000 + RANDOM % 900))"
  "${in_bundle[@]}" tessera-coordinator --listen="$stack_addr" --state_dir="$out/state" \
    >"$out/coordinator.log" 2>&1 &
  stack_pids+=($!)
  "${in_bundle[@]}" "$@" "$bundle/bin/tessera-worker" --coordinator="$stack_addr" \
    --device="$device" >"$out/worker.log" 2>&1 &
  stack_worker_pid=$!
  stack_pids+=($stack_worker_pid)
  for _ in $(seq 1 240); do
    "${in_bundle[@]}" tessera workers --json --coordinator="$stack_addr" 2>/dev/null |
      grep -q '"worker_id"' && return 0
    sleep 0.5
  done
  echo "the worker did not register within 2 minutes (see $out/worker.log)" >&2
  return 1
}
