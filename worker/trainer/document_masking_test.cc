// data.document_masking in the trainer, on the CPU engine: the loss of a
// step over packed sequences equals the loss of each of their documents run
// on its own, with the same weights.
//
// The job trains a few steps with masking (so the weights are far from
// their near-uniform init and context matters), then, before step K, every
// document of step K's micro-batch is run alone through ForwardLogits (one
// sequence holding just that document, whole-sequence attention) and its
// cross-entropy is summed on the host over the targets the step scores.
// Step K's reported loss must equal that mean. It cannot be bit-exact: a
// document packed at position p has RoPE positions p.. instead of 0..,
// which leaves its attention scores equal in exact arithmetic (RoPE is
// relative) but not in bf16, and the host sums the cross-entropy in fp64
// where the fused loss uses fp32 chunks. The largest difference measured
// over the six cases below is 1.3e-5 nats (from 3e-9 to 1.3e-5); the
// tolerance is 5e-5. As a control, scoring the same targets with each
// whole packed sequence as one document (what attention without masking
// sees) misses by 8.3e-4 or more even in this tiny model: the test asserts
// the control differs by more than 10x the tolerance, so it would catch a
// trainer that dropped the document starts.
//
// The gradients' counterpart, packed against alone, is pinned at the
// attention op, where masking acts (worker/engine/cpu/attention_test.cc,
// AttentionDocumentMask: bit-identical forward and backward); everything
// else in the block is per token.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/synthetic_task.h"
#include "gtest/gtest.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/data/batch_source.h"
#include "worker/engine/cpu/cpu_ops.h"
#include "worker/trainer/fsdp_trainer.h"
#include "worker/trainer/test_job_spec.h"

namespace tessera {
namespace {

constexpr int kWarmSteps = 20;
constexpr double kTolerance = 5e-5;

// Sum of -log softmax(logits row)[target] over the rows of one document.
struct HostLoss {
  double sum = 0;
  int64_t tokens = 0;
  void Add(const float* logits, int64_t vocab, int32_t target) {
    double max = logits[0];
    for (int64_t v = 1; v < vocab; ++v) max = std::max(max, static_cast<double>(logits[v]));
    double z = 0;
    for (int64_t v = 0; v < vocab; ++v) z += std::exp(logits[v] - max);
    sum += max + std::log(z) - logits[target];
    ++tokens;
  }
  double Mean() const { return sum / static_cast<double>(tokens); }
};

struct Case {
  bool fp8;
  uint64_t seed;  // fixed per case: the suite must be deterministic
};

class DocumentMaskingLoss : public ::testing::TestWithParam<Case> {};

TEST_P(DocumentMaskingLoss, PackedStepLossEqualsEachDocumentAlone) {
  const Case& c = GetParam();
  v1::JobSpec spec = TinyCpuTestJobSpec(3);
  spec.set_seed(c.seed);
  if (!c.fp8) spec.mutable_fp8()->set_disabled(true);
  // Addition lines cut into documents of 1..9 tokens (mean 5): a 16-token
  // sequence holds about three, and some hold one-token documents.
  v1::SyntheticData task;
  task.set_task(v1::SyntheticData::ADDITION);
  const std::string path =
      absl::StrCat(std::getenv("TEST_TMPDIR"), "/documents", c.fp8, "_", c.seed, ".tok");
  ASSERT_TRUE(WriteSyntheticTokenFile(task, c.seed, 50000, path, /*mean_document_tokens=*/5).ok());
  spec.mutable_data()->set_token_file(path);
  spec.mutable_data()->set_document_masking(true);
  const int64_t seq = spec.model().seq_len(), vocab = spec.model().vocab_size();
  const int64_t tokens = spec.data().micro_batch_size() * seq;

  FsdpTrainer trainer(CreateCpuOps(), CreateGlooCommunicator);
  ASSERT_TRUE(trainer.Setup(spec, 0, 1).ok());
  ASSERT_TRUE(trainer.InitCollective(nullptr, "127.0.0.1", absl::Seconds(5)).ok());
  for (int step = 0; step < kWarmSteps; ++step) ASSERT_TRUE(trainer.RunStep(step).ok());

  auto data = OpenBatchSource(spec, 0, 1);
  ASSERT_TRUE(data.ok()) << data.status();
  std::vector<int32_t> inputs(tokens), targets(tokens), doc_starts(tokens);
  ASSERT_TRUE((*data)
                  ->ReadBatch(kWarmSteps, absl::MakeSpan(inputs), absl::MakeSpan(targets),
                              absl::MakeSpan(doc_starts))
                  .ok());
  HostLoss alone, packed_as_one;
  int documents = 0;
  for (int64_t b = 0; b < spec.data().micro_batch_size(); ++b) {
    const int32_t* row_in = &inputs[b * seq];
    const int32_t* row_tgt = &targets[b * seq];
    const int32_t* row_starts = &doc_starts[b * seq];
    // Each document [start, end) of the row on its own.
    for (int64_t start = 0; start < seq;) {
      int64_t end = start + 1;
      while (end < seq && row_starts[end] == row_starts[start]) ++end;
      auto logits = trainer.ForwardLogits(std::vector<int32_t>(row_in + start, row_in + end));
      ASSERT_TRUE(logits.ok()) << logits.status();
      for (int64_t i = start; i < end; ++i) {
        if (row_tgt[i] != kIgnoreIndex) alone.Add(&(*logits)[(i - start) * vocab], vocab, row_tgt[i]);
      }
      ++documents;
      start = end;
    }
    // The control: the whole row as one document.
    auto logits = trainer.ForwardLogits(std::vector<int32_t>(row_in, row_in + seq));
    ASSERT_TRUE(logits.ok()) << logits.status();
    for (int64_t i = 0; i < seq; ++i) {
      if (row_tgt[i] != kIgnoreIndex) packed_as_one.Add(&(*logits)[i * vocab], vocab, row_tgt[i]);
    }
  }
  ASSERT_GE(documents, 2 * spec.data().micro_batch_size());  // packing, not one per row

  auto report = trainer.RunStep(kWarmSteps);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->tokens, alone.tokens);  // the boundary targets are not counted
  std::cout << "documents " << documents << ": step loss " << report->loss << ", alone "
            << alone.Mean() << " (difference " << report->loss - alone.Mean()
            << "), as one document " << packed_as_one.Mean() << "\n";
  EXPECT_NEAR(report->loss, alone.Mean(), kTolerance);
  EXPECT_GT(std::fabs(report->loss - packed_as_one.Mean()), 10 * kTolerance);
}

INSTANTIATE_TEST_SUITE_P(Fp8OnAndOff, DocumentMaskingLoss,
                         ::testing::Values(Case{false, 11}, Case{false, 12}, Case{false, 13},
                                           Case{true, 11}, Case{true, 12}, Case{true, 13}),
                         [](const auto& info) {
                           return absl::StrCat(info.param.fp8 ? "fp8_" : "bf16_", info.param.seed);
                         });

}  // namespace
}  // namespace tessera
