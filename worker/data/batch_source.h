// Where a rank's training tokens come from. Each rank reads its own
// micro-batches, chosen deterministically from (seed, step, rank): resuming
// at step k reads exactly what an unbroken run reads at step k.
#ifndef TESSERA_WORKER_DATA_BATCH_SOURCE_H_
#define TESSERA_WORKER_DATA_BATCH_SOURCE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/tessera/v1/job.pb.h"

namespace tessera {

// Targets equal to this are ignored by the loss (padding, prompt tokens).
inline constexpr int32_t kIgnoreIndex = -100;

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Fills inputs and targets, each [micro_batch_size * seq_len] host int32,
  // for this rank at `step`. targets[i] is the token after inputs[i], or
  // kIgnoreIndex where no loss should be taken.
  virtual absl::Status ReadBatch(int64_t step, absl::Span<int32_t> inputs,
                                 absl::Span<int32_t> targets) = 0;
};

// The checks every ReadBatch makes first: inputs and targets each hold
// micro_batch x seq_len tokens, and `index` (named `index_name`: the step,
// or a validation batch) is not negative. INVALID_ARGUMENT otherwise.
absl::Status CheckReadBatchArgs(int micro_batch, int seq_len, absl::Span<const int32_t> inputs,
                                absl::Span<const int32_t> targets, const char* index_name,
                                int64_t index);

// Opens the job's training data (token file, synthetic task or a mixture
// of sources, worker/data/mixture_batch_source.h) for one rank.
// INVALID_ARGUMENT if the data cannot serve the spec (file missing or
// malformed, token id >= vocab_size, fewer tokens than one sequence).
// `trace_path` (mixtures only; empty: none) names a file that gets one line
// per sequence read, as OpenMixtureBatchSource describes.
absl::StatusOr<std::unique_ptr<BatchSource>> OpenBatchSource(const v1::JobSpec& spec, int rank,
                                                             int world_size,
                                                             const std::string& trace_path = "");

}  // namespace tessera

#endif  // TESSERA_WORKER_DATA_BATCH_SOURCE_H_
