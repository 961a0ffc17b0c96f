// Per-rank micro-batches from a token file or a synthetic task (see
// batch_source.h).
//
// Sequence j of rank r at step s has global index g = r * micro_batch + j
// and starts at offset SplitMix-hash(seed, s, g) mod (tokens - seq_len). No
// state carries between calls, so step k reads the same data whether or not
// steps 0..k-1 ran, and a 1-rank run with micro-batch 2B reads exactly the
// union of what 2 ranks with micro-batch B read.
#include "worker/data/batch_source.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/data/splitmix.h"
#include "worker/data/synthetic_task.h"
#include "worker/data/token_file.h"

namespace tessera {
namespace {

// Synthetic data is generated in memory: this many tokens unless the spec
// asks for a number.
constexpr int64_t kDefaultSyntheticTokens = 1 << 20;

class TokenBatchSource : public BatchSource {
 public:
  TokenBatchSource(const v1::JobSpec& spec, int rank, std::unique_ptr<TokenFile> file,
                   std::vector<uint32_t> memory)
      : seed_(spec.seed()),
        seq_len_(spec.model().seq_len()),
        micro_batch_(spec.data().micro_batch_size()),
        rank_(rank),
        file_(std::move(file)),
        memory_(std::move(memory)) {}

  int64_t size() const { return file_ ? file_->size() : static_cast<int64_t>(memory_.size()); }
  uint32_t At(int64_t i) const { return file_ ? file_->Token(i) : memory_[i]; }

  absl::Status ReadBatch(int64_t step, absl::Span<int32_t> inputs,
                         absl::Span<int32_t> targets) override {
    const size_t want = static_cast<size_t>(micro_batch_) * seq_len_;
    if (inputs.size() != want || targets.size() != want) {
      return absl::InvalidArgumentError(absl::StrCat("batch buffers must hold ", want, " tokens"));
    }
    const uint64_t span = static_cast<uint64_t>(size() - seq_len_);
    for (int j = 0; j < micro_batch_; ++j) {
      uint64_t global = static_cast<uint64_t>(rank_) * micro_batch_ + j;
      int64_t offset = static_cast<int64_t>(HashWords(seed_, 0x7e55e7a, step, global) % span);
      for (int t = 0; t < seq_len_; ++t) {
        inputs[j * seq_len_ + t] = static_cast<int32_t>(At(offset + t));
        targets[j * seq_len_ + t] = static_cast<int32_t>(At(offset + t + 1));
      }
    }
    return absl::OkStatus();
  }

 private:
  uint64_t seed_;
  int seq_len_;
  int micro_batch_;
  int rank_;
  std::unique_ptr<TokenFile> file_;
  std::vector<uint32_t> memory_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<BatchSource>> OpenBatchSource(const v1::JobSpec& spec, int rank,
                                                             int world_size) {
  if (rank < 0 || rank >= world_size) return absl::InvalidArgumentError("rank out of range");
  std::unique_ptr<TokenFile> file;
  std::vector<uint32_t> memory;
  uint32_t max_token = 0;
  int64_t count = 0;
  if (spec.data().has_synthetic()) {
    int64_t n = spec.data().synthetic().num_tokens();
    if (n == 0) n = kDefaultSyntheticTokens;
    absl::StatusOr<std::vector<uint32_t>> tokens =
        GenerateSyntheticTokens(spec.data().synthetic(), spec.seed(), n);
    if (!tokens.ok()) return tokens.status();
    memory = std::move(*tokens);
    for (uint32_t t : memory) max_token = std::max(max_token, t);
    count = static_cast<int64_t>(memory.size());
  } else if (!spec.data().token_file().empty()) {
    absl::StatusOr<std::unique_ptr<TokenFile>> opened = TokenFile::Open(spec.data().token_file());
    if (!opened.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("data.token_file: ", opened.status().message()));
    }
    file = std::move(*opened);
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
  if (count < spec.model().seq_len() + 2) {
    return absl::InvalidArgumentError(absl::StrCat("data: ", count,
                                                   " tokens cannot fill one sequence of ",
                                                   spec.model().seq_len(), " + 1"));
  }
  return std::unique_ptr<BatchSource>(
      new TokenBatchSource(spec, rank, std::move(file), std::move(memory)));
}

}  // namespace tessera
