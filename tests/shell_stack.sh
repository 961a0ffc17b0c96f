# Sourced by the shell integration tests (never run alone): the test's
# runfiles root, a scratch directory, a free loopback address for the
# coordinator, cleanup of every process whose pid the test adds to `pids`,
# and start_coordinator / start_cpu_workers for the usual stack. Usage:
# source "$root/tests/shell_stack.sh" PREFIX, after setting root.
dir="$(mktemp -d "${TEST_TMPDIR:-/tmp}/${1:-stack}.XXXXXX")"
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
addr="127.0.0.1:${port}"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
# Prints the reason and the tail of every log in $dir, then fails the test.
fail() { echo "FAIL: $*"; echo "--- logs ---"; tail -n 30 "$dir"/*.log; exit 1; }
trap cleanup EXIT

# Starts the coordinator on $addr with any extra flags given and waits until
# it listens; its pid is $coordinator, its output $dir/coordinator.log.
start_coordinator() {
  "$root/server/tessera-coordinator" --listen="$addr" --state_dir="$dir/state" "$@" \
    >"$dir/coordinator.log" 2>&1 &
  coordinator=$!
  pids+=("$coordinator")
  for _ in $(seq 1 300); do grep -q "listening on" "$dir/coordinator.log" && break; sleep 0.1; done
}

# Starts two CPU workers with any extra flags given and waits until both
# serve; their output is $dir/worker-0.log and worker-1.log.
start_cpu_workers() {
  for i in 0 1; do
    "$root/worker/tessera-worker" --coordinator="$addr" --device=cpu "$@" >"$dir/worker-$i.log" 2>&1 &
    pids+=($!)
  done
  for i in 0 1; do
    for _ in $(seq 1 300); do grep -q "serving on" "$dir/worker-$i.log" && break; sleep 0.1; done
  done
}
