#!/usr/bin/env bash
# Builds the libFuzzer targets (--config=fuzz) and runs each for a bounded
# time, starting from its checked-in corpus. New inputs the fuzzer finds go
# to a scratch copy, not into the tree. A crash, leak, sanitizer report or
# timeout fails the script and leaves the input that caused it in
# $FUZZ_OUT (default: a fresh temp dir); check it in under
# fuzz/corpus/<target>/ with the fix, so the corpus replay test keeps it.
# Usage: [FUZZ_TARGETS="job_file ..."] fuzz/run_fuzzers.sh [SECONDS_PER_TARGET (default 60)]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
targets=(${FUZZ_TARGETS:-job_file checkpoint token_file safetensors})
out="${FUZZ_OUT:-$(mktemp -d /tmp/tessera-fuzz.XXXXXX)}"
mkdir -p "$out"

bazel build --config=fuzz $(printf '//fuzz:%s_fuzzer ' "${targets[@]}")
bin="$(bazel info --config=fuzz bazel-bin 2>/dev/null)"

# The targets run side by side (on 2 cores the whole pass takes about
# SECONDS); each reports when it is done.
pids=()
for t in "${targets[@]}"; do
  work="$out/$t-corpus"
  mkdir -p "$work"
  cp fuzz/corpus/"$t"/* "$work"/
  echo "fuzz: $t for ${seconds}s"
  "$bin/fuzz/${t}_fuzzer" "$work" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$out/$t-" >"$out/$t.log" 2>&1 &
  pids+=($!)
done
failed=0
for i in "${!targets[@]}"; do
  t="${targets[$i]}"
  if ! wait "${pids[$i]}"; then
    echo "fuzz: $t FAILED; input and log in $out"
    tail -n 40 "$out/$t.log"
    failed=1
  else
    echo "fuzz: $t ok: $(grep -E '^stat::number_of_executed_units' "$out/$t.log" || true)"
  fi
done
exit "$failed"
