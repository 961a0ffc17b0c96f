// Per-rank micro-batches from a token file or a synthetic task (see
// batch_source.h); a mixture of sources is mixture_batch_source.h's.
//
// The single token file keeps the sampler it had before mixtures existed,
// so old jobs, and their checkpoints, go on reading the same sequences:
// Sequence j of rank r at step s has global index g = r * micro_batch + j
// and starts at offset SplitMix-hash(seed, s, g) mod (tokens - seq_len). No
// state carries between calls, so step k reads the same data whether or not
// steps 0..k-1 ran, and a 1-rank run with micro-batch 2B reads exactly the
// union of what 2 ranks with micro-batch B read.
#include "worker/data/batch_source.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/splitmix.h"
#include "common/status_macros.h"
#include "common/synthetic_task.h"
#include "formats/token_file.h"
#include "worker/data/document_window.h"
#include "worker/data/mixture_batch_source.h"

namespace tessera {

absl::Status CheckReadBatchArgs(int micro_batch, int seq_len, absl::Span<const int32_t> inputs,
                                absl::Span<const int32_t> targets,
                                absl::Span<const int32_t> doc_starts, const char* index_name,
                                int64_t index) {
  const size_t want = static_cast<size_t>(micro_batch) * seq_len;
  if (inputs.size() != want || targets.size() != want ||
      (!doc_starts.empty() && doc_starts.size() != want)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch buffers must hold micro_batch_size x seq_len = ", want, " tokens, got ",
        inputs.size(), " inputs, ", targets.size(), " targets and ", doc_starts.size(),
        " document starts"));
  }
  if (index < 0) return absl::InvalidArgumentError(absl::StrCat(index_name, ": ", index, " < 0"));
  return absl::OkStatus();
}
namespace {

// Synthetic data is generated in memory. With num_tokens = 0 the task gets
// one token per token the job will read (steps x global batch x (seq_len+1)),
// at least kMinDefaultSyntheticTokens so short jobs still see varied lines
// and at most kMaxDefaultSyntheticTokens (64 MiB of uint32) so a long job
// cannot exhaust host memory; sequences are sampled at random offsets, so a
// job may read more than this without harm. The count depends only on the
// global batch, never on how it is split into ranks, so every sharding of
// one job sees the same token stream. An explicit num_tokens may go up to
// kMaxSyntheticTokens (common/spec_limits.h).
constexpr int64_t kMinDefaultSyntheticTokens = int64_t{1} << 20;
constexpr int64_t kMaxDefaultSyntheticTokens = int64_t{16} << 20;

int64_t DefaultSyntheticTokens(const v1::JobSpec& spec, int world_size) {
  const double wanted = static_cast<double>(std::max(spec.steps(), 1)) * world_size *
                        spec.data().micro_batch_size() * (spec.model().seq_len() + 1.0);
  if (wanted >= static_cast<double>(kMaxDefaultSyntheticTokens)) return kMaxDefaultSyntheticTokens;
  return std::max(kMinDefaultSyntheticTokens, static_cast<int64_t>(wanted));
}

class TokenBatchSource : public BatchSource {
 public:
  TokenBatchSource(const v1::JobSpec& spec, int rank, std::unique_ptr<TokenFile> file,
                   std::vector<uint32_t> memory)
      : seed_(spec.seed()),
        seq_len_(spec.model().seq_len()),
        micro_batch_(spec.data().micro_batch_size()),
        rank_(rank),
        document_masking_(spec.data().document_masking()),
        file_(std::move(file)),
        memory_(std::move(memory)) {}

  int64_t size() const { return file_ ? file_->size() : static_cast<int64_t>(memory_.size()); }
  uint32_t At(int64_t i) const { return file_ ? file_->Token(i) : memory_[i]; }

  absl::Status ReadBatch(int64_t step, absl::Span<int32_t> inputs, absl::Span<int32_t> targets,
                         absl::Span<int32_t> doc_starts) override {
    RETURN_IF_ERROR(CheckReadBatchArgs(micro_batch_, seq_len_, inputs, targets, doc_starts,
                                       "step", step));
    // Without masking every sequence is one document.
    if (!document_masking_) std::fill(doc_starts.begin(), doc_starts.end(), 0);
    // Offsets are uniform in [0, size - seq_len - 1]: the last sequence's
    // final target is the last token.
    const uint64_t span = static_cast<uint64_t>(size() - seq_len_);
    for (int j = 0; j < micro_batch_; ++j) {
      uint64_t global = static_cast<uint64_t>(rank_) * micro_batch_ + j;
      int64_t offset = static_cast<int64_t>(HashWords(seed_, 0x7e55e7a, step, global) % span);
      for (int t = 0; t < seq_len_; ++t) {
        inputs[j * seq_len_ + t] = static_cast<int32_t>(At(offset + t));
        targets[j * seq_len_ + t] = static_cast<int32_t>(At(offset + t + 1));
      }
      if (document_masking_) {  // the file has an index: checked at open
        const size_t row = static_cast<size_t>(j) * seq_len_;
        MarkDocuments(*file_, offset, targets.subspan(row, seq_len_),
                      doc_starts.empty() ? doc_starts : doc_starts.subspan(row, seq_len_));
      }
    }
    return absl::OkStatus();
  }

 private:
  uint64_t seed_;
  int seq_len_;
  int micro_batch_;
  int rank_;
  bool document_masking_;
  std::unique_ptr<TokenFile> file_;
  std::vector<uint32_t> memory_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<BatchSource>> OpenBatchSource(const v1::JobSpec& spec, int rank,
                                                             int world_size,
                                                             const std::string& trace_path) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " does not lie in a world of ", world_size));
  }
  if (spec.model().seq_len() < 1) {
    return absl::InvalidArgumentError("model.seq_len: must be >= 1");
  }
  if (spec.data().micro_batch_size() < 1) {
    return absl::InvalidArgumentError("data.micro_batch_size: must be >= 1");
  }
  if (!spec.data().sources().empty()) {
    return OpenMixtureBatchSource(spec, rank, world_size, trace_path);
  }
  std::unique_ptr<TokenFile> file;
  std::vector<uint32_t> memory;
  uint32_t max_token = 0;
  int64_t count = 0;
  if (spec.data().has_synthetic()) {
    if (spec.data().document_masking()) {
      return absl::InvalidArgumentError(
          "data.document_masking: needs token-file data with document starts; data.synthetic "
          "has no documents");
    }
    int64_t n = spec.data().synthetic().num_tokens();
    if (n == 0) n = DefaultSyntheticTokens(spec, world_size);
    absl::StatusOr<std::vector<uint32_t>> tokens =
        GenerateSyntheticTokens(spec.data().synthetic(), spec.seed(), n);
    if (!tokens.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("data.synthetic: ", tokens.status().message()));
    }
    memory = std::move(*tokens);
    for (uint32_t t : memory) max_token = std::max(max_token, t);
    count = static_cast<int64_t>(memory.size());
  } else if (!spec.data().token_file().empty()) {
    absl::StatusOr<std::unique_ptr<TokenFile>> opened = TokenFile::Open(spec.data().token_file());
    if (!opened.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("data.token_file: ", opened.status().message()));
    }
    file = std::move(*opened);
    if (spec.data().document_masking() && !file->has_document_index()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data.document_masking: data.token_file ", spec.data().token_file(),
          " records no document starts (write it with `tessera data text`, version 3)"));
    }
    max_token = file->max_token();
    count = file->size();
  } else {
    return absl::InvalidArgumentError("data: no source set");
  }
  if (static_cast<int64_t>(max_token) >= spec.model().vocab_size()) {
    return absl::InvalidArgumentError(absl::StrCat("data: token id ", max_token,
                                                   " does not fit model.vocab_size ",
                                                   spec.model().vocab_size()));
  }
  if (count < static_cast<int64_t>(spec.model().seq_len()) + 1) {
    return absl::InvalidArgumentError(absl::StrCat("data: ", count,
                                                   " tokens cannot fill one sequence of ",
                                                   spec.model().seq_len(), " + 1"));
  }
  return std::unique_ptr<BatchSource>(
      new TokenBatchSource(spec, rank, std::move(file), std::move(memory)));
}

}  // namespace tessera
