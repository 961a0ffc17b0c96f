#!/usr/bin/env bash
# build_commit.sh in its three cases: a stamped status file, no status file
# (an unstamped build) and keys with values that must not reach C++.
set -euo pipefail
script="${TEST_SRCDIR}/${TEST_WORKSPACE:-tessera}/common/build_commit.sh"
dir="${TEST_TMPDIR}"
fail() { echo "FAIL: $*" >&2; exit 1; }

printf 'BUILD_HOST h\nSTABLE_TESSERA_COMMIT %s\nSTABLE_TESSERA_TREE modified\n' \
  0123456789abcdef0123456789abcdef01234567 >"$dir/stamped.txt"
"$script" "$dir/stamped.txt" "$dir/stamped.cc"
grep -q 'kBuildCommit\[\] = "0123456789abcdef0123456789abcdef01234567";' "$dir/stamped.cc" \
  || fail "stamped commit: $(cat "$dir/stamped.cc")"
grep -q 'kBuildTree\[\] = "modified";' "$dir/stamped.cc" || fail "stamped tree"

"$script" "$dir/missing.txt" "$dir/unstamped.cc"
grep -q 'kBuildCommit\[\] = "";' "$dir/unstamped.cc" || fail "unstamped: $(cat "$dir/unstamped.cc")"
grep -q 'kBuildTree\[\] = "";' "$dir/unstamped.cc" || fail "unstamped tree"

printf 'STABLE_TESSERA_COMMIT "x";evil\nSTABLE_TESSERA_TREE dirty\n' >"$dir/bad.txt"
"$script" "$dir/bad.txt" "$dir/bad.cc"
grep -q 'kBuildCommit\[\] = "";' "$dir/bad.cc" || fail "a bad commit got through: $(cat "$dir/bad.cc")"
grep -q 'kBuildTree\[\] = "";' "$dir/bad.cc" || fail "a bad tree got through"
echo PASS
