# Sourced by the bench scripts that run one job on several workers of this
# host through the product path: a coordinator on a random loopback port
# and one worker per device, each worker restartable on its own (the chaos
# run kills and restarts them). Everything started is stopped (SIGTERM,
# then SIGKILL after a second) when the script exits.
#
#   source bench/local_cluster.sh
#   cluster_start BUNDLE OUT_DIR WORKERS DEVICE
#       DEVICE "cuda": worker g gets cuda:g; anything else (cpu) is passed
#       as it is. Logs: OUT_DIR/coordinator.log, OUT_DIR/worker<g>.log
#       (appended across restarts). Waits up to 2 minutes for WORKERS
#       healthy workers. Sets cluster_addr, in_bundle (a prefix that runs a
#       bundle binary with its libraries) and cluster_worker_pid[g].
#   cluster_start_worker G    starts (again) the worker of device index G
#   cluster_wait_workers N    waits for N healthy registered workers
#   cluster_stop
#   cluster_job_variant SRC DEST NAME STEPS [FP8_LINES]
#       writes DEST: the job file SRC with its name and steps replaced,
#       device_kind CPU when the cluster runs CPU workers, and FP8_LINES
#       (newline-separated `key: value` lines, may be empty) added to its
#       fp8 section (made when SRC has none)
#   cluster_train JOB_YAML RUN_DIR TIMEOUT_S
#       submits the job and follows it to its end: RUN_DIR/events.jsonl
#       (`tessera submit --watch --json`) and RUN_DIR/submit.err
#   bench_dirs "$@"
#       a bench script's arguments BUNDLE_DIR OUT_DIR as absolute paths in
#       bundle and out (OUT_DIR made); the usage line and exit 2 otherwise
cluster_pids=()
cluster_worker_pid=()
cluster_stop() {
  for p in "${cluster_pids[@]}" "${cluster_worker_pid[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 1
  for p in "${cluster_pids[@]}" "${cluster_worker_pid[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  cluster_pids=()
  cluster_worker_pid=()
}
trap cluster_stop EXIT

cluster_start_worker() {
  local g="$1" d="$cluster_device"
  [[ "$d" == cuda ]] && d="cuda:$g"
  "${in_bundle[@]}" tessera-worker --coordinator="$cluster_addr" --device="$d" \
    >>"$cluster_out/worker$g.log" 2>&1 &
  cluster_worker_pid[$g]=$!
}

cluster_wait_workers() {
  local n
  for _ in $(seq 1 240); do
    n=$("${in_bundle[@]}" tessera workers --json --coordinator="$cluster_addr" 2>/dev/null |
      grep -o '"healthy": *true' | wc -l)
    ((n >= $1)) && return 0
    sleep 0.5
  done
  echo "local_cluster.sh: fewer than $1 healthy workers after 2 minutes" >&2
  return 1
}

cluster_start() {
  local bundle="$1" workers="$3"
  cluster_out="$2"
  cluster_device="$4"
  in_bundle=(bash -c 'source "$0/env.sh" && exec "$@"' "$bundle")
  cluster_addr="127.0.0.1:$((53000 + RANDOM % 1900))"
  "${in_bundle[@]}" tessera-coordinator --listen="$cluster_addr" --state_dir="$cluster_out/state" \
    >"$cluster_out/coordinator.log" 2>&1 &
  cluster_pids+=($!)
  for ((g = 0; g < workers; ++g)); do cluster_start_worker "$g"; done
  cluster_wait_workers "$workers"
}

cluster_job_variant() {
  local src="$1" dest="$2" name="$3" steps="$4" fp8_lines="${5:-}"
  sed -e "s/^steps: .*/steps: $steps/" -e "s/^name: .*/name: $name/" "$src" >"$dest"
  [[ "$cluster_device" == cpu ]] && sed -i -e "s/^device_kind: .*/device_kind: CPU/" "$dest"
  [[ -z "$fp8_lines" ]] && return 0
  python3 - "$dest" "$fp8_lines" <<'PY'
import sys
path, lines = sys.argv[1], sys.argv[2]
indented = "\n".join("  " + l.strip() for l in lines.splitlines() if l.strip())
text = open(path).read()
if "\nfp8:\n" in "\n" + text:
    text = ("\n" + text).replace("\nfp8:\n", "\nfp8:\n" + indented + "\n", 1)[1:]
else:
    text = text.rstrip("\n") + "\nfp8:\n" + indented + "\n"
open(path, "w").write(text)
PY
}

cluster_train() {
  timeout "$3" "${in_bundle[@]}" tessera submit "$1" --watch --json \
    --coordinator="$cluster_addr" >"$2/events.jsonl" 2>"$2/submit.err"
}

bench_dirs() {
  if [[ $# -ne 2 ]]; then
    echo "usage: $0 BUNDLE_DIR OUT_DIR" >&2
    exit 2
  fi
  bundle="$(cd "$1" && pwd)"
  mkdir -p "$2"
  out="$(cd "$2" && pwd)"
}
