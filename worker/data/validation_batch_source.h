// The held-out data of DataConfig.validation, read for evaluations. Unlike
// training batches, which are sampled at random offsets per step, an
// evaluation reads the file front to back in whole sequences, the same ones
// every time, so that successive validation losses compare like with like:
// ReadBatch(i) gives this rank's share of evaluation batch i.
//
// Sharded like training: sequence j of rank r in batch i is global sequence
// (i * world_size + r) * micro_batch_size + j, which starts at token
// (that index mod the file's whole sequences) * seq_len. A 1-rank run with
// micro-batch 2B therefore reads exactly the union of what 2 ranks with
// micro-batch B read.
#ifndef TESSERA_WORKER_DATA_VALIDATION_BATCH_SOURCE_H_
#define TESSERA_WORKER_DATA_VALIDATION_BATCH_SOURCE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/tessera/v1/job.pb.h"
#include "worker/data/batch_source.h"

namespace tessera {

// One set of held-out data an evaluation scores on its own.
struct ValidationSet {
  // The DataSource.path of a validation source; empty for the single
  // data.validation.token_file (which reports no per-source loss).
  std::string source_path;
  std::unique_ptr<BatchSource> batches;
};

// The validation sets of the spec for one rank: the token file, or one per
// data.validation.sources entry in order. A source is read like the token
// file, but in whole sequences of seq_len + 1 tokens that do not overlap
// (worker/data/source_sequences.h): sequence j of rank r in batch i is the
// source's sequence ((i * world_size + r) * micro_batch_size + j) mod its
// sequence count. Errors as OpenValidationBatchSource's, naming
// data.validation.sources[i] for a source.
absl::StatusOr<std::vector<ValidationSet>> OpenValidationSets(const v1::JobSpec& spec, int rank,
                                                              int world_size);

// Opens data.validation.token_file for one rank of `world_size`.
// INVALID_ARGUMENT naming data.validation.token_file if it is missing or
// malformed, holds an id >= model.vocab_size, or has fewer than seq_len + 1
// tokens; FAILED_PRECONDITION if the spec has no validation section.
absl::StatusOr<std::unique_ptr<BatchSource>> OpenValidationBatchSource(const v1::JobSpec& spec,
                                                                       int rank, int world_size);

}  // namespace tessera

#endif  // TESSERA_WORKER_DATA_VALIDATION_BATCH_SOURCE_H_
