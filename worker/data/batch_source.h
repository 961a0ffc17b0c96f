// Where a rank's training tokens come from. Each rank reads its own
// micro-batches, chosen deterministically from (seed, step, rank): resuming
// at step k reads exactly what an unbroken run reads at step k. With
// data.document_masking the same tokens come with their documents
// (worker/data/document_window.h); the data order does not change.
#ifndef TESSERA_WORKER_DATA_BATCH_SOURCE_H_
#define TESSERA_WORKER_DATA_BATCH_SOURCE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/tessera/v1/job.pb.h"
#include "worker/data/ignore_index.h"

namespace tessera {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Fills inputs and targets, each [micro_batch_size * seq_len] host int32,
  // for this rank at `step`. targets[i] is the token after inputs[i], or
  // kIgnoreIndex where no loss should be taken (under document masking: the
  // target that would predict a document's first token). doc_starts is
  // empty (not wanted) or as long as inputs: [micro_batch_size, seq_len],
  // each row attention's document starts for its sequence
  // (document_window.h), all zeros without document masking.
  virtual absl::Status ReadBatch(int64_t step, absl::Span<int32_t> inputs,
                                 absl::Span<int32_t> targets, absl::Span<int32_t> doc_starts) = 0;
  // The same without attention's document starts.
  absl::Status ReadBatch(int64_t step, absl::Span<int32_t> inputs, absl::Span<int32_t> targets) {
    return ReadBatch(step, inputs, targets, {});
  }
};

// The checks every ReadBatch makes first: inputs and targets each hold
// micro_batch x seq_len tokens, doc_starts none or as many, and `index`
// (named `index_name`: the step, or a validation batch) is not negative.
// INVALID_ARGUMENT otherwise.
absl::Status CheckReadBatchArgs(int micro_batch, int seq_len, absl::Span<const int32_t> inputs,
                                absl::Span<const int32_t> targets,
                                absl::Span<const int32_t> doc_starts, const char* index_name,
                                int64_t index);

// Opens the job's training data (token file, synthetic task or a mixture
// of sources, worker/data/mixture_batch_source.h) for one rank.
// INVALID_ARGUMENT if the data cannot serve the spec (file missing or
// malformed, token id >= vocab_size, fewer tokens than one sequence, or
// data.document_masking with synthetic data or a file without a document
// index).
// `trace_path` (mixtures only; empty: none) names a file that gets one line
// per sequence read, as OpenMixtureBatchSource describes.
absl::StatusOr<std::unique_ptr<BatchSource>> OpenBatchSource(const v1::JobSpec& spec, int rank,
                                                             int world_size,
                                                             const std::string& trace_path = "");

}  // namespace tessera

#endif  // TESSERA_WORKER_DATA_BATCH_SOURCE_H_
