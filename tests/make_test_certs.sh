#!/usr/bin/env bash
# Test-only: makes a throwaway cluster CA, one certificate for loopback
# (127.0.0.1 / localhost, usable as server and client certificate, as the
# coordinator and workers need), and two tokens, in DIR:
#   ca.pem, node.pem, node.key, user.token, worker.token
# Also a second CA and a certificate from it (rogue.pem / rogue.key) that
# the cluster must not trust.
set -euo pipefail
dir="$1"
mkdir -p "$dir"
cd "$dir"
quiet() { "$@" >/dev/null 2>&1 || { echo "make_test_certs: $* failed" >&2; "$@"; exit 1; }; }
ext="subjectAltName=IP:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth,clientAuth
basicConstraints=CA:FALSE"
make_ca() {  # NAME
  quiet openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=$1" \
    -keyout "$1-ca.key" -out "$1-ca.pem"
}
make_cert() {  # CA NAME
  quiet openssl req -newkey rsa:2048 -nodes -subj "/CN=$2" -keyout "$2.key" -out "$2.csr"
  printf '%s\n' "$ext" > "$2.ext"
  quiet openssl x509 -req -in "$2.csr" -CA "$1-ca.pem" -CAkey "$1-ca.key" -CAcreateserial \
    -days 2 -extfile "$2.ext" -out "$2.pem"
}
make_ca cluster
make_cert cluster node
make_ca other
make_cert other rogue
cp cluster-ca.pem ca.pem
openssl rand -hex 24 > user.token
openssl rand -hex 24 > worker.token
chmod 600 ./*.key ./*.token
