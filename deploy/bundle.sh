#!/usr/bin/env bash
# Builds a relocatable bundle of Tessera for GPU hosts: the binaries plus the
# shared libraries a typical GPU node lacks (gRPC, protobuf, Abseil, Gloo,
# OpenBLAS, yaml-cpp and their dependencies). The CUDA driver, cuBLASLt and
# NCCL are NOT carried (hundreds of MB, and the host's own must match its
# driver): the host provides them.
#
# Usage: deploy/bundle.sh OUT_DIR [extra bazel targets...]
# (tessera-sentencepiece rides beside tessera, which runs it for
# `tessera data tokenizer` and `data text --tokenizer`.)
# Produces OUT_DIR/bin/*, OUT_DIR/lib/*.so*, and OUT_DIR/env.sh, which sets
# LD_LIBRARY_PATH for the bundle and the usual CUDA library directories.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: deploy/bundle.sh OUT_DIR [targets...]}"
shift
targets=(//server:tessera-coordinator //worker:tessera-worker //client:tessera
         //client:tessera-sentencepiece "$@")
bazel build "${targets[@]}"
bin="$(bazel info bazel-bin 2>/dev/null)"

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for t in "${targets[@]}"; do
  path="${t#//}"
  path="${path/://}"
  cp -L "$bin/$path" "$out/bin/"
  strip --strip-debug "$out/bin/$(basename "$path")"
done

# Libraries that the GPU host provides itself (glibc family, the C++
# runtime, the driver and the CUDA libraries).
skip='^(linux-vdso|libc\.|libm\.|libdl\.|librt\.|libpthread\.|ld-linux|libstdc\+\+|libgcc_s|libcuda\.|libcublas|libnccl|libcudnn|libnvidia)'
for t in "${targets[@]}"; do
  path="${t#//}"
  path="${path/://}"
  # ldd the binary where Bazel built it: its rpath finds Bazel's own libraries.
  ldd "$bin/$path" | awk '/=> \// {print $1" "$3}' | while read -r name lib; do
    if [[ "$name" =~ $skip ]]; then continue; fi
    cp -Ln "$lib" "$out/lib/$name" 2>/dev/null || true
  done
done

cat > "$out/env.sh" <<'ENV'
# Source this on the GPU host: bundle libraries first, then the host's CUDA.
# TESSERA_CUDNN_LIB_DIR, when set, goes before all of them: the workers then
# load the cuDNN 9 found there (libcudnn.so.9 and its engine libraries, such
# as a pip wheel's nvidia/cudnn/lib) instead of the system's.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export LD_LIBRARY_PATH="${TESSERA_CUDNN_LIB_DIR:+$TESSERA_CUDNN_LIB_DIR:}$here/lib:/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$here/bin:$PATH"
ENV
du -sh "$out/bin" "$out/lib"
