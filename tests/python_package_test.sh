#!/usr/bin/env bash
# The tessera_client package as a user gets it: installed offline with pip
# from a copy of client/python and proto/ (Debian's setuptools, wheel,
# grpcio and grpc-tools; --no-index: nothing downloaded), then driven by
# python_package_test.py against a TLS coordinator with user tokens and two
# CPU workers that it starts, restarts and stops itself.
set -euo pipefail
root="${TEST_SRCDIR}/${TEST_WORKSPACE:-tessera}"
dir="$(mktemp -d "${TEST_TMPDIR:-/tmp}/pypackage.XXXXXX")"

src="$dir/checkout"
mkdir -p "$src/client"
cp -rL "$root/proto" "$src/proto"
cp -rL "$root/client/python" "$src/client/python"
if ! /usr/bin/python3 -m pip install --no-deps --no-index --no-cache-dir \
    --target "$dir/site" "$src/client/python" >"$dir/pip.log" 2>&1; then
  echo "FAIL: pip install"; cat "$dir/pip.log"; exit 1
fi
# The installed copy, not the sources, is what the test imports.
test -f "$dir/site/tessera_client/v1/coordinator_pb2_grpc.py"

bash "$root/tests/make_test_certs.sh" "$dir/certs"
cd "$dir"
if ! PYTHONPATH="$dir/site" PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 \
    "$root/tests/python_package_test.py" --root "$root" --dir "$dir" -v; then
  echo "--- logs ---"; tail -n 30 "$dir"/*.log; exit 1
fi
