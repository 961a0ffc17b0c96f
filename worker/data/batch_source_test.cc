// Batches from OpenBatchSource: every sequence is a contiguous window of the
// data with targets shifted by one; a step reads the same data however often
// and after whatever ran before; ranks and seeds differ; one rank with 2B
// sequences reads exactly what two ranks with B read; offsets reach both
// ends of the data; bad data or buffers, and synthetic token counts beyond
// the limit, are INVALID_ARGUMENT.
#include "worker/data/batch_source.h"

#include <cstdlib>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/synthetic_task.h"
#include "formats/token_file.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

constexpr int kSeqLen = 12;

uint64_t FreshSeed() { return (uint64_t{std::random_device{}()} << 32) | std::random_device{}(); }

v1::JobSpec SyntheticSpec(uint64_t seed, int micro_batch) {
  v1::JobSpec spec;
  spec.set_seed(seed);
  spec.set_steps(10);
  spec.mutable_model()->set_vocab_size(256);
  spec.mutable_model()->set_seq_len(kSeqLen);
  spec.mutable_data()->set_micro_batch_size(micro_batch);
  spec.mutable_data()->mutable_synthetic()->set_task(v1::SyntheticData::ADDITION);
  spec.mutable_data()->mutable_synthetic()->set_num_tokens(20000);
  return spec;
}

struct Batch {
  std::vector<int32_t> inputs, targets;
  bool operator==(const Batch& o) const { return inputs == o.inputs && targets == o.targets; }
};

// Reads with both buffers poisoned first, so unwritten slots show.
Batch Read(BatchSource& source, int64_t step, int micro_batch) {
  Batch b{std::vector<int32_t>(micro_batch * kSeqLen, -7),
          std::vector<int32_t>(micro_batch * kSeqLen, -7)};
  absl::Status s = source.ReadBatch(step, absl::MakeSpan(b.inputs), absl::MakeSpan(b.targets));
  EXPECT_TRUE(s.ok()) << s;
  return b;
}

std::unique_ptr<BatchSource> Open(const v1::JobSpec& spec, int rank, int world) {
  auto source = OpenBatchSource(spec, rank, world);
  EXPECT_TRUE(source.ok()) << source.status();
  return source.ok() ? std::move(*source) : nullptr;
}

// Offset at which `b`'s sequence j is the window tokens[off .. off+seq_len]
// (inputs then the shifted targets), or -1.
int64_t FindWindow(const std::vector<uint32_t>& tokens, const Batch& b, int j) {
  for (int64_t off = 0; off + kSeqLen < static_cast<int64_t>(tokens.size()); ++off) {
    bool match = true;
    for (int t = 0; t < kSeqLen && match; ++t) {
      match = b.inputs[j * kSeqLen + t] == static_cast<int32_t>(tokens[off + t]) &&
              b.targets[j * kSeqLen + t] == static_cast<int32_t>(tokens[off + t + 1]);
    }
    if (match) return off;
  }
  return -1;
}

TEST(BatchSource, SequencesAreWindowsOfTheDataWithTargetsShiftedByOne) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::vector<uint32_t> tokens(3000);
  for (uint32_t& t : tokens) t = rng() % 50000;  // random enough that windows are unique
  const std::string path = absl::StrCat(std::getenv("TEST_TMPDIR"), "/window.tok");
  ASSERT_TRUE(WriteTokenFile(path, tokens).ok());
  v1::JobSpec spec = SyntheticSpec(seed, 3);
  spec.mutable_model()->set_vocab_size(50000);
  spec.mutable_data()->set_token_file(path);
  auto source = Open(spec, 1, 2);
  ASSERT_NE(source, nullptr);
  for (int64_t step : {0, 1, 17}) {
    Batch b = Read(*source, step, 3);
    for (int j = 0; j < 3; ++j) EXPECT_GE(FindWindow(tokens, b, j), 0) << "step " << step;
  }
}

TEST(BatchSource, AStepReadsTheSameDataWhateverRanBefore) {
  const v1::JobSpec spec = SyntheticSpec(FreshSeed(), 2);
  auto source = Open(spec, 0, 2);
  auto fresh = Open(spec, 0, 2);
  ASSERT_NE(source, nullptr);
  ASSERT_NE(fresh, nullptr);
  for (int64_t s = 0; s < 5; ++s) Read(*source, s, 2);
  const Batch after_history = Read(*source, 5, 2);
  EXPECT_EQ(Read(*source, 5, 2), after_history);  // read twice
  EXPECT_EQ(Read(*fresh, 5, 2), after_history);   // resumed at step 5
  EXPECT_FALSE(Read(*source, 6, 2) == after_history);
}

TEST(BatchSource, RanksAndSeedsReadDifferentData) {
  const uint64_t seed = FreshSeed();
  auto r0 = Open(SyntheticSpec(seed, 2), 0, 2);
  auto r1 = Open(SyntheticSpec(seed, 2), 1, 2);
  auto other_seed = Open(SyntheticSpec(seed + 1, 2), 0, 2);
  ASSERT_TRUE(r0 && r1 && other_seed);
  const Batch b0 = Read(*r0, 3, 2);
  EXPECT_FALSE(Read(*r1, 3, 2) == b0);
  EXPECT_FALSE(Read(*other_seed, 3, 2) == b0);
}

TEST(BatchSource, OneRankWithTwiceTheBatchReadsWhatTwoRanksRead) {
  const uint64_t seed = FreshSeed();
  for (int world : {2, 3}) {
    auto whole = Open(SyntheticSpec(seed, 2 * world), 0, 1);
    ASSERT_NE(whole, nullptr);
    for (int64_t step : {0, 4}) {
      Batch joined;
      for (int r = 0; r < world; ++r) {
        auto part = Open(SyntheticSpec(seed, 2), r, world);
        ASSERT_NE(part, nullptr);
        Batch b = Read(*part, step, 2);
        joined.inputs.insert(joined.inputs.end(), b.inputs.begin(), b.inputs.end());
        joined.targets.insert(joined.targets.end(), b.targets.begin(), b.targets.end());
      }
      EXPECT_EQ(Read(*whole, step, 2 * world), joined) << "world " << world << " step " << step;
    }
  }
}

TEST(BatchSource, OffsetsCoverTheWholeDataIncludingBothEnds) {
  // seq_len + 3 tokens leave exactly three start offsets: 0, 1 and 2.
  std::vector<uint32_t> tokens(kSeqLen + 3);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i);
  const std::string path = absl::StrCat(std::getenv("TEST_TMPDIR"), "/tiny.tok");
  ASSERT_TRUE(WriteTokenFile(path, tokens).ok());
  v1::JobSpec spec = SyntheticSpec(FreshSeed(), 4);
  spec.mutable_data()->set_token_file(path);
  auto source = Open(spec, 0, 1);
  ASSERT_NE(source, nullptr);
  std::set<int32_t> starts;
  for (int64_t step = 0; step < 30; ++step) {
    Batch b = Read(*source, step, 4);
    for (int j = 0; j < 4; ++j) {
      starts.insert(b.inputs[j * kSeqLen]);
      EXPECT_EQ(b.targets[j * kSeqLen + kSeqLen - 1], b.inputs[j * kSeqLen] + kSeqLen);
    }
  }
  EXPECT_EQ(starts, (std::set<int32_t>{0, 1, 2}));

  // Exactly seq_len + 1 tokens still make one sequence; seq_len do not.
  tokens.resize(kSeqLen + 1);
  ASSERT_TRUE(WriteTokenFile(path, tokens).ok());
  source = Open(spec, 0, 1);
  ASSERT_NE(source, nullptr);
  EXPECT_EQ(Read(*source, 9, 4).targets[kSeqLen - 1], kSeqLen);
  tokens.resize(kSeqLen);
  ASSERT_TRUE(WriteTokenFile(path, tokens).ok());
  auto too_short = OpenBatchSource(spec, 0, 1);
  EXPECT_EQ(too_short.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_short.status().message().find("one sequence"), std::string::npos);
}

TEST(BatchSource, SyntheticDataWithoutATokenCountGetsADefault) {
  v1::JobSpec spec = SyntheticSpec(FreshSeed(), 2);
  spec.mutable_data()->mutable_synthetic()->set_num_tokens(0);
  auto source = Open(spec, 0, 1);
  ASSERT_NE(source, nullptr);
  Batch b = Read(*source, 0, 2);
  for (int32_t t : b.inputs) EXPECT_TRUE(t >= 0 && t < 256);
}

TEST(BatchSource, SyntheticTokenCountBeyondTheLimitIsInvalidArgument) {
  v1::JobSpec spec = SyntheticSpec(1, 2);
  spec.mutable_data()->mutable_synthetic()->set_num_tokens(1'000'000'000'000);
  auto s = OpenBatchSource(spec, 0, 1);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.status().message().rfind("data.synthetic: num_tokens: must be <= ", 0), 0u)
      << s.status();
}

TEST(BatchSource, RejectsDataOrBuffersThatDoNotFit) {
  const std::string path = absl::StrCat(std::getenv("TEST_TMPDIR"), "/big.tok");
  std::vector<uint32_t> tokens(100);
  std::mt19937 rng(std::random_device{}());
  for (uint32_t& t : tokens) t = rng() % 256;
  tokens[50] = 256;  // one id past vocab_size
  ASSERT_TRUE(WriteTokenFile(path, tokens).ok());
  v1::JobSpec spec = SyntheticSpec(1, 1);
  spec.mutable_data()->set_token_file(path);
  auto s = OpenBatchSource(spec, 0, 1);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("vocab_size"), std::string::npos) << s.status();

  spec.mutable_data()->set_token_file("/nonexistent/data.tok");
  EXPECT_EQ(OpenBatchSource(spec, 0, 1).status().code(), absl::StatusCode::kInvalidArgument);
  spec.mutable_data()->clear_token_file();
  EXPECT_EQ(OpenBatchSource(spec, 0, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenBatchSource(SyntheticSpec(1, 1), 2, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenBatchSource(SyntheticSpec(1, 0), 0, 1).status().code(),
            absl::StatusCode::kInvalidArgument);

  auto source = Open(SyntheticSpec(1, 2), 0, 1);
  ASSERT_NE(source, nullptr);
  std::vector<int32_t> small(kSeqLen), full(2 * kSeqLen);
  EXPECT_EQ(source->ReadBatch(0, absl::MakeSpan(small), absl::MakeSpan(full)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(source->ReadBatch(-1, absl::MakeSpan(full), absl::MakeSpan(full)).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera
