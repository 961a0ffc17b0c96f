// RMSNorm forward and backward for the CPU reference engine (formulas and
// evaluation order in rmsnorm.h). One row at a time: the row is read into
// fp32 scratch first, so outputs may alias inputs of the same dtype.
#include "worker/engine/cpu/rmsnorm.h"

#include <cmath>
#include <vector>

#include "common/status_macros.h"
#include "worker/engine/cpu/tensor_access.h"
#include "worker/ops/op_checks.h"

namespace tessera {
namespace cpu {
namespace {

void LoadRange(const TensorDesc& t, int64_t offset, int64_t count, float* dst) {
  for (int64_t j = 0; j < count; ++j) dst[j] = Load(t, offset + j);
}

}  // namespace

absl::Status RmsNormForward(const TensorDesc& x, const TensorDesc& weight, float eps,
                            const TensorDesc& out, const TensorDesc& rstd) {
  RETURN_IF_ERROR(CheckRmsNormForwardArgs(x, weight, eps, out, rstd));
  const int64_t tokens = x.shape[0], h = x.shape[1];
  thread_local std::vector<float> w, row;
  w.resize(h);
  row.resize(h);
  LoadRange(weight, 0, h, w.data());
  float* rstd_out = rstd.As<float>();
  for (int64_t t = 0; t < tokens; ++t) {
    LoadRange(x, t * h, h, row.data());
    float sum_sq = 0.0f;
    for (int64_t j = 0; j < h; ++j) sum_sq += row[j] * row[j];
    const float r = 1.0f / std::sqrt(sum_sq / static_cast<float>(h) + eps);
    rstd_out[t] = r;
    for (int64_t j = 0; j < h; ++j) Store(out, t * h + j, (row[j] * r) * w[j]);
  }
  return absl::OkStatus();
}

absl::Status RmsNormBackward(const TensorDesc& grad_out, const TensorDesc& x,
                             const TensorDesc& weight, const TensorDesc& rstd,
                             const TensorDesc& grad_x, bool accumulate_grad_x,
                             const TensorDesc& grad_weight) {
  RETURN_IF_ERROR(CheckRmsNormBackwardArgs(grad_out, x, weight, rstd, grad_x, grad_weight));
  const int64_t tokens = x.shape[0], h = x.shape[1];
  thread_local std::vector<float> w, xr, dy;
  w.resize(h);
  xr.resize(h);
  dy.resize(h);
  LoadRange(weight, 0, h, w.data());
  const float* rstd_in = rstd.As<const float>();
  float* gw = grad_weight.As<float>();
  for (int64_t t = 0; t < tokens; ++t) {
    LoadRange(x, t * h, h, xr.data());
    LoadRange(grad_out, t * h, h, dy.data());
    const float r = rstd_in[t];
    float dot = 0.0f;
    for (int64_t j = 0; j < h; ++j) {
      dot += w[j] * dy[j] * xr[j];
      gw[j] += dy[j] * xr[j] * r;
    }
    const float c = r * r * r * dot / static_cast<float>(h);
    for (int64_t j = 0; j < h; ++j) {
      float dx = r * (w[j] * dy[j]) - xr[j] * c;
      if (accumulate_grad_x) dx += Load(grad_x, t * h + j);
      Store(grad_x, t * h + j, dx);
    }
  }
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace tessera
