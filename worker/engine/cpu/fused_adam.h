// FusedAdam (AdamW) for the CPU engine, over a rank's table of sharded FP8
// parameters (Ops::CreateAdamPlan / GradSumSquares / ComputeGradScale /
// FusedAdam). One pass per shard reads grad, master, m and v and writes
// master, m, v and the re-quantized FP8 (or bf16) shard with its amax.
//   g = grad * grad_scale
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   m_hat = m / (1 - b1^t);  v_hat = v / (1 - b2^t)
//   master -= lr * (m_hat / (sqrt(v_hat) + eps) + wd * master)   (wd if enabled)
//   fp8 = encode(master * scale);  amax = max(amax, |master|)
// Empty shards (numel 0) are normal and do nothing.
#ifndef TESSERA_WORKER_ENGINE_CPU_FUSED_ADAM_H_
#define TESSERA_WORKER_ENGINE_CPU_FUSED_ADAM_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/ops/ops.h"

namespace tessera {
namespace cpu {

class CpuAdamPlan : public AdamPlan {
 public:
  explicit CpuAdamPlan(std::vector<AdamShard> shards) : shards_(std::move(shards)) {}
  const std::vector<AdamShard>& shards() const { return shards_; }

 private:
  std::vector<AdamShard> shards_;
};

// INVALID_ARGUMENT names the shard index and field that does not fit.
absl::StatusOr<std::unique_ptr<AdamPlan>> CreateAdamPlan(absl::Span<const AdamShard> shards);
absl::Status GradSumSquares(const AdamPlan& plan, float* sum_sq);
absl::Status ComputeGradScale(const float* sum_sq, const float* tokens, float max_norm,
                              float* grad_norm, float* grad_scale);
absl::Status FusedAdam(const AdamPlan& plan, const AdamHyper& hyper, const float* grad_scale);

}  // namespace cpu
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CPU_FUSED_ADAM_H_
