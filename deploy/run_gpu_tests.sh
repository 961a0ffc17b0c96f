#!/usr/bin/env bash
# Runs the GPU-tagged test binaries of an unpacked bundle on a GPU host and
# prints one line per test plus a closing "N passed, N failed" line. Build
# the bundle with the tests in it first (see README, "GPU"):
#   deploy/bundle.sh OUT $(bazel query 'attr(tags, "gpu", tests(//...))')
# Usage: deploy/run_gpu_tests.sh BUNDLE_DIR LOG_DIR [NAME_REGEX]
# Each test's full output goes to LOG_DIR/NAME.log.
set -uo pipefail
bundle="${1:?usage: run_gpu_tests.sh BUNDLE_DIR LOG_DIR [NAME_REGEX]}"
logs="${2:?usage: run_gpu_tests.sh BUNDLE_DIR LOG_DIR [NAME_REGEX]}"
filter="${3:-.}"
source "$bundle/env.sh"
mkdir -p "$logs"
passed=0
failed=0
for test in "$bundle"/bin/*_test; do
  name="$(basename "$test")"
  [[ "$name" =~ $filter ]] || continue
  start=$(date +%s.%N)
  "$test" >"$logs/$name.log" 2>&1
  rc=$?
  secs=$(echo "$(date +%s.%N) - $start" | bc 2>/dev/null || echo "?")
  cases=$(grep -oE '\[  PASSED  \] [0-9]+ tests?' "$logs/$name.log" | grep -oE '[0-9]+' || echo 0)
  if [ "$rc" -eq 0 ]; then
    passed=$((passed + 1))
    echo "PASS $name ($cases cases, ${secs}s)"
  else
    failed=$((failed + 1))
    echo "FAIL $name (exit $rc, ${secs}s)"
    grep -E '^\[  FAILED  \]|Failure|error' "$logs/$name.log" | head -20
  fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
