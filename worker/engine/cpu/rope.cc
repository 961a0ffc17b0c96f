// RoPE forward and backward for the CPU reference engine (formulas and the
// grouped-query layout in rope.h). Both directions share one rotation
// routine: the backward is the forward with the sine negated.
#include "worker/engine/cpu/rope.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "common/status_macros.h"
#include "worker/engine/cpu/tensor_access.h"
#include "worker/ops/op_checks.h"

namespace tessera {
namespace cpu {
namespace {

// Rotates the query and key heads of `name` in place by +angle (sign = +1,
// the forward) or -angle (sign = -1, the backward).
absl::Status Rotate(const char* name, const TensorDesc& qkv, int n_kv_heads, float theta,
                    float sign) {
  ASSIGN_OR_RETURN(const AttentionDims d, CheckRopeArgs(name, qkv, n_kv_heads, theta));
  const int64_t batch = d.batch, seq = d.seq, heads = d.heads, hd = d.head_dim;
  const int64_t all_heads = heads + 2 * int64_t{n_kv_heads};
  const int64_t half = hd / 2;
  thread_local std::vector<float> inv_freq, cos_s, sin_s;
  inv_freq.resize(half);
  cos_s.resize(half);
  sin_s.resize(half);
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[i] = powf(theta, -2.0f * static_cast<float>(i) / static_cast<float>(hd));
  }
  uint16_t* base = qkv.As<uint16_t>();
  for (int64_t s = 0; s < seq; ++s) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(s) * inv_freq[i];
      cos_s[i] = cosf(angle);
      sin_s[i] = sign * sinf(angle);
    }
    for (int64_t b = 0; b < batch; ++b) {
      // The query and key heads of token (b, s) are its first nh + nkv
      // rows of hd.
      uint16_t* rows = base + (b * seq + s) * all_heads * hd;
      for (int64_t r = 0; r < heads + n_kv_heads; ++r) {
        uint16_t* row = rows + r * hd;
        for (int64_t i = 0; i < half; ++i) {
          const float x1 = Bf16ToFloat(row[i]), x2 = Bf16ToFloat(row[i + half]);
          row[i] = FloatToBf16(x1 * cos_s[i] - x2 * sin_s[i]);
          row[i + half] = FloatToBf16(x2 * cos_s[i] + x1 * sin_s[i]);
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RopeForward(const TensorDesc& qkv, int n_kv_heads, float theta) {
  return Rotate("qkv", qkv, n_kv_heads, theta, 1.0f);
}

absl::Status RopeBackward(const TensorDesc& grad_qkv, int n_kv_heads, float theta) {
  return Rotate("grad_qkv", grad_qkv, n_kv_heads, theta, -1.0f);
}

}  // namespace cpu
}  // namespace tessera
