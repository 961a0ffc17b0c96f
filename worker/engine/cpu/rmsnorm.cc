// RMSNorm forward and backward for the CPU engine (see rmsnorm.h).
#include "worker/engine/cpu/rmsnorm.h"

#include <cmath>

#include "worker/engine/cpu/tensor_access.h"

namespace tessera {
namespace cpu {

absl::Status RmsNormForward(const TensorDesc& x, const TensorDesc& weight, float eps,
                            const TensorDesc& out, const TensorDesc& rstd) {
  if (absl::Status s = CheckRank("x", x, 2); !s.ok()) return s;
  const int64_t t_count = x.shape[0], h = x.shape[1];
  if (absl::Status s = CheckShape("weight", weight, Shape{h}); !s.ok()) return s;
  if (absl::Status s = CheckShape("out", out, Shape{t_count, h}); !s.ok()) return s;
  if (absl::Status s = CheckShape("rstd", rstd, Shape{t_count}); !s.ok()) return s;
  if (absl::Status s = CheckDType("rstd", rstd, {DType::kFloat32}); !s.ok()) return s;
  float* r = static_cast<float*>(rstd.data);
  for (int64_t t = 0; t < t_count; ++t) {
    float sum = 0.f;
    for (int64_t j = 0; j < h; ++j) {
      float v = Load(x, t * h + j);
      sum += v * v;
    }
    r[t] = 1.0f / std::sqrt(sum / static_cast<float>(h) + eps);
    for (int64_t j = 0; j < h; ++j) Store(out, t * h + j, Load(x, t * h + j) * r[t] * Load(weight, j));
  }
  return absl::OkStatus();
}

absl::Status RmsNormBackward(const TensorDesc& grad_out, const TensorDesc& x,
                             const TensorDesc& weight, const TensorDesc& rstd,
                             const TensorDesc& grad_x, bool accumulate_grad_x,
                             const TensorDesc& grad_weight) {
  if (absl::Status s = CheckRank("x", x, 2); !s.ok()) return s;
  const int64_t t_count = x.shape[0], h = x.shape[1];
  if (absl::Status s = CheckShape("grad_out", grad_out, Shape{t_count, h}); !s.ok()) return s;
  if (absl::Status s = CheckShape("grad_x", grad_x, Shape{t_count, h}); !s.ok()) return s;
  if (absl::Status s = CheckShape("grad_weight", grad_weight, Shape{h}); !s.ok()) return s;
  if (absl::Status s = CheckDType("grad_weight", grad_weight, {DType::kFloat32}); !s.ok()) return s;
  const float* r = static_cast<const float*>(rstd.data);
  float* gw = static_cast<float*>(grad_weight.data);
  for (int64_t t = 0; t < t_count; ++t) {
    float dot = 0.f;
    for (int64_t j = 0; j < h; ++j) {
      float dy = Load(grad_out, t * h + j), xv = Load(x, t * h + j);
      dot += Load(weight, j) * dy * xv;
      gw[j] += dy * xv * r[t];
    }
    const float coef = r[t] * r[t] * r[t] / static_cast<float>(h) * dot;
    for (int64_t j = 0; j < h; ++j) {
      float dx = r[t] * Load(weight, j) * Load(grad_out, t * h + j) - Load(x, t * h + j) * coef;
      if (accumulate_grad_x) dx += Load(grad_x, t * h + j);
      Store(grad_x, t * h + j, dx);
    }
  }
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace tessera
