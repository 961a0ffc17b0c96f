// SwiGLU of the CPU reference engine (the MLP's gated activation).
//
// gate_up [T, 2F] bf16 holds the gate g in columns [0, F) and the up
// projection u in columns [F, 2F) of each row. In fp32, per element:
//   sig(g)  = 1.0f / (1.0f + expf(-g)),   silu(g) = g / (1.0f + expf(-g))
//   Forward:  out [T, F] bf16 = silu(g) * u
//   Backward: from grad_out dy [T, F] bf16,
//             d_g = dy * u * silu'(g),  silu'(g) = sig(g) * (1 + g * (1 - sig(g)))
//             d_u = dy * silu(g)
//             written to grad_gate_up [T, 2F] bf16 in the same column layout.
// Results are rounded to bf16 (nearest even). Large negative g gives
// expf(-g) = inf and so silu = -0, d_g = 0: no NaN. The CUDA engine
// evaluates the same expressions (up to the last bits of its expf).
//
// Errors: INVALID_ARGUMENT naming the argument for a dtype other than bf16,
// an odd gate_up width, mismatched shapes or null data.
#ifndef TESSERA_WORKER_ENGINE_CPU_SWIGLU_H_
#define TESSERA_WORKER_ENGINE_CPU_SWIGLU_H_

#include "absl/status/status.h"
#include "worker/ops/tensor.h"

namespace tessera {
namespace cpu {

absl::Status SwiGluForward(const TensorDesc& gate_up, const TensorDesc& out);
absl::Status SwiGluBackward(const TensorDesc& grad_out, const TensorDesc& gate_up,
                            const TensorDesc& grad_gate_up);

}  // namespace cpu
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CPU_SWIGLU_H_
