#!/usr/bin/env bash
# A secured cluster seen from Python: certificates made with openssl, a TLS
# coordinator with tokens and two mTLS workers; the Python example client
# runs a job with the user token; a probe built from Debian's health and
# reflection protos sees SERVING and the services, then NOT_SERVING after
# SIGTERM while the coordinator drains, before its port closes.
set -euo pipefail
root="${TEST_SRCDIR}/${TEST_WORKSPACE:-tessera}"
source "$root/tests/shell_stack.sh" securepy
certs="$dir/certs"
bash "$root/tests/make_test_certs.sh" "$certs"
tls=(--tls_cert="$certs/node.pem" --tls_key="$certs/node.key" --tls_ca="$certs/ca.pem")
probe_tls=(--tls_ca "$certs/ca.pem")

start_coordinator "${tls[@]}" --user_tokens_file="$certs/user.token" \
  --worker_token_file="$certs/worker.token" --drain_grace_ms=3000
start_cpu_workers "${tls[@]}" --worker_token_file="$certs/worker.token"

/usr/bin/python3 "$root/tests/python_client.py" "$root" "$dir/stubs" "$addr" \
  --tls_ca "$certs/ca.pem" --token_file "$certs/user.token" || fail "python client"

probe() { /usr/bin/python3 "$root/tests/health_probe.py" "$dir/probe" "$@"; }
health=$(probe "$addr" check "" tessera.v1.Coordinator tessera.v1.WorkerRegistry \
  tessera.v1.Rendezvous "${probe_tls[@]}") || fail "health check"
echo "$health"
[ "$(grep -c ' SERVING$' <<<"$health")" -eq 4 ] || fail "not all SERVING: $health"

services=$(probe "$addr" services "${probe_tls[@]}") || fail "reflection"
echo "$services"
for s in tessera.v1.Coordinator tessera.v1.WorkerRegistry tessera.v1.Rendezvous \
         grpc.health.v1.Health; do
  grep -qx "$s" <<<"$services" || fail "reflection does not list $s"
done

# A worker's own server answers health checks too (it requires a client certificate).
worker_addr=$(grep -o 'serving on [^ ]*' "$dir/worker-0.log" | cut -d' ' -f3)
probe "$worker_addr" check "" tessera.v1.WorkerService "${probe_tls[@]}" \
  --tls_cert "$certs/node.pem" --tls_key "$certs/node.key" | grep -q "WorkerService SERVING" \
  || fail "worker health"

# The probe starts polling first, so that the drain's NOT_SERVING window
# (--drain_grace_ms) does not race the probe's own start-up.
probe "$addr" wait-not-serving "${probe_tls[@]}" >"$dir/not_serving.txt" 2>&1 &
prober=$!
for _ in $(seq 1 600); do
  grep -q '^polling$' "$dir/not_serving.txt" && break
  kill -0 "$prober" 2>/dev/null || break
  sleep 0.1
done
grep -q '^polling$' "$dir/not_serving.txt" || fail "health probe never polled: $(cat "$dir/not_serving.txt")"
kill -TERM "$coordinator"
wait "$prober" || fail "NOT_SERVING not seen before the port closed: $(cat "$dir/not_serving.txt")"
wait "$coordinator" || fail "coordinator exit status $?"
echo "secure python client test: OK"
