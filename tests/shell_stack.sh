# Sourced by the shell integration tests (never run alone): the test's
# runfiles root, a scratch directory, a free loopback address for the
# coordinator, and cleanup of every process whose pid the test adds to
# `pids`. Usage: source "$root/tests/shell_stack.sh" PREFIX, after setting
# root.
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
