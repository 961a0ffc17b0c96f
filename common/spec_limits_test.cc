// Every limit accepts its bound and refuses one past it with
// INVALID_ARGUMENT naming the field, the limit and the value; the values
// once seen to abort processes (steps 2^31-1, 10^12 synthetic tokens, a
// 10 MB name) are refused.
#include "common/spec_limits.h"

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

struct Limit {
  std::string field;
  int64_t max;
  std::function<void(v1::JobSpec&, int64_t)> set;
};

std::vector<Limit> Limits() {
  return {
      {"model.vocab_size", kMaxVocabSize,
       [](v1::JobSpec& s, int64_t v) { s.mutable_model()->set_vocab_size(v); }},
      {"model.d_model", kMaxDModel,
       [](v1::JobSpec& s, int64_t v) { s.mutable_model()->set_d_model(v); }},
      {"model.n_layers", kMaxLayers,
       [](v1::JobSpec& s, int64_t v) { s.mutable_model()->set_n_layers(v); }},
      {"model.n_heads", kMaxHeads,
       [](v1::JobSpec& s, int64_t v) { s.mutable_model()->set_n_heads(v); }},
      {"model.n_kv_heads", kMaxHeads,
       [](v1::JobSpec& s, int64_t v) { s.mutable_model()->set_n_kv_heads(v); }},
      {"model.ffn_dim", kMaxFfnDim,
       [](v1::JobSpec& s, int64_t v) { s.mutable_model()->set_ffn_dim(v); }},
      {"model.seq_len", kMaxSeqLen,
       [](v1::JobSpec& s, int64_t v) { s.mutable_model()->set_seq_len(v); }},
      {"data.synthetic.num_tokens", kMaxSyntheticTokens,
       [](v1::JobSpec& s, int64_t v) { s.mutable_data()->mutable_synthetic()->set_num_tokens(v); }},
      {"data.micro_batch_size", kMaxTokensPerMicroBatch,
       [](v1::JobSpec& s, int64_t v) { s.mutable_data()->set_micro_batch_size(v); }},
      {"steps", kMaxSteps, [](v1::JobSpec& s, int64_t v) { s.set_steps(v); }},
      {"optimizer.warmup_steps", kMaxSteps,
       [](v1::JobSpec& s, int64_t v) { s.mutable_optimizer()->set_warmup_steps(v); }},
      {"checkpoint.interval_steps", kMaxSteps,
       [](v1::JobSpec& s, int64_t v) { s.mutable_checkpoint()->set_interval_steps(v); }},
      {"loss_chunk_tokens", kMaxTokensPerMicroBatch,
       [](v1::JobSpec& s, int64_t v) { s.set_loss_chunk_tokens(v); }},
      {"step_timeout_s", kMaxStepTimeoutSeconds,
       [](v1::JobSpec& s, int64_t v) { s.set_step_timeout_s(v); }},
      {"max_restarts", kMaxRestarts, [](v1::JobSpec& s, int64_t v) { s.set_max_restarts(v); }},
  };
}

TEST(SpecLimits, EachNumericLimitIsInclusiveAndNamesItsField) {
  for (const Limit& limit : Limits()) {
    SCOPED_TRACE(limit.field);
    v1::JobSpec at;
    limit.set(at, limit.max);
    EXPECT_TRUE(CheckSpecLimits(at).ok()) << CheckSpecLimits(at);
    v1::JobSpec past;
    limit.set(past, limit.max + 1);
    absl::Status s = CheckSpecLimits(past);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(),
              absl::StrCat(limit.field, ": must be <= ", limit.max, " (got ", limit.max + 1, ")"));
  }
}

TEST(SpecLimits, ValuesThatOnceAbortedProcessesAreRefused) {
  v1::JobSpec steps;
  steps.set_steps(std::numeric_limits<int32_t>::max());
  EXPECT_EQ(CheckSpecLimits(steps).message(),
            absl::StrCat("steps: must be <= ", kMaxSteps, " (got 2147483647)"));
  v1::JobSpec tokens;
  tokens.mutable_data()->mutable_synthetic()->set_num_tokens(1'000'000'000'000);
  EXPECT_EQ(CheckSpecLimits(tokens).message(),
            absl::StrCat("data.synthetic.num_tokens: must be <= ", kMaxSyntheticTokens,
                         " (got 1000000000000)"));
  v1::JobSpec name;
  name.set_name(std::string(10 << 20, '7'));
  EXPECT_EQ(CheckSpecLimits(name).message(), "name: must be at most 256 bytes (got 10485760)");
}

TEST(SpecLimits, StringsAreBoundedInBytes) {
  v1::JobSpec spec;
  spec.set_name(std::string(kMaxJobNameBytes, 'n'));
  spec.mutable_data()->set_token_file(std::string(kMaxPathBytes, 'f'));
  spec.mutable_checkpoint()->set_dir(std::string(kMaxPathBytes, 'd'));
  EXPECT_TRUE(CheckSpecLimits(spec).ok()) << CheckSpecLimits(spec);
  for (const char* field : {"name", "data.token_file", "checkpoint.dir"}) {
    v1::JobSpec over = spec;
    const std::string f = field;
    if (f == "name") over.set_name(spec.name() + "x");
    if (f == "data.token_file") over.mutable_data()->set_token_file(spec.data().token_file() + "x");
    if (f == "checkpoint.dir") over.mutable_checkpoint()->set_dir(spec.checkpoint().dir() + "x");
    absl::Status s = CheckSpecLimits(over);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_EQ(s.message().rfind(absl::StrCat(field, ": must be at most "), 0), 0u) << s.message();
  }
  EXPECT_TRUE(CheckStringLimit("reason", "abc", 3).ok());
  EXPECT_EQ(CheckStringLimit("reason", "abcd", 3).message(),
            "reason: must be at most 3 bytes (got 4)");
}

TEST(SpecLimits, TokensPerMicroBatchBoundTheProduct) {
  v1::JobSpec spec;
  spec.mutable_model()->set_seq_len(4096);
  spec.mutable_data()->set_micro_batch_size(kMaxTokensPerMicroBatch / 4096);
  EXPECT_TRUE(CheckSpecLimits(spec).ok()) << CheckSpecLimits(spec);
  spec.mutable_data()->set_micro_batch_size(kMaxTokensPerMicroBatch / 4096 + 1);
  absl::Status s = CheckSpecLimits(spec);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("data.micro_batch_size: micro_batch_size x model.seq_len", 0), 0u)
      << s.message();
}

}  // namespace
}  // namespace tessera
