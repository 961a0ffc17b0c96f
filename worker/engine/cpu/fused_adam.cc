// Multi-tensor AdamW with FP8 re-quantization for the CPU engine (see
// fused_adam.h).
#include "worker/engine/cpu/fused_adam.h"

#include <algorithm>
#include <cmath>

#include "common/status_macros.h"
#include "worker/engine/cpu/tensor_access.h"
#include "worker/ops/op_checks.h"

namespace tessera {
namespace cpu {

absl::StatusOr<std::unique_ptr<AdamPlan>> CreateAdamPlan(absl::Span<const AdamShard> shards) {
  RETURN_IF_ERROR(CheckAdamShards(shards));
  return std::unique_ptr<AdamPlan>(
      new CpuAdamPlan(std::vector<AdamShard>(shards.begin(), shards.end())));
}

absl::Status GradSumSquares(const AdamPlan& plan, float* sum_sq) {
  RETURN_IF_ERROR(CheckGradSumSquaresArgs(sum_sq));
  double total = 0.0;
  for (const AdamShard& s : static_cast<const CpuAdamPlan&>(plan).shards()) {
    const float* g = static_cast<const float*>(s.grad.data);
    float partial = 0.f;
    for (int64_t i = 0; i < s.grad.NumElements(); ++i) partial += g[i] * g[i];
    total += partial;
  }
  *sum_sq = static_cast<float>(total);
  return absl::OkStatus();
}

absl::Status ComputeGradScale(const float* sum_sq, const float* tokens, float max_norm,
                              float* grad_norm, float* grad_scale) {
  RETURN_IF_ERROR(CheckComputeGradScaleArgs(sum_sq, tokens, grad_norm, grad_scale));
  const float count = std::max(*tokens, 1.0f);
  *grad_norm = std::sqrt(*sum_sq) / count;
  float clip = 1.0f;
  if (max_norm > 0.f) clip = std::min(1.0f, max_norm / (*grad_norm + 1e-6f));
  *grad_scale = clip / count;
  return absl::OkStatus();
}

absl::Status FusedAdam(const AdamPlan& plan, const AdamHyper& hp, const float* grad_scale) {
  RETURN_IF_ERROR(CheckFusedAdamArgs(hp, grad_scale));
  const AdamStepValues values =
      hp.step_values == nullptr
          ? StepValuesFor(hp)
          : AdamStepValues{hp.step_values[0], hp.step_values[1], hp.step_values[2]};
  const float lr = values.lr, bias1 = values.bias_correction1, bias2 = values.bias_correction2;
  const float g_scale = *grad_scale;
  for (const AdamShard& s : static_cast<const CpuAdamPlan&>(plan).shards()) {
    const int64_t n = s.master.NumElements();
    float* w = static_cast<float*>(s.master.data);
    const float* g = static_cast<const float*>(s.grad.data);
    float* m = static_cast<float*>(s.exp_avg.data);
    float* v = static_cast<float*>(s.exp_avg_sq.data);
    const bool fp8 = s.fp8.dtype == DType::kE4M3;
    const float scale = fp8 ? *s.fp8.scale : 1.0f;
    float amax = 0.f;
    for (int64_t i = 0; i < n; ++i) {
      const float gi = g[i] * g_scale;
      m[i] = hp.beta1 * m[i] + (1.0f - hp.beta1) * gi;
      v[i] = hp.beta2 * v[i] + (1.0f - hp.beta2) * gi * gi;
      const float update = (m[i] / bias1) / (std::sqrt(v[i] / bias2) + hp.eps);
      float wi = w[i];
      if (s.apply_weight_decay) wi -= lr * hp.weight_decay * wi;
      wi -= lr * update;
      w[i] = wi;
      amax = std::max(amax, std::fabs(wi));
      if (fp8) {
        static_cast<uint8_t*>(s.fp8.data)[i] = EncodeE4M3(wi * scale);
      } else {
        Store(s.fp8, i, wi);
      }
    }
    if (s.fp8.amax != nullptr) *s.fp8.amax = std::max(*s.fp8.amax, amax);
    if (fp8 && s.fp8.scale_inv != nullptr) *s.fp8.scale_inv = 1.0f / scale;
  }
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace tessera
