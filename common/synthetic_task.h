// Synthetic tasks a small model visibly learns, as byte-level tokens:
//   ADDITION: lines "a+b=c\n", operands of 1..max_digits digits (default 3);
//             the answer is determined by the prompt, so the loss on it falls
//             well below the entropy of random digits.
//   COPY:     lines "<digits>|<same digits>\n", 1..max_digits digits (default 8).
// Generated deterministically from the seed with SplitMix64 (the exact
// procedure is in synthetic_task.cc), never with std:: distributions, whose
// output differs between standard libraries.
#ifndef TESSERA_COMMON_SYNTHETIC_TASK_H_
#define TESSERA_COMMON_SYNTHETIC_TASK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/spec_limits.h"
#include "proto/tessera/v1/job.pb.h"

namespace tessera {

// Exactly num_tokens tokens in [0, 256). INVALID_ARGUMENT for num_tokens <= 0
// or above kMaxSyntheticTokens (common/spec_limits.h; the tokens are held in
// memory), an unspecified task, or max_digits outside [0, 18].
absl::StatusOr<std::vector<uint32_t>> GenerateSyntheticTokens(const v1::SyntheticData& task,
                                                              uint64_t seed, int64_t num_tokens);
// Document starts for a synthetic stream of num_tokens tokens: 0, then
// documents whose lengths are drawn uniformly from [1, 2 x mean - 1]
// (SplitMix64 of the seed), so they average mean_document_tokens; the
// last one ends with the stream. For benchmarks of document masking, which
// need a realistic number of documents per sequence, not meaningful text.
// Requires num_tokens >= 0 and mean_document_tokens >= 1.
std::vector<uint64_t> SyntheticDocumentStarts(uint64_t seed, int64_t num_tokens,
                                              int64_t mean_document_tokens);

// The same stream, written as a token file (see formats/token_file.h).
// With mean_document_tokens > 0 the file records SyntheticDocumentStarts
// (version 3); with 0 it has no document index.
absl::Status WriteSyntheticTokenFile(const v1::SyntheticData& task, uint64_t seed,
                                     int64_t num_tokens, const std::string& out_path,
                                     int64_t mean_document_tokens = 0);

}  // namespace tessera

#endif  // TESSERA_COMMON_SYNTHETIC_TASK_H_
