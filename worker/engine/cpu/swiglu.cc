// SwiGLU forward and backward for the CPU engine (see swiglu.h).
#include "worker/engine/cpu/swiglu.h"

#include <cmath>

#include "worker/engine/cpu/tensor_access.h"

namespace tessera {
namespace cpu {

absl::Status SwiGluForward(const TensorDesc& gate_up, const TensorDesc& out) {
  if (absl::Status s = CheckRank("gate_up", gate_up, 2); !s.ok()) return s;
  const int64_t t_count = gate_up.shape[0], f = gate_up.shape[1] / 2;
  if (gate_up.shape[1] % 2 != 0) return absl::InvalidArgumentError("gate_up: width must be even");
  if (absl::Status s = CheckShape("out", out, Shape{t_count, f}); !s.ok()) return s;
  for (int64_t t = 0; t < t_count; ++t) {
    for (int64_t j = 0; j < f; ++j) {
      const float g = Load(gate_up, t * 2 * f + j), u = Load(gate_up, t * 2 * f + f + j);
      Store(out, t * f + j, g / (1.0f + std::exp(-g)) * u);
    }
  }
  return absl::OkStatus();
}

absl::Status SwiGluBackward(const TensorDesc& grad_out, const TensorDesc& gate_up,
                            const TensorDesc& grad_gate_up) {
  if (absl::Status s = CheckRank("gate_up", gate_up, 2); !s.ok()) return s;
  const int64_t t_count = gate_up.shape[0], f = gate_up.shape[1] / 2;
  if (absl::Status s = CheckShape("grad_out", grad_out, Shape{t_count, f}); !s.ok()) return s;
  if (absl::Status s = CheckShape("grad_gate_up", grad_gate_up, gate_up.shape); !s.ok()) return s;
  for (int64_t t = 0; t < t_count; ++t) {
    for (int64_t j = 0; j < f; ++j) {
      const float g = Load(gate_up, t * 2 * f + j), u = Load(gate_up, t * 2 * f + f + j);
      const float dy = Load(grad_out, t * f + j);
      const float sig = 1.0f / (1.0f + std::exp(-g));
      const float silu = g * sig;
      Store(grad_gate_up, t * 2 * f + j, dy * u * sig * (1.0f + g * (1.0f - sig)));
      Store(grad_gate_up, t * 2 * f + f + j, dy * silu);
    }
  }
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace tessera
