// RoPE forward and backward for the CPU engine (see rope.h).
#include "worker/engine/cpu/rope.h"

#include <cmath>
#include <vector>

#include "worker/engine/cpu/tensor_access.h"

namespace tessera {
namespace cpu {
namespace {

// direction +1 rotates by +angle (forward), -1 by -angle (backward).
absl::Status Rotate(const TensorDesc& qkv, float theta, float direction) {
  if (absl::Status s = CheckRank("qkv", qkv, 5); !s.ok()) return s;
  if (absl::Status s = CheckDType("qkv", qkv, {DType::kBFloat16}); !s.ok()) return s;
  const int64_t batch = qkv.shape[0], seq = qkv.shape[1], heads = qkv.shape[3], hd = qkv.shape[4];
  if (qkv.shape[2] != 3) return absl::InvalidArgumentError("qkv: dim 2 must be 3 (q, k, v)");
  if (hd % 2 != 0) return absl::InvalidArgumentError("qkv: head dim must be even");
  const int64_t half = hd / 2;
  std::vector<float> inv_freq(half);
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[i] = powf(theta, -2.0f * static_cast<float>(i) / static_cast<float>(hd));
  }
  uint16_t* p = static_cast<uint16_t*>(qkv.data);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t s = 0; s < seq; ++s) {
      for (int64_t i = 0; i < half; ++i) {
        const float angle = static_cast<float>(s) * inv_freq[i];
        const float c = cosf(angle), sn = direction * sinf(angle);
        for (int64_t part = 0; part < 2; ++part) {  // q and k
          for (int64_t h = 0; h < heads; ++h) {
            uint16_t* row = p + (((b * seq + s) * 3 + part) * heads + h) * hd;
            const float x1 = Bf16ToFloat(row[i]), x2 = Bf16ToFloat(row[i + half]);
            row[i] = FloatToBf16(x1 * c - x2 * sn);
            row[i + half] = FloatToBf16(x2 * c + x1 * sn);
          }
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RopeForward(const TensorDesc& qkv, float theta) { return Rotate(qkv, theta, 1.0f); }
absl::Status RopeBackward(const TensorDesc& grad_qkv, float theta) {
  return Rotate(grad_qkv, theta, -1.0f);
}

}  // namespace cpu
}  // namespace tessera
