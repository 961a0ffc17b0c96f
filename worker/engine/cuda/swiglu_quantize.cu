// SwiGLU that writes FP8 directly, for the FP8 down projection's input and
// the FP8 gate/up projection's output gradient. Each is the SwiGLU op
// followed by QuantizeTranspose of its bf16 result, bit for bit, but the
// bf16 tensor never goes to memory: the tiled cast-transpose
// (fp8_cast_transpose.cuh) takes its values from a producer that computes
// SwiGLU (or its gradient) in registers, rounds each value to bf16 as the
// SwiGLU op would store it, and hands it on to be scaled and encoded. That
// saves writing and re-reading [T, F] bf16 in forward and [T, 2F] bf16 in
// backward per block.
//
// The fused kernels need T a multiple of 64, F a multiple of 64 (forward) or
// 32 (backward: 2F columns), and 16-byte aligned bf16 inputs; other shapes
// return false from the launchers and CudaOps runs the two ops instead. The
// backward computes both halves of the gradient from one read of its inputs
// when F is a multiple of 64 (a block owns a tile of each half), and one
// half per block otherwise.
//
// Determinism: the values are elementwise; blocks combine only amax, by an
// atomic maximum, which is the same in any order.

#include <cuda_bf16.h>

#include <cstdint>

#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/device_util.cuh"
#include "worker/engine/cuda/fp8_cast_transpose.cuh"
#include "worker/engine/cuda/kernels.h"
#include "worker/engine/cuda/swiglu_math.cuh"

namespace tessera {
namespace cuda {
namespace {

// ---- producers ---------------------------------------------------------------

__device__ __forceinline__ float RoundToBf16(float v) {
  return __bfloat162float(__float2bfloat16_rn(v));
}

// out[row, col..col+8) = silu(gate) * up for gate_up [T, 2F] (gate in
// columns [0, F), up in [F, 2F)).
struct SwiGluForwardValues {
  const __nv_bfloat16* gate_up;
  int64_t f;
  __device__ void operator()(int64_t row, int64_t col, float (&v)[8]) const {
    float g[8], u[8];
    LoadBf16x8AsFloats(gate_up + row * 2 * f + col, g);
    LoadBf16x8AsFloats(gate_up + row * 2 * f + f + col, u);
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = RoundToBf16(SiluTimes(g[k], u[k]));
  }
};

// Both halves at once: d_gate for columns [col, col + 8) and d_up for the
// same columns of the up half, from one load of gate, up and grad_out.
struct SwiGluBackwardPairValues {
  const __nv_bfloat16* grad_out;  // [T, F]
  const __nv_bfloat16* gate_up;   // [T, 2F]
  int64_t f;
  __device__ void operator()(int64_t row, int64_t col, float (&d_gate)[8],
                             float (&d_up)[8]) const {
    float g[8], u[8], d[8];
    LoadBf16x8AsFloats(gate_up + row * 2 * f + col, g);
    LoadBf16x8AsFloats(gate_up + row * 2 * f + f + col, u);
    LoadBf16x8AsFloats(grad_out + row * f + col, d);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      float d_g, d_u;
      SwiGluGrads(d[k], g[k], u[k], &d_g, &d_u);
      d_gate[k] = RoundToBf16(d_g);
      d_up[k] = RoundToBf16(d_u);
    }
  }
};

// dgu[row, col..col+8) of the gradient [T, 2F], one half at a time (for F
// not a multiple of 64): d_gate for col < F, d_up for col >= F (8 columns
// never straddle F, a multiple of 8). It computes both and keeps one.
struct SwiGluBackwardValues {
  SwiGluBackwardPairValues pair;
  __device__ void operator()(int64_t row, int64_t col, float (&v)[8]) const {
    const bool up = col >= pair.f;
    float d_gate[8], d_up[8];
    pair(row, up ? col - pair.f : col, d_gate, d_up);
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = up ? d_up[k] : d_gate[k];
  }
};

bool Bf16Aligned(const TensorDesc& t) {
  return t.dtype == DType::kBFloat16 && reinterpret_cast<uintptr_t>(t.data) % 16 == 0;
}

}  // namespace

// ---- launchers -------------------------------------------------------------

absl::StatusOr<bool> LaunchSwiGluForwardQuantize(const TensorDesc& gate_up, const TensorDesc& out,
                                                 const TensorDesc& out_t, cudaStream_t stream) {
  const int64_t t = gate_up.shape[0], f = gate_up.shape[1] / 2;
  if (!Bf16Aligned(gate_up) || f % 8 != 0 || !FitsCastTransposeTiles(t, f, out, out_t)) {
    return false;
  }
  CUDA_RETURN_IF_ERROR(LaunchCastTransposeTiled(
      SwiGluForwardValues{static_cast<const __nv_bfloat16*>(gate_up.data), f}, t, f, out, out_t,
      stream));
  return true;
}

absl::StatusOr<bool> LaunchSwiGluBackwardQuantize(const TensorDesc& grad_out,
                                                  const TensorDesc& gate_up, const TensorDesc& dgu,
                                                  const TensorDesc& dgu_t, cudaStream_t stream) {
  const int64_t t = gate_up.shape[0], f = gate_up.shape[1] / 2;
  if (!Bf16Aligned(gate_up) || !Bf16Aligned(grad_out) || f % 8 != 0 ||
      !FitsCastTransposeTiles(t, 2 * f, dgu, dgu_t)) {
    return false;
  }
  const auto* d = static_cast<const __nv_bfloat16*>(grad_out.data);
  const auto* gu = static_cast<const __nv_bfloat16*>(gate_up.data);
  if (f % kCastTransposeTile == 0) {  // a tile of each half per block, one read of the inputs
    CUDA_RETURN_IF_ERROR(LaunchCastTransposeTiledPairs(SwiGluBackwardPairValues{d, gu, f}, t,
                                                       2 * f, dgu, dgu_t, stream));
  } else {
    CUDA_RETURN_IF_ERROR(
        LaunchCastTransposeTiled(SwiGluBackwardValues{{d, gu, f}}, t, 2 * f, dgu, dgu_t, stream));
  }
  return true;
}

}  // namespace cuda
}  // namespace tessera
