#!/usr/bin/env bash
# Runs a daemon binary with --help and --version, as an operator would:
#   binary_usage_test.sh BINARY PROGRAM FLAG...
# --help must list each FLAG with its description and default (and not the
# flags of Abseil or gRPC themselves, which --helpfull keeps), and
# --version must print one line, "PROGRAM VERSION (commit HASH)" or
# "PROGRAM VERSION (unknown commit)" for an unstamped build, and exit 0.
set -uo pipefail
binary="$1"
program="$2"
shift 2
fail() { echo "FAIL: $*" >&2; exit 1; }

help=$("$binary" --help 2>&1)
[[ "$help" != *"No flags matched"* ]] || fail "$program --help: no flags listed"
for flag in "$@"; do
  # "--listen (host:port to serve the API on); default: ..."
  grep -q -- "--${flag} (" <<<"$help" || fail "$program --help does not describe --$flag:
$help"
done
defaults=$(grep -c 'default: ' <<<"$help")
(( defaults >= $# )) || fail "$program --help shows $defaults defaults for $# flags"
[[ "$help" != *"--flagfile"* ]] || fail "$program --help lists Abseil's own flags"
full=$("$binary" --helpfull 2>&1)
[[ "$full" == *"--flagfile"* ]] || fail "$program --helpfull lost the full list"

version=$("$binary" --version 2>&1)
status=$?
(( status == 0 )) || fail "$program --version exited $status: $version"
[[ $(wc -l <<<"$version") -eq 1 ]] || fail "$program --version printed more than one line: $version"
pattern="^${program} [0-9]+\.[0-9]+\.[0-9]+ \((commit [0-9a-f]{40,64}(, modified)?|unknown commit)\)$"
[[ "$version" =~ $pattern ]] || fail "$program --version: '$version' is not '$program VERSION (commit HASH)'"
echo "PASS: $program --help lists $# flags with defaults; $version"
