// SwiGLU forward and backward for the CPU reference engine (formulas in
// swiglu.h).
#include "worker/engine/cpu/swiglu.h"

#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/engine/cpu/tensor_access.h"

namespace tessera {
namespace cpu {
namespace {

absl::Status CheckBf16(const char* name, const TensorDesc& t, const Shape& shape) {
  RETURN_IF_ERROR(CheckDType(name, t, {DType::kBFloat16}));
  RETURN_IF_ERROR(CheckShape(name, t, shape));
  return CheckData(name, t);
}

// gate_up must be bf16 [T, 2F]; *f receives F.
absl::Status CheckGateUp(const TensorDesc& gate_up, int64_t* f) {
  RETURN_IF_ERROR(CheckDType("gate_up", gate_up, {DType::kBFloat16}));
  RETURN_IF_ERROR(CheckRank("gate_up", gate_up, 2));
  if (gate_up.shape[1] % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gate_up: width must be even (gate and up halves), got ", gate_up.shape.ToString()));
  }
  *f = gate_up.shape[1] / 2;
  return CheckData("gate_up", gate_up);
}

}  // namespace

absl::Status SwiGluForward(const TensorDesc& gate_up, const TensorDesc& out) {
  int64_t f = 0;
  RETURN_IF_ERROR(CheckGateUp(gate_up, &f));
  const int64_t tokens = gate_up.shape[0];
  RETURN_IF_ERROR(CheckBf16("out", out, Shape{tokens, f}));
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
  int64_t f = 0;
  RETURN_IF_ERROR(CheckGateUp(gate_up, &f));
  const int64_t tokens = gate_up.shape[0];
  RETURN_IF_ERROR(CheckBf16("grad_out", grad_out, Shape{tokens, f}));
  RETURN_IF_ERROR(CheckBf16("grad_gate_up", grad_gate_up, gate_up.shape));
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
