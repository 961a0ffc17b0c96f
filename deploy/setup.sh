#!/usr/bin/env bash
# Installs every Debian package that building and testing Tessera needs.
# Idempotent: packages already present are skipped, so it is safe to re-run
# (CI calls it first on every run). Needs root or sudo.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap
  openjdk-17-jdk-headless
  g++
  libgrpc++-dev protobuf-compiler-grpc
  libprotobuf-dev protobuf-compiler
  libabsl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libgloo-dev
  libopenblas-dev
  libssl-dev
  libyaml-cpp-dev
  libsqlite3-dev
  nlohmann-json3-dev
  python3-grpcio python3-grpc-tools
  python3-pip python3-venv  # tests/python_package_test installs client/python with pip, offline
  python3-pandas            # tessera_client.records_to_frame, tested
  python3-sentencepiece     # bench/tokenize_bench.sh: the one-core anchor
  openssl grpc-proto
  prometheus-cpp-dev libcpp-httplib-dev python3-prometheus-client python3-yaml
  libsentencepiece-dev
  clang-14 libclang-rt-14-dev libfuzzer-14-dev
  python3-numpy python3-torch
  chromium
  nginx  # the coordinator's TLS front (deploy/nginx/, tests/front_proxy_test); not started here
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# Packages that ship a service (nginx) would start it on install: Debian's
# policy-rc.d hook keeps every service stopped while these install, and a
# newly installed nginx is not enabled at boot either. The tests start
# their own nginx with their own configuration, on a free loopback port.
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
  $SUDO chmod 755 "$policy"
  made_policy=1
  trap '$SUDO rm -f "$policy"' EXIT
fi
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
if [ "$made_policy" -eq 1 ]; then $SUDO rm -f "$policy"; trap - EXIT; fi
if [[ " ${missing[*]} " == *" nginx "* ]] && command -v systemctl >/dev/null; then
  $SUDO systemctl disable nginx >/dev/null 2>&1 || true
fi
echo "setup: done"
