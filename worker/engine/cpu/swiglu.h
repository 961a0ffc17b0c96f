// SwiGLU for the CPU engine. gate_up [T, 2F] bf16 holds gate in columns
// [0, F) and up in [F, 2F); out = silu(g) * u with silu(g) = g / (1 + e^-g)
// in fp32, rounded to bf16. Backward: d_g = dy * u * silu'(g),
// d_u = dy * silu(g), silu'(g) = s(g) (1 + g (1 - s(g))), s the sigmoid.
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
