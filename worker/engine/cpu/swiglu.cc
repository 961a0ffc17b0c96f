// SwiGLU forward and backward for the CPU reference engine (formulas in
// swiglu.h).
#include "worker/engine/cpu/swiglu.h"

#include <cmath>
#include <cstdint>

#include "common/status_macros.h"
#include "worker/engine/cpu/tensor_access.h"
#include "worker/ops/op_checks.h"

namespace tessera {
namespace cpu {
absl::Status SwiGluForward(const TensorDesc& gate_up, const TensorDesc& out) {
  RETURN_IF_ERROR(CheckSwiGluForwardArgs(gate_up, out));
  const int64_t tokens = gate_up.shape[0], f = gate_up.shape[1] / 2;
  const uint16_t* in = gate_up.As<const uint16_t>();
  uint16_t* y = out.As<uint16_t>();
  for (int64_t t = 0; t < tokens; ++t) {
    const uint16_t* gate = in + t * 2 * f;
    const uint16_t* up = gate + f;
    for (int64_t j = 0; j < f; ++j) {
      const float g = Bf16ToFloat(gate[j]), u = Bf16ToFloat(up[j]);
      y[t * f + j] = FloatToBf16(g / (1.0f + std::exp(-g)) * u);
    }
  }
  return absl::OkStatus();
}

absl::Status SwiGluBackward(const TensorDesc& grad_out, const TensorDesc& gate_up,
                            const TensorDesc& grad_gate_up) {
  RETURN_IF_ERROR(CheckSwiGluBackwardArgs(grad_out, gate_up, grad_gate_up));
  const int64_t tokens = gate_up.shape[0], f = gate_up.shape[1] / 2;
  const uint16_t* in = gate_up.As<const uint16_t>();
  const uint16_t* dy = grad_out.As<const uint16_t>();
  uint16_t* grad = grad_gate_up.As<uint16_t>();
  for (int64_t t = 0; t < tokens; ++t) {
    const uint16_t* gate = in + t * 2 * f;
    const uint16_t* up = gate + f;
    uint16_t* d_gate = grad + t * 2 * f;
    uint16_t* d_up = d_gate + f;
    for (int64_t j = 0; j < f; ++j) {
      const float g = Bf16ToFloat(gate[j]), u = Bf16ToFloat(up[j]);
      const float dyj = Bf16ToFloat(dy[t * f + j]);
      const float e = std::exp(-g);
      const float sig = 1.0f / (1.0f + e);
      const float silu = g / (1.0f + e);
      d_gate[j] = FloatToBf16(dyj * u * (sig * (1.0f + g * (1.0f - sig))));
      d_up[j] = FloatToBf16(dyj * silu);
    }
  }
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace tessera
