// Synthetic addition and copy tasks (see synthetic_task.h).
//
// The stream is fixed by this procedure, so it is identical on every
// machine and compiler: one SplitMixRng seeded with HashWords(seed, 1) for
// ADDITION or HashWords(seed, 2) for COPY; each line draws, per number, a
// length 1 + Below(max_digits) and then Below(10) per digit (an ADDITION
// operand of two or more digits that would start with 0 redraws that digit
// as 1 + Below(9)). Lines are appended until num_tokens is reached and the
// stream is cut there, so a longer stream extends a shorter one. Changing
// any step changes every job's data: synthetic_task_test pins a prefix.
#include "common/synthetic_task.h"

#include "absl/strings/str_cat.h"
#include "common/splitmix.h"
#include "formats/token_file.h"

namespace tessera {
namespace {

std::string RandomDigits(SplitMixRng& rng, int max_digits, bool leading_zero_ok) {
  int n = 1 + static_cast<int>(rng.Below(max_digits));
  std::string s;
  for (int i = 0; i < n; ++i) {
    int d = static_cast<int>(rng.Below(10));
    if (i == 0 && !leading_zero_ok && n > 1 && d == 0) d = 1 + static_cast<int>(rng.Below(9));
    s += static_cast<char>('0' + d);
  }
  return s;
}

}  // namespace

absl::StatusOr<std::vector<uint32_t>> GenerateSyntheticTokens(const v1::SyntheticData& task,
                                                              uint64_t seed, int64_t num_tokens) {
  if (num_tokens <= 0) return absl::InvalidArgumentError("num_tokens: must be > 0");
  if (num_tokens > kMaxSyntheticTokens) {
    return absl::InvalidArgumentError(absl::StrCat("num_tokens: must be <= ", kMaxSyntheticTokens,
                                                   " (got ", num_tokens, ")"));
  }
  const bool copy = task.task() == v1::SyntheticData::COPY;
  if (!copy && task.task() != v1::SyntheticData::ADDITION) {
    return absl::InvalidArgumentError("task: must be ADDITION or COPY");
  }
  if (task.max_digits() < 0 || task.max_digits() > 18) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_digits: must be in [0, 18] (0 = default), got ", task.max_digits()));
  }
  const int max_digits = task.max_digits() > 0 ? task.max_digits() : (copy ? 8 : 3);
  SplitMixRng rng(HashWords(seed, copy ? 2 : 1));
  std::vector<uint32_t> tokens;
  tokens.reserve(num_tokens + 64);
  while (static_cast<int64_t>(tokens.size()) < num_tokens) {
    std::string line;
    if (copy) {
      std::string s = RandomDigits(rng, max_digits, true);
      line = absl::StrCat(s, "|", s, "\n");
    } else {
      std::string a = RandomDigits(rng, max_digits, false);
      std::string b = RandomDigits(rng, max_digits, false);
      line = absl::StrCat(a, "+", b, "=", std::stoull(a) + std::stoull(b), "\n");
    }
    for (char c : line) tokens.push_back(static_cast<uint8_t>(c));
  }
  tokens.resize(num_tokens);
  return tokens;
}

std::vector<uint64_t> SyntheticDocumentStarts(uint64_t seed, int64_t num_tokens,
                                              int64_t mean_document_tokens) {
  // Its own stream of the seed, so the tokens do not change with documents.
  SplitMixRng rng(HashWords(seed, 0xd0c5a7a5));
  std::vector<uint64_t> starts;
  const uint64_t lengths = 2 * static_cast<uint64_t>(mean_document_tokens) - 1;
  for (uint64_t at = 0; at < static_cast<uint64_t>(num_tokens); at += 1 + rng.Below(lengths)) {
    starts.push_back(at);
  }
  return starts;
}

absl::Status WriteSyntheticTokenFile(const v1::SyntheticData& task, uint64_t seed,
                                     int64_t num_tokens, const std::string& out_path,
                                     int64_t mean_document_tokens) {
  absl::StatusOr<std::vector<uint32_t>> tokens = GenerateSyntheticTokens(task, seed, num_tokens);
  if (!tokens.ok()) return tokens.status();
  if (mean_document_tokens < 0) {
    return absl::InvalidArgumentError("mean_document_tokens: must be >= 0");
  }
  if (mean_document_tokens == 0) return WriteTokenFile(out_path, *tokens, TokenizerInfo::Byte());
  const std::vector<uint64_t> starts =
      SyntheticDocumentStarts(seed, num_tokens, mean_document_tokens);
  return WriteTokenFile(out_path, *tokens, TokenizerInfo::Byte(), absl::MakeConstSpan(starts));
}

}  // namespace tessera
