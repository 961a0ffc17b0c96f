// The FP8 statistics of one step (job.proto's Fp8Recipe.stats_interval_steps;
// README "Watching FP8"): for each block linear's weight, the input its
// forward GEMM quantizes to e4m3 and the output gradient its backward GEMMs
// quantize to e5m2, the tensor's amax, the scale it was encoded with, and
// how many of its values saturate at the format's maximum or underflow to
// zero (Ops::Fp8Stats, on the same input and scale as the real cast, so the
// counts are exact). The trainer measures each tensor beside its cast on a
// statistics step only; every other step queues nothing here.
//
// Everything lives in buffers allocated once by Create: per tensor, two
// int64 counts and two floats (amax, scale) in engine memory, mirrored in
// page-locked host memory that one CopyToHost per buffer fills at the end
// of the step. The counts are this rank's; the coordinator sums the ranks.
#ifndef TESSERA_WORKER_TRAINER_FP8_STEP_STATS_H_
#define TESSERA_WORKER_TRAINER_FP8_STEP_STATS_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/fp8_meta_layout.h"
#include "worker/ops/ops.h"
#include "worker/trainer/trainer.h"

namespace tessera {

class Fp8StepStats {
 public:
  using Role = Fp8TensorReport::Role;

  static absl::StatusOr<std::unique_ptr<Fp8StepStats>> Create(Ops& ops, int n_layers);

  // Zeroes the counts and amaxes: the first thing a statistics step queues.
  absl::Status Begin(Ops& ops, Stream* stream);
  // Measures `in` (fp32 or bf16) as it is encoded to `format` with *scale
  // (engine memory): adds its amax and counts to the tensor's slot and
  // records the scale. A tensor measured twice in a step (it never is) would
  // add up.
  absl::Status Measure(Ops& ops, LinearId id, Role role, const TensorDesc& in, DType format,
                       const float* scale, Stream* stream);
  // Queues the copies of the step's figures to host memory.
  absl::Status CopyToHost(Ops& ops, Stream* stream);
  // After the stream is synchronised: every measured tensor, block by block,
  // in BlockLinear order, weight then input then gradient.
  std::vector<Fp8TensorReport> Read() const;

 private:
  static constexpr int kRoles = 3;
  Fp8StepStats() = default;
  int Index(LinearId id, Role role) const {
    return id.index() * kRoles + static_cast<int>(role);
  }

  int tensors_ = 0;
  std::unique_ptr<Buffer> counts_;       // [tensors_, 2] int64: saturated, underflowed
  std::unique_ptr<Buffer> values_;       // [tensors_, 2] fp32: amax, scale
  std::unique_ptr<Buffer> host_counts_;  // page-locked copies of the two above
  std::unique_ptr<Buffer> host_values_;
  // Host-side, set by Measure: elements counted and format, per tensor (0:
  // not measured this step).
  std::vector<int64_t> elements_;
  std::vector<DType> formats_;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_TRAINER_FP8_STEP_STATS_H_
