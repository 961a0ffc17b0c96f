// Batches: targets are inputs shifted by one; a step reads the same data
// whatever ran before; ranks differ; 1 rank with 2B sequences reads exactly
// what 2 ranks with B read; bad data is rejected.
#include "worker/data/batch_source.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/data/token_file.h"

namespace tessera {
namespace {

v1::JobSpec Spec(int micro_batch) {
  v1::JobSpec spec;
  spec.set_seed(5);
  spec.mutable_model()->set_vocab_size(256);
  spec.mutable_model()->set_seq_len(12);
  spec.mutable_data()->set_micro_batch_size(micro_batch);
  spec.mutable_data()->mutable_synthetic()->set_task(v1::SyntheticData::ADDITION);
  spec.mutable_data()->mutable_synthetic()->set_num_tokens(20000);
  return spec;
}

std::pair<std::vector<int32_t>, std::vector<int32_t>> Read(BatchSource& s, int64_t step, int n) {
  std::vector<int32_t> in(n), tg(n);
  EXPECT_TRUE(s.ReadBatch(step, absl::MakeSpan(in), absl::MakeSpan(tg)).ok());
  return {in, tg};
}

TEST(BatchSource, DeterministicShiftedAndShardedByGlobalSequence) {
  auto r0 = OpenBatchSource(Spec(2), 0, 2);
  auto r1 = OpenBatchSource(Spec(2), 1, 2);
  auto whole = OpenBatchSource(Spec(4), 0, 1);
  ASSERT_TRUE(r0.ok() && r1.ok() && whole.ok());
  auto [in0, tg0] = Read(**r0, 3, 24);
  for (int j = 0; j < 2; ++j) {
    for (int t = 0; t + 1 < 12; ++t) EXPECT_EQ(tg0[j * 12 + t], in0[j * 12 + t + 1]);
  }
  // A fresh source reading step 3 directly equals one that read 0..3.
  auto fresh = OpenBatchSource(Spec(2), 0, 2);
  for (int s = 0; s < 3; ++s) Read(**fresh, s, 24);
  EXPECT_EQ(Read(**fresh, 3, 24).first, in0);
  auto [in1, tg1] = Read(**r1, 3, 24);
  EXPECT_NE(in0, in1);
  auto [inw, tgw] = Read(**whole, 3, 48);
  std::vector<int32_t> joined = in0;
  joined.insert(joined.end(), in1.begin(), in1.end());
  EXPECT_EQ(inw, joined);
  EXPECT_NE(Read(**r0, 4, 24).first, in0);
}

TEST(BatchSource, RejectsDataThatDoesNotFitTheModel) {
  std::string path = absl::StrCat(std::getenv("TEST_TMPDIR"), "/big.tok");
  ASSERT_TRUE(WriteTokenFile(path, std::vector<uint32_t>(100, 300)).ok());
  v1::JobSpec spec = Spec(1);
  spec.mutable_data()->set_token_file(path);
  auto s = OpenBatchSource(spec, 0, 1);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("vocab_size"), std::string::npos);
  spec.mutable_data()->set_token_file("/nonexistent.tok");
  EXPECT_EQ(OpenBatchSource(spec, 0, 1).status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(WriteTokenFile(path, std::vector<uint32_t>(5, 1)).ok());
  spec.mutable_data()->set_token_file(path);
  EXPECT_NE(OpenBatchSource(spec, 0, 1).status().message().find("one sequence"), std::string::npos);
}

}  // namespace
}  // namespace tessera
