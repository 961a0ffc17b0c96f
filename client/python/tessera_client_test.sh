#!/usr/bin/env bash
# Runs the package's unit tests (tessera_client/*_test.py) from the source
# tree, with its stubs generated from proto/ into a scratch directory.
set -euo pipefail
root="${TEST_SRCDIR}/${TEST_WORKSPACE:-tessera}"
stubs="$(mktemp -d "${TEST_TMPDIR:-/tmp}/stubs.XXXXXX")"
/usr/bin/python3 "$root/client/python/tessera_client/proto_stubs.py" "$root" "$stubs" >/dev/null
cd "$root/client/python"
TESSERA_REPO_ROOT="$root" PYTHONPATH="$root/client/python:$stubs" PYTHONDONTWRITEBYTECODE=1 \
  /usr/bin/python3 -m unittest discover -s tessera_client -t . -p '*_test.py' -v
