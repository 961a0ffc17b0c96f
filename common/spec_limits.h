// Upper bounds on every JobSpec field that sizes memory, a loop or a
// message: string lengths, step counts, model dimensions, tokens per
// micro-batch and generated synthetic tokens. The coordinator refuses a spec
// beyond them at submit time, and a worker refuses one again before it
// allocates anything, so no input can make either process allocate without
// bound or overflow an integer. The values are documented in job.proto and
// the README; they are far above any job Tessera runs today.
#ifndef TESSERA_COMMON_SPEC_LIMITS_H_
#define TESSERA_COMMON_SPEC_LIMITS_H_

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "proto/tessera/v1/job.pb.h"

namespace tessera {

// Strings.
inline constexpr int64_t kMaxJobNameBytes = 256;
inline constexpr int64_t kMaxPathBytes = 4096;  // data.token_file, checkpoint.dir

// Sources of one mixture (data.sources, data.validation.sources); each
// path is at most kMaxPathBytes.
inline constexpr int64_t kMaxDataSources = 64;

// Step counts: steps, optimizer.warmup_steps, checkpoint.interval_steps.
inline constexpr int64_t kMaxSteps = 10'000'000;

// Model dimensions.
inline constexpr int64_t kMaxVocabSize = int64_t{1} << 20;
inline constexpr int64_t kMaxDModel = int64_t{1} << 16;
inline constexpr int64_t kMaxFfnDim = int64_t{1} << 18;
inline constexpr int64_t kMaxLayers = 1024;
inline constexpr int64_t kMaxHeads = 1024;  // n_heads and n_kv_heads
inline constexpr int64_t kMaxSeqLen = int64_t{1} << 20;

// Tokens one rank processes per step (micro_batch_size x seq_len); also the
// largest useful loss_chunk_tokens.
inline constexpr int64_t kMaxTokensPerMicroBatch = int64_t{1} << 20;

// Step watchdog timeout (step_timeout_s): one week.
inline constexpr int64_t kMaxStepTimeoutSeconds = 7 * 24 * 3600;

// Automatic restarts of one job (max_restarts).
inline constexpr int64_t kMaxRestarts = 1000;

// fp8.shadow_gap_warn when the spec leaves it 0: the |FP8 - bf16| loss gap,
// in nats, on the held-out batch above which a shadow step warns. A
// healthy FP8 run tracks its bf16 shadow within a few hundredths of a nat
// (the recipes' published loss curves, and our own CPU and GPU runs); 0.1
// is several times that, so it flags a real divergence, not noise.
inline constexpr float kDefaultShadowGapWarn = 0.1f;
inline constexpr float kMaxShadowGapWarn = 100.f;

// fp8.shadow_batch_sequences when the spec leaves it 0: the shadow runs the
// first two sequences of each rank's held-out micro-batch (all of it when
// the micro-batch is smaller). Its forwards' cost grows with the sequences
// it runs (the bf16 weight casts and gathers do not); at the 221M model on an H100 (micro-batch 8 x 2048)
// the full batch cost 37 ms a shadow, which with statistics put the
// watching over its 1% budget at 100-step intervals. Two sequences
// of 2048 tokens are still 4096 scored tokens per rank.
inline constexpr int kDefaultShadowBatchSequences = 2;

// The sequences the shadow runs for fp8.shadow_batch_sequences
// `requested` and a micro-batch of `micro_batch_size` sequences.
inline int ShadowBatchSequences(int requested, int micro_batch_size) {
  if (requested > 0) return requested;
  return std::min(kDefaultShadowBatchSequences, micro_batch_size);
}

// Synthetic tokens a worker generates in memory (256 MiB as uint32).
inline constexpr int64_t kMaxSyntheticTokens = int64_t{1} << 26;

// OK, or INVALID_ARGUMENT naming the first field beyond its limit, the limit
// and the value, e.g. "steps: must be <= 10000000 (got 2147483647)".
// Lower bounds and consistency rules are the coordinator's validation.
absl::Status CheckSpecLimits(const v1::JobSpec& spec);

// INVALID_ARGUMENT "FIELD: must be at most MAX bytes (got N)" for a string
// longer than `max_bytes`; used for request fields outside the spec too.
absl::Status CheckStringLimit(absl::string_view field, absl::string_view value, int64_t max_bytes);

}  // namespace tessera

#endif  // TESSERA_COMMON_SPEC_LIMITS_H_
