// RoPE forward and backward for the CPU reference engine (formulas in
// rope.h). Both directions share one rotation routine: the backward is the
// forward with the sine negated.
#include "worker/engine/cpu/rope.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/engine/cpu/tensor_access.h"

namespace tessera {
namespace cpu {
namespace {

// Rotates the q and k parts of `name` in place by +angle (sign = +1, the
// forward) or -angle (sign = -1, the backward).
absl::Status Rotate(const char* name, const TensorDesc& qkv, float theta, float sign) {
  RETURN_IF_ERROR(CheckDType(name, qkv, {DType::kBFloat16}));
  RETURN_IF_ERROR(CheckRank(name, qkv, 5));
  const int64_t batch = qkv.shape[0], seq = qkv.shape[1], heads = qkv.shape[3], hd = qkv.shape[4];
  if (qkv.shape[2] != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": expected [B, S, 3, nh, hd] (q, k, v), got ", qkv.shape.ToString()));
  }
  if (hd < 2 || hd % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": head dim must be even and positive, got ", hd));
  }
  if (!(theta > 0.0f) || std::isinf(theta)) {
    return absl::InvalidArgumentError(absl::StrCat("theta: must be finite and > 0, got ", theta));
  }
  RETURN_IF_ERROR(CheckData(name, qkv));
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
      // q and k of token (b, s) are 2 * heads consecutive rows of hd.
      uint16_t* rows = base + (b * seq + s) * 3 * heads * hd;
      for (int64_t r = 0; r < 2 * heads; ++r) {
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

absl::Status RopeForward(const TensorDesc& qkv, float theta) {
  return Rotate("qkv", qkv, theta, 1.0f);
}

absl::Status RopeBackward(const TensorDesc& grad_qkv, float theta) {
  return Rotate("grad_qkv", grad_qkv, theta, -1.0f);
}

}  // namespace cpu
}  // namespace tessera
