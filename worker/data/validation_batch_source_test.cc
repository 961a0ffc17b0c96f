// The validation reader: batches are whole consecutive sequences of the file
// (targets one token ahead), the same on every evaluation; two ranks with
// micro-batch B read exactly what one rank with 2B reads; reads wrap around
// a short file; bad files are refused naming data.validation.token_file.
#include "worker/data/validation_batch_source.h"

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "formats/token_file.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

std::string TempPath(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

v1::JobSpec Spec(const std::string& path, int micro_batch) {
  v1::JobSpec spec;
  spec.mutable_model()->set_vocab_size(1000);
  spec.mutable_model()->set_seq_len(8);
  spec.mutable_data()->set_micro_batch_size(micro_batch);
  spec.mutable_data()->mutable_validation()->set_token_file(path);
  spec.mutable_data()->mutable_validation()->set_eval_interval_steps(3);
  spec.mutable_data()->mutable_validation()->set_eval_batches(2);
  spec.set_steps(10);
  return spec;
}

std::vector<uint32_t> RandomTokens(size_t n) {
  std::mt19937 rng(std::random_device{}());
  std::vector<uint32_t> tokens(n);
  for (uint32_t& t : tokens) t = rng() % 1000;
  return tokens;
}

TEST(ValidationBatchSource, ReadsConsecutiveSequencesShardedLikeTraining) {
  const std::vector<uint32_t> tokens = RandomTokens(8 * 40 + 1);
  const std::string path = TempPath("val.tok");
  ASSERT_TRUE(WriteTokenFile(path, tokens).ok());
  auto one = OpenValidationBatchSource(Spec(path, 4), 0, 1);
  ASSERT_TRUE(one.ok()) << one.status();
  std::vector<int32_t> in(32), tgt(32), again_in(32), again_tgt(32);
  for (int batch = 0; batch < 3; ++batch) {
    ASSERT_TRUE((*one)->ReadBatch(batch, absl::MakeSpan(in), absl::MakeSpan(tgt)).ok());
    for (int i = 0; i < 32; ++i) {
      const size_t at = batch * 32 + i;  // sequence (batch * 4 + i / 8), token i % 8
      ASSERT_EQ(in[i], static_cast<int32_t>(tokens[at])) << batch << " " << i;
      ASSERT_EQ(tgt[i], static_cast<int32_t>(tokens[at + 1])) << batch << " " << i;
    }
    // The same batch reads the same tokens every time.
    ASSERT_TRUE((*one)->ReadBatch(batch, absl::MakeSpan(again_in), absl::MakeSpan(again_tgt)).ok());
    EXPECT_EQ(in, again_in);
    // Two ranks of micro-batch 2 split it in rank order.
    for (int rank = 0; rank < 2; ++rank) {
      auto half = OpenValidationBatchSource(Spec(path, 2), rank, 2);
      ASSERT_TRUE(half.ok()) << half.status();
      std::vector<int32_t> hin(16), htgt(16);
      ASSERT_TRUE((*half)->ReadBatch(batch, absl::MakeSpan(hin), absl::MakeSpan(htgt)).ok());
      EXPECT_EQ(hin, std::vector<int32_t>(in.begin() + 16 * rank, in.begin() + 16 * rank + 16));
      EXPECT_EQ(htgt, std::vector<int32_t>(tgt.begin() + 16 * rank, tgt.begin() + 16 * rank + 16));
    }
  }
  // 40 whole sequences: batch 10 starts over at sequence 0.
  ASSERT_TRUE((*one)->ReadBatch(10, absl::MakeSpan(again_in), absl::MakeSpan(again_tgt)).ok());
  ASSERT_TRUE((*one)->ReadBatch(0, absl::MakeSpan(in), absl::MakeSpan(tgt)).ok());
  EXPECT_EQ(in, again_in);
}

TEST(ValidationBatchSource, BadFilesAreRefusedNamingTheField) {
  const std::string big = TempPath("big.tok");
  ASSERT_TRUE(WriteTokenFile(big, std::vector<uint32_t>(20, 1000)).ok());
  const std::string tiny = TempPath("tiny.tok");
  ASSERT_TRUE(WriteTokenFile(tiny, std::vector<uint32_t>(8, 3)).ok());
  for (const std::string& path : {big, tiny, TempPath("missing.tok")}) {
    auto opened = OpenValidationBatchSource(Spec(path, 2), 0, 1);
    ASSERT_FALSE(opened.ok()) << path;
    EXPECT_EQ(opened.status().code(), absl::StatusCode::kInvalidArgument) << opened.status();
    EXPECT_NE(opened.status().message().find("data.validation.token_file"), std::string::npos)
        << opened.status();
  }
  v1::JobSpec none = Spec(big, 2);
  none.mutable_data()->clear_validation();
  EXPECT_EQ(OpenValidationBatchSource(none, 0, 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// Validation sources: one set per source, in the spec's order, each read in
// whole sequences of seq_len + 1 tokens that do not overlap, front to back
// and wrapping; two ranks read what one rank with twice the micro-batch
// reads.
TEST(ValidationSetsTest, SourcesAreReadInWholeNonOverlappingSequences) {
  // 5 whole sequences of 9 tokens and a 4-token tail: token i is i.
  std::vector<uint32_t> tokens(5 * 9 + 4);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i);
  const std::string first = TempPath("val-source-a.tok"), second = TempPath("val-source-b.tok");
  ASSERT_TRUE(WriteTokenFile(first, tokens).ok());
  ASSERT_TRUE(WriteTokenFile(second, std::vector<uint32_t>(20, 7)).ok());
  v1::JobSpec spec = Spec("", 3);
  spec.mutable_data()->mutable_validation()->clear_token_file();
  spec.mutable_data()->mutable_validation()->add_sources()->set_path(first);
  spec.mutable_data()->mutable_validation()->add_sources()->set_path(second);

  absl::StatusOr<std::vector<ValidationSet>> one = OpenValidationSets(spec, 0, 1);
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->size(), 2u);
  EXPECT_EQ((*one)[0].source_path, first);
  EXPECT_EQ((*one)[1].source_path, second);
  std::vector<int32_t> inputs(3 * 8), targets(3 * 8);
  // Batch 1 holds sequences 3, 4 and (wrapping) 0; the tail is never read.
  ASSERT_TRUE((*one)[0].batches->ReadBatch(1, absl::MakeSpan(inputs), absl::MakeSpan(targets)).ok());
  const int want_sequence[3] = {3, 4, 0};
  for (int j = 0; j < 3; ++j) {
    for (int t = 0; t < 8; ++t) {
      EXPECT_EQ(inputs[j * 8 + t], want_sequence[j] * 9 + t);
      EXPECT_EQ(targets[j * 8 + t], want_sequence[j] * 9 + t + 1);
    }
  }

  // Two ranks of micro-batch 3 against one of 6.
  v1::JobSpec wide = spec;
  wide.mutable_data()->set_micro_batch_size(6);
  absl::StatusOr<std::vector<ValidationSet>> whole = OpenValidationSets(wide, 0, 1);
  absl::StatusOr<std::vector<ValidationSet>> r0 = OpenValidationSets(spec, 0, 2);
  absl::StatusOr<std::vector<ValidationSet>> r1 = OpenValidationSets(spec, 1, 2);
  ASSERT_TRUE(whole.ok() && r0.ok() && r1.ok());
  std::vector<int32_t> all_in(6 * 8), all_tg(6 * 8);
  ASSERT_TRUE((*whole)[0].batches->ReadBatch(2, absl::MakeSpan(all_in), absl::MakeSpan(all_tg)).ok());
  ASSERT_TRUE((*r0)[0].batches->ReadBatch(2, absl::MakeSpan(inputs), absl::MakeSpan(targets)).ok());
  EXPECT_EQ(std::vector<int32_t>(all_in.begin(), all_in.begin() + 24), inputs);
  ASSERT_TRUE((*r1)[0].batches->ReadBatch(2, absl::MakeSpan(inputs), absl::MakeSpan(targets)).ok());
  EXPECT_EQ(std::vector<int32_t>(all_in.begin() + 24, all_in.end()), inputs);

  // A source with no whole sequence is named.
  const std::string short_file = TempPath("val-short.tok");
  ASSERT_TRUE(WriteTokenFile(short_file, std::vector<uint32_t>(8, 1)).ok());
  spec.mutable_data()->mutable_validation()->mutable_sources(1)->set_path(short_file);
  absl::StatusOr<std::vector<ValidationSet>> bad = OpenValidationSets(spec, 0, 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message().rfind("data.validation.sources[1]: ", 0), 0u) << bad.status();
}

}  // namespace
}  // namespace tessera
