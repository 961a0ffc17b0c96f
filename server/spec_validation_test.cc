// Every validation rule rejects with INVALID_ARGUMENT naming its field, a
// valid spec passes, and defaults (common/spec_defaults.h) fill what the
// proto documents and still pass. The newer rules are checked from both
// sides: n_kv_heads (grouped-query attention) accepted when it divides
// n_heads, the CUDA head dims 64 and 128, and no
// upper limit on seq_len below common/spec_limits.h's. Upper limits are
// checked too (their own tests are common/spec_limits_test.cc), and so are
// checkpoint.keep_last and checkpoint.resume_from ("latest" or a step before
// steps, with a dir that has no ".." component).
#include "server/spec_validation.h"

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/spec_limits.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

v1::JobSpec ValidSpec() {
  v1::JobSpec spec;
  v1::ModelConfig* m = spec.mutable_model();
  m->set_vocab_size(256);
  m->set_d_model(64);
  m->set_n_layers(2);
  m->set_n_heads(4);
  m->set_ffn_dim(128);
  m->set_seq_len(32);
  spec.mutable_data()->mutable_synthetic()->set_task(v1::SyntheticData::ADDITION);
  spec.mutable_data()->set_micro_batch_size(4);
  spec.mutable_optimizer()->set_lr(1e-3f);
  spec.set_world_size(2);
  spec.set_steps(10);
  return spec;
}

struct Case {
  std::string field;
  std::function<void(v1::JobSpec&)> mutate;
};

TEST(SpecValidation, ValidSpecPasses) { EXPECT_TRUE(ValidateJobSpec(ValidSpec()).ok()); }

TEST(SpecValidation, ValidationSectionPasses) {
  v1::JobSpec spec = ValidSpec();
  v1::ValidationConfig* v = spec.mutable_data()->mutable_validation();
  v->set_token_file("/data/val.tok");
  v->set_eval_interval_steps(1);
  v->set_eval_batches(100'000);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

TEST(SpecValidation, EachRuleNamesItsField) {
  std::vector<Case> cases = {
      {"model:", [](v1::JobSpec& s) { s.clear_model(); }},
      {"model.vocab_size", [](v1::JobSpec& s) { s.mutable_model()->set_vocab_size(1); }},
      {"model.init_from: must be at most 4096 bytes", [](v1::JobSpec& s) { s.mutable_model()->set_init_from(std::string(5000, 'a')); }},
      {"model.d_model", [](v1::JobSpec& s) { s.mutable_model()->set_d_model(0); }},
      {"model.n_layers", [](v1::JobSpec& s) { s.mutable_model()->set_n_layers(0); }},
      {"model.n_heads", [](v1::JobSpec& s) { s.mutable_model()->set_n_heads(-1); }},
      {"model.ffn_dim", [](v1::JobSpec& s) { s.mutable_model()->set_ffn_dim(0); }},
      {"model.seq_len", [](v1::JobSpec& s) { s.mutable_model()->set_seq_len(1); }},
      {"model.d_model", [](v1::JobSpec& s) { s.mutable_model()->set_n_heads(3); }},
      {"model.n_heads", [](v1::JobSpec& s) { s.mutable_model()->set_d_model(12); s.mutable_model()->set_n_heads(4); }},
      {"model.n_kv_heads", [](v1::JobSpec& s) { s.mutable_model()->set_n_kv_heads(-1); }},
      {"model.n_kv_heads", [](v1::JobSpec& s) { s.mutable_model()->set_n_kv_heads(3); }},
      {"model.n_kv_heads", [](v1::JobSpec& s) { s.mutable_model()->set_n_kv_heads(8); }},
      {"model.n_heads", [](v1::JobSpec& s) { s.set_device_kind(v1::CUDA); }},  // head dim 16
      {"model.norm_eps", [](v1::JobSpec& s) { s.mutable_model()->set_norm_eps(-1); }},
      {"data", [](v1::JobSpec& s) { s.mutable_data()->clear_synthetic(); }},
      {"data.token_file", [](v1::JobSpec& s) { s.mutable_data()->set_token_file(""); }},
      {"data.validation.token_file",
       [](v1::JobSpec& s) { s.mutable_data()->mutable_validation()->set_eval_batches(1); }},
      {"data.validation.token_file",
       [](v1::JobSpec& s) {
         v1::ValidationConfig* v = s.mutable_data()->mutable_validation();
         v->set_token_file(std::string(kMaxPathBytes + 1, 'v'));
         v->set_eval_interval_steps(1);
         v->set_eval_batches(1);
       }},
      {"data.validation.eval_interval_steps",
       [](v1::JobSpec& s) {
         v1::ValidationConfig* v = s.mutable_data()->mutable_validation();
         v->set_token_file("/data/val.tok");
         v->set_eval_batches(1);
       }},
      {"data.validation.eval_interval_steps",
       [](v1::JobSpec& s) {
         v1::ValidationConfig* v = s.mutable_data()->mutable_validation();
         v->set_token_file("/data/val.tok");
         v->set_eval_interval_steps(-3);
         v->set_eval_batches(1);
       }},
      {"data.validation.eval_batches",
       [](v1::JobSpec& s) {
         v1::ValidationConfig* v = s.mutable_data()->mutable_validation();
         v->set_token_file("/data/val.tok");
         v->set_eval_interval_steps(5);
       }},
      {"data.validation.eval_batches",
       [](v1::JobSpec& s) {
         v1::ValidationConfig* v = s.mutable_data()->mutable_validation();
         v->set_token_file("/data/val.tok");
         v->set_eval_interval_steps(5);
         v->set_eval_batches(100'001);
       }},
      {"data.synthetic.task", [](v1::JobSpec& s) { s.mutable_data()->mutable_synthetic()->set_task(v1::SyntheticData::TASK_UNSPECIFIED); }},
      {"data.document_masking: needs token-file data", [](v1::JobSpec& s) { s.mutable_data()->set_document_masking(true); }},
      {"data.micro_batch_size", [](v1::JobSpec& s) { s.mutable_data()->set_micro_batch_size(0); }},
      {"optimizer", [](v1::JobSpec& s) { s.clear_optimizer(); }},
      {"optimizer.lr", [](v1::JobSpec& s) { s.mutable_optimizer()->set_lr(0); }},
      {"optimizer.beta1", [](v1::JobSpec& s) { s.mutable_optimizer()->set_beta1(1.0f); }},
      {"optimizer.beta2", [](v1::JobSpec& s) { s.mutable_optimizer()->set_beta2(-0.1f); }},
      {"optimizer.weight_decay", [](v1::JobSpec& s) { s.mutable_optimizer()->set_weight_decay(-1); }},
      {"optimizer.warmup_steps", [](v1::JobSpec& s) { s.mutable_optimizer()->set_warmup_steps(-1); }},
      {"optimizer.min_lr", [](v1::JobSpec& s) { s.mutable_optimizer()->set_min_lr(1.0f); }},
      {"optimizer.grad_clip_norm", [](v1::JobSpec& s) { s.mutable_optimizer()->set_grad_clip_norm(-1); }},
      {"fp8.delayed.margin", [](v1::JobSpec& s) { s.mutable_fp8()->mutable_delayed()->set_margin(-1); }},
      {"fp8.delayed.amax_history_len", [](v1::JobSpec& s) { s.mutable_fp8()->mutable_delayed()->set_amax_history_len(-2); }},
      {"fp8.stats_interval_steps", [](v1::JobSpec& s) { s.mutable_fp8()->set_stats_interval_steps(-1); }},
      {"fp8.stats_interval_steps", [](v1::JobSpec& s) { s.mutable_fp8()->set_stats_interval_steps(1'000'001); }},
      {"fp8.stats_interval_steps: must be 0 when fp8.disabled", [](v1::JobSpec& s) { s.mutable_fp8()->set_disabled(true); s.mutable_fp8()->set_stats_interval_steps(10); }},
      {"fp8.saturation_warn_fraction", [](v1::JobSpec& s) { s.mutable_fp8()->set_saturation_warn_fraction(-0.1); }},
      {"fp8.saturation_warn_fraction", [](v1::JobSpec& s) { s.mutable_fp8()->set_saturation_warn_fraction(1.5); }},
      {"fp8.underflow_warn_fraction", [](v1::JobSpec& s) { s.mutable_fp8()->set_underflow_warn_fraction(2); }},
      {"fp8.underflow_warn_fraction", [](v1::JobSpec& s) { s.mutable_fp8()->set_underflow_warn_fraction(std::nan("")); }},
      {"fp8.shadow_interval_steps: must be in [0,", [](v1::JobSpec& s) { s.mutable_fp8()->set_shadow_interval_steps(-1); }},
      {"fp8.shadow_interval_steps: must be in [0,", [](v1::JobSpec& s) { s.mutable_fp8()->set_shadow_interval_steps(kMaxSteps + 1); }},
      {"fp8.shadow_interval_steps: needs FP8", [](v1::JobSpec& s) { s.mutable_fp8()->set_disabled(true); s.mutable_fp8()->set_shadow_interval_steps(10); }},
      {"fp8.shadow_gap_warn: must be in [0,", [](v1::JobSpec& s) { s.mutable_fp8()->set_shadow_interval_steps(10); s.mutable_fp8()->set_shadow_gap_warn(-0.5f); }},
      {"fp8.shadow_gap_warn: must be in [0,", [](v1::JobSpec& s) { s.mutable_fp8()->set_shadow_interval_steps(10); s.mutable_fp8()->set_shadow_gap_warn(std::numeric_limits<float>::quiet_NaN()); }},
      {"fp8.shadow_gap_warn: must be in [0,", [](v1::JobSpec& s) { s.mutable_fp8()->set_shadow_interval_steps(10); s.mutable_fp8()->set_shadow_gap_warn(1000.f); }},
      {"fp8.shadow_gap_warn: is set but fp8.shadow_interval_steps is 0", [](v1::JobSpec& s) { s.mutable_fp8()->set_shadow_gap_warn(0.2f); }},
      // ValidSpec's micro-batch is 4 sequences: the shadow can take at most those.
      {"fp8.shadow_batch_sequences: must be in [0, data.micro_batch_size 4]", [](v1::JobSpec& s) { s.mutable_fp8()->set_shadow_interval_steps(10); s.mutable_fp8()->set_shadow_batch_sequences(-1); }},
      {"fp8.shadow_batch_sequences: must be in [0, data.micro_batch_size 4]", [](v1::JobSpec& s) { s.mutable_fp8()->set_shadow_interval_steps(10); s.mutable_fp8()->set_shadow_batch_sequences(5); }},
      {"fp8.shadow_batch_sequences: must be in [0, data.micro_batch_size 2]", [](v1::JobSpec& s) { s.mutable_data()->set_micro_batch_size(2); s.mutable_fp8()->set_shadow_interval_steps(10); s.mutable_fp8()->set_shadow_batch_sequences(3); }},
      {"fp8.shadow_batch_sequences: is set but fp8.shadow_interval_steps is 0", [](v1::JobSpec& s) { s.mutable_fp8()->set_shadow_batch_sequences(2); }},
      {"world_size", [](v1::JobSpec& s) { s.set_world_size(0); }},
      {"world_size", [](v1::JobSpec& s) { s.set_world_size(kMaxWorldSize + 1); }},
      {"parallelism.shard_group_size", [](v1::JobSpec& s) { s.mutable_parallelism()->set_shard_group_size(-1); }},
      {"parallelism.shard_group_size", [](v1::JobSpec& s) { s.set_world_size(4); s.mutable_parallelism()->set_shard_group_size(3); }},
      {"parallelism.shard_group_size", [](v1::JobSpec& s) { s.set_world_size(4); s.mutable_parallelism()->set_shard_group_size(8); }},
      {"steps", [](v1::JobSpec& s) { s.set_steps(0); }},
      {"checkpoint.interval_steps", [](v1::JobSpec& s) { s.mutable_checkpoint()->set_interval_steps(-1); }},
      {"checkpoint.dir", [](v1::JobSpec& s) { s.mutable_checkpoint()->set_interval_steps(5); }},
      {"checkpoint.dir", [](v1::JobSpec& s) { s.mutable_checkpoint()->set_dir("/shared/../etc"); }},
      {"checkpoint.keep_last", [](v1::JobSpec& s) { s.mutable_checkpoint()->set_dir("/c"); s.mutable_checkpoint()->set_keep_last(-1); }},
      {"checkpoint.keep_last", [](v1::JobSpec& s) { s.mutable_checkpoint()->set_dir("/c"); s.mutable_checkpoint()->set_keep_last(1'000'001); }},
      {"checkpoint.dir", [](v1::JobSpec& s) { s.mutable_checkpoint()->set_keep_last(2); }},
      {"checkpoint.dir", [](v1::JobSpec& s) { s.mutable_checkpoint()->set_resume_from("latest"); }},
      {"checkpoint.resume_from", [](v1::JobSpec& s) { s.mutable_checkpoint()->set_dir("/c"); s.mutable_checkpoint()->set_resume_from("newest"); }},
      {"checkpoint.resume_from", [](v1::JobSpec& s) { s.mutable_checkpoint()->set_dir("/c"); s.mutable_checkpoint()->set_resume_from("-3"); }},
      {"checkpoint.resume_from", [](v1::JobSpec& s) { s.mutable_checkpoint()->set_dir("/c"); s.mutable_checkpoint()->set_resume_from("0"); }},
      {"checkpoint.resume_from", [](v1::JobSpec& s) { s.mutable_checkpoint()->set_dir("/c"); s.mutable_checkpoint()->set_resume_from("007"); }},
      {"checkpoint.resume_from", [](v1::JobSpec& s) { s.mutable_checkpoint()->set_dir("/c"); s.mutable_checkpoint()->set_resume_from("99999999999"); }},
      {"checkpoint.resume_from: step 10 must be before steps (10)", [](v1::JobSpec& s) { s.mutable_checkpoint()->set_dir("/c"); s.mutable_checkpoint()->set_resume_from(std::to_string(s.steps())); }},
      {"loss_chunk_tokens", [](v1::JobSpec& s) { s.set_loss_chunk_tokens(-1); }},
      {"step_timeout_s", [](v1::JobSpec& s) { s.set_step_timeout_s(-1); }},
      {"step_timeout_s: must be <=", [](v1::JobSpec& s) { s.set_step_timeout_s(kMaxStepTimeoutSeconds + 1); }},
      {"max_restarts", [](v1::JobSpec& s) { s.set_max_restarts(-1); }},
      {"memory.recompute: unknown policy 7", [](v1::JobSpec& s) { s.mutable_memory()->set_recompute(static_cast<v1::MemoryConfig::Recompute>(7)); }},
      {"memory.every_n_blocks", [](v1::JobSpec& s) { s.mutable_memory()->set_every_n_blocks(-1); }},
      {"memory.every_n_blocks: must be in [0, model.n_layers", [](v1::JobSpec& s) { s.mutable_memory()->set_every_n_blocks(s.model().n_layers() + 1); }},
      {"max_restarts: must be <=", [](v1::JobSpec& s) { s.set_max_restarts(kMaxRestarts + 1); }},
      {"attention_kernels: unknown kernels 9", [](v1::JobSpec& s) { s.set_attention_kernels(static_cast<v1::AttentionKernels>(9)); }},
      // Upper limits (common/spec_limits.h): values that once aborted the
      // coordinator, the worker, or every later `tessera jobs`.
      {"steps: must be <= 10000000", [](v1::JobSpec& s) { s.set_steps(2147483647); }},
      {"data.synthetic.num_tokens: must be <=", [](v1::JobSpec& s) { s.mutable_data()->mutable_synthetic()->set_num_tokens(1'000'000'000'000); }},
      {"name: must be at most 256 bytes", [](v1::JobSpec& s) { s.set_name(std::string(10 << 20, '7')); }},
      {"model.vocab_size: must be <=", [](v1::JobSpec& s) { s.mutable_model()->set_vocab_size(kMaxVocabSize + 1); }},
  };
  for (const Case& c : cases) {
    v1::JobSpec spec = ValidSpec();
    c.mutate(spec);
    absl::Status s = ValidateJobSpec(spec);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_NE(s.message().find(c.field), std::string::npos) << c.field << " -> " << s.message();
  }
}

TEST(SpecValidation, ShadowLossSettingsInRangePass) {
  for (const int interval : {0, 1, 100, static_cast<int>(kMaxSteps)}) {
    v1::JobSpec spec = ValidSpec();
    spec.mutable_fp8()->set_shadow_interval_steps(interval);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << interval;
    if (interval == 0) continue;
    for (const float warn : {0.f, 1e-6f, 0.1f, kMaxShadowGapWarn}) {
      spec.mutable_fp8()->set_shadow_gap_warn(warn);
      EXPECT_TRUE(ValidateJobSpec(spec).ok()) << interval << " warn " << warn;
    }
    spec.mutable_fp8()->mutable_current();  // both scalings
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << interval;
    // 0 (the default) up to the whole micro-batch of 4 sequences.
    for (const int sequences : {0, 1, 2, 4}) {
      spec.mutable_fp8()->set_shadow_batch_sequences(sequences);
      EXPECT_TRUE(ValidateJobSpec(spec).ok()) << interval << " sequences " << sequences;
    }
  }
}

TEST(SpecValidation, ShadowBatchSequencesDefaultIsTwoOrTheWholeMicroBatch) {
  EXPECT_EQ(ShadowBatchSequences(0, 8), kDefaultShadowBatchSequences);
  EXPECT_EQ(kDefaultShadowBatchSequences, 2);
  EXPECT_EQ(ShadowBatchSequences(0, 2), 2);
  EXPECT_EQ(ShadowBatchSequences(0, 1), 1);
  EXPECT_EQ(ShadowBatchSequences(3, 8), 3);
  EXPECT_EQ(ShadowBatchSequences(8, 8), 8);
}

TEST(SpecValidation, RecomputePoliciesAndBlockStridesInRangePass) {
  for (const auto policy : {v1::MemoryConfig::RECOMPUTE_UNSPECIFIED, v1::MemoryConfig::NONE,
                            v1::MemoryConfig::BLOCKS, v1::MemoryConfig::SELECTIVE}) {
    v1::JobSpec spec = ValidSpec();
    for (int every : {0, 1, spec.model().n_layers()}) {
      spec.mutable_memory()->set_recompute(policy);
      spec.mutable_memory()->set_every_n_blocks(every);
      EXPECT_TRUE(ValidateJobSpec(spec).ok()) << policy << " every " << every;
    }
  }
}

// Every implementation has an atomic backward: cuDNN's fp32 atomics, and
// Tessera's one pass adding dQ out of key-block order.
TEST(SpecValidation, AttentionKernelChoicesPass) {
  for (const auto kernels : {v1::ATTENTION_KERNELS_AUTO, v1::ATTENTION_KERNELS_TESSERA,
                             v1::ATTENTION_KERNELS_CUDNN}) {
    for (const bool atomic : {false, true}) {
      v1::JobSpec spec = ValidSpec();
      spec.set_attention_kernels(kernels);
      spec.set_nondeterministic_attention_backward(atomic);
      EXPECT_TRUE(ValidateJobSpec(spec).ok()) << kernels << " atomic " << atomic;
    }
  }
}

TEST(SpecValidation, ShardGroupSizesThatDivideTheRanksPass) {
  for (int group : {0, 1, 2, 4}) {
    v1::JobSpec spec = ValidSpec();
    spec.set_world_size(4);
    spec.mutable_parallelism()->set_shard_group_size(group);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << group;
  }
}

TEST(SpecValidation, CheckpointKeepLastAndResumeFromAcceptTheirRange) {
  for (const char* from : {"latest", "1", "9"}) {
    v1::JobSpec spec = ValidSpec();
    spec.mutable_checkpoint()->set_dir("/shared/ckpt");
    spec.mutable_checkpoint()->set_keep_last(3);
    spec.mutable_checkpoint()->set_resume_from(from);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << from << ": " << ValidateJobSpec(spec);
  }
}

TEST(SpecValidation, UnknownFieldsAreRefusedWithTheirPath) {
  // A client built from a newer job.proto (or a hand-made message) sends
  // fields this coordinator does not know; they must not be dropped silently.
  v1::JobSpec top = ValidSpec();
  top.GetReflection()->MutableUnknownFields(&top)->AddVarint(99, 1);
  absl::Status s = ValidateJobSpec(top);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("JobSpec: unknown field number 99", 0), 0u) << s.message();

  v1::JobSpec nested = ValidSpec();
  v1::SyntheticData* synthetic = nested.mutable_data()->mutable_synthetic();
  synthetic->GetReflection()->MutableUnknownFields(synthetic)->AddLengthDelimited(42, "x");
  s = ValidateJobSpec(nested);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("data.synthetic: unknown field number 42", 0), 0u) << s.message();

  // The same bytes parsed from the wire.
  std::string wire = ValidSpec().SerializeAsString();
  wire += std::string("\xa8\x06\x01", 3);  // field 101, varint 1
  v1::JobSpec parsed;
  ASSERT_TRUE(parsed.ParseFromString(wire));
  EXPECT_EQ(ValidateJobSpec(parsed).code(), absl::StatusCode::kInvalidArgument);
}

v1::JobSpec MixtureSpec() {
  v1::JobSpec spec = ValidSpec();
  spec.mutable_data()->clear_synthetic();
  for (auto [path, weight] : {std::pair<const char*, double>{"/data/web", 0.5},
                              {"/data/code.tok", 0.3},
                              {"/data/books", 0.2}}) {
    v1::DataSource* source = spec.mutable_data()->add_sources();
    source->set_path(path);
    source->set_weight(weight);
  }
  return spec;
}

TEST(SpecValidation, MixturesPass) {
  v1::JobSpec spec = MixtureSpec();
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  v1::ValidationConfig* v = spec.mutable_data()->mutable_validation();
  v->add_sources()->set_path("/data/val-web");  // validation weights are not needed
  v->add_sources()->set_path("/data/val-code.tok");
  v->set_eval_interval_steps(5);
  v->set_eval_batches(2);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

TEST(SpecValidation, MixtureRulesNameTheirField) {
  std::vector<Case> cases = {
      {"data: set exactly one of data.token_file, data.synthetic and data.sources",
       [](v1::JobSpec& s) { s.mutable_data()->set_token_file("/data/x.tok"); }},
      {"data: set exactly one",
       [](v1::JobSpec& s) { s.mutable_data()->mutable_synthetic()->set_task(v1::SyntheticData::COPY); }},
      {"data.sources[2].weight: must be finite and > 0",
       [](v1::JobSpec& s) { s.mutable_data()->mutable_sources(2)->set_weight(0); }},
      {"data.sources[1].weight: must be finite and > 0",
       [](v1::JobSpec& s) { s.mutable_data()->mutable_sources(1)->set_weight(-0.5); }},
      {"data.sources[0].weight: must be finite and > 0",
       [](v1::JobSpec& s) { s.mutable_data()->mutable_sources(0)->set_weight(std::nan("")); }},
      {"data.sources[2].weight: 1e-07 is",
       [](v1::JobSpec& s) { s.mutable_data()->mutable_sources(2)->set_weight(1e-7); }},
      {"data.sources[1].path: must be a non-empty path",
       [](v1::JobSpec& s) { s.mutable_data()->mutable_sources(1)->clear_path(); }},
      {"data.sources[2].path: must be at most 4096 bytes",
       [](v1::JobSpec& s) { s.mutable_data()->mutable_sources(2)->set_path(std::string(5000, 'a')); }},
      {"data.sources[2].path: repeats data.sources[0].path",
       [](v1::JobSpec& s) { s.mutable_data()->mutable_sources(2)->set_path("/data/web"); }},
      {"data.sources: at most 64 sources (got 65)",
       [](v1::JobSpec& s) {
         for (int i = 3; i < 65; ++i) {
           v1::DataSource* x = s.mutable_data()->add_sources();
           x->set_path(absl::StrCat("/data/", i));
           x->set_weight(1);
         }
       }},
      {"data.validation: set either data.validation.token_file or data.validation.sources",
       [](v1::JobSpec& s) {
         v1::ValidationConfig* v = s.mutable_data()->mutable_validation();
         v->set_token_file("/data/val.tok");
         v->add_sources()->set_path("/data/val2.tok");
         v->set_eval_interval_steps(1);
         v->set_eval_batches(1);
       }},
      {"data.validation.sources[1].path: must be a non-empty path",
       [](v1::JobSpec& s) {
         v1::ValidationConfig* v = s.mutable_data()->mutable_validation();
         v->add_sources()->set_path("/data/val.tok");
         v->add_sources();
         v->set_eval_interval_steps(1);
         v->set_eval_batches(1);
       }},
  };
  for (const Case& c : cases) {
    v1::JobSpec spec = MixtureSpec();
    c.mutate(spec);
    absl::Status s = ValidateJobSpec(spec);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_EQ(s.message().rfind(c.field, 0), 0u) << "want " << c.field << ", got " << s.message();
  }
  // An unknown field inside a source is named by its index.
  v1::JobSpec spec = MixtureSpec();
  v1::DataSource* source = spec.mutable_data()->mutable_sources(1);
  source->GetReflection()->MutableUnknownFields(source)->AddVarint(7, 1);
  absl::Status s = ValidateJobSpec(spec);
  EXPECT_EQ(s.message().rfind("data.sources[1]: unknown field number 7", 0), 0u) << s.message();
}

TEST(SpecValidation, KvHeadsMustDivideTheQueryHeads) {
  for (int kv_heads : {0, 1, 2, 4}) {  // n_heads 4; 0 means 4
    v1::JobSpec spec = ValidSpec();
    spec.mutable_model()->set_n_kv_heads(kv_heads);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << kv_heads << ": " << ValidateJobSpec(spec);
  }
  for (int kv_heads : {-4, -1, 3, 5, 8}) {
    v1::JobSpec spec = ValidSpec();
    spec.mutable_model()->set_n_kv_heads(kv_heads);
    const absl::Status s = ValidateJobSpec(spec);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << kv_heads;
    EXPECT_EQ(s.message().rfind("model.n_kv_heads: ", 0), 0u) << s.message();
    const std::string reason = kv_heads < 0 ? ">= 0" : "must divide model.n_heads";
    EXPECT_NE(s.message().find(reason), std::string::npos) << s.message();
  }
}

TEST(SpecValidation, CudaJobsNeedHeadDim64Or128) {
  struct Shape {
    int d_model, n_heads;
  };
  for (v1::DeviceKind kind : {v1::CUDA, v1::CPU, v1::DEVICE_KIND_UNSPECIFIED}) {
    for (Shape shape : {Shape{128, 2}, Shape{512, 8}, Shape{256, 2}, Shape{1024, 8}}) {
      v1::JobSpec spec = ValidSpec();
      spec.set_device_kind(kind);
      spec.mutable_model()->set_d_model(shape.d_model);
      spec.mutable_model()->set_n_heads(shape.n_heads);
      spec.mutable_model()->set_n_kv_heads(1);
      EXPECT_TRUE(ValidateJobSpec(spec).ok()) << shape.d_model << "/" << shape.n_heads;
    }
    // Head dims 16, 32, 96 and 256: fine on the CPU engine, refused on CUDA.
    for (Shape shape : {Shape{64, 4}, Shape{128, 4}, Shape{192, 2}, Shape{512, 2}}) {
      v1::JobSpec spec = ValidSpec();
      spec.set_device_kind(kind);
      spec.mutable_model()->set_d_model(shape.d_model);
      spec.mutable_model()->set_n_heads(shape.n_heads);
      const absl::Status s = ValidateJobSpec(spec);
      if (kind != v1::CUDA) {
        EXPECT_TRUE(s.ok()) << shape.d_model << "/" << shape.n_heads << ": " << s;
        continue;
      }
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_EQ(s.message().rfind("model.n_heads: ", 0), 0u) << s.message();
      EXPECT_NE(s.message().find("64 or 128"), std::string::npos) << s.message();
      EXPECT_NE(s.message().find(absl::StrCat("= ", shape.d_model / shape.n_heads, ")")),
                std::string::npos)
          << s.message();
    }
  }
}

TEST(SpecValidation, LongSequencesAreAccepted) {
  for (v1::DeviceKind kind : {v1::CPU, v1::CUDA}) {
    for (int seq_len : {2, 4096, 8192, 32768}) {
      v1::JobSpec spec = ValidSpec();
      spec.set_device_kind(kind);
      spec.mutable_model()->set_d_model(256);  // head dim 64
      spec.mutable_model()->set_seq_len(seq_len);
      EXPECT_TRUE(ValidateJobSpec(spec).ok()) << seq_len << ": " << ValidateJobSpec(spec);
    }
  }
}

TEST(SpecValidation, DefaultsFillUnsetFields) {
  v1::JobSpec spec = WithDefaults(ValidSpec());
  EXPECT_FLOAT_EQ(spec.optimizer().beta1(), 0.9f);
  EXPECT_FLOAT_EQ(spec.optimizer().beta2(), 0.95f);
  EXPECT_FLOAT_EQ(spec.optimizer().eps(), 1e-8f);
  EXPECT_FLOAT_EQ(spec.model().norm_eps(), 1e-5f);
  EXPECT_FLOAT_EQ(spec.model().rope_theta(), 10000.f);
  EXPECT_EQ(spec.model().n_kv_heads(), spec.model().n_heads());
  EXPECT_EQ(spec.device_kind(), v1::CPU);
  EXPECT_EQ(spec.fp8().delayed().amax_history_len(), 16);
  EXPECT_EQ(spec.optimizer().schedule(), v1::OptimizerConfig::COSINE);
  EXPECT_GT(spec.loss_chunk_tokens(), 0);
  EXPECT_EQ(spec.step_timeout_s(), kDefaultStepTimeoutSeconds);
  EXPECT_TRUE(ValidateJobSpec(spec).ok());
  // Explicit values are kept.
  v1::JobSpec explicit_spec = ValidSpec();
  explicit_spec.mutable_optimizer()->set_beta1(0.5f);
  explicit_spec.mutable_fp8()->mutable_current();
  explicit_spec.mutable_model()->set_n_kv_heads(2);
  v1::JobSpec filled = WithDefaults(explicit_spec);
  EXPECT_FLOAT_EQ(filled.optimizer().beta1(), 0.5f);
  EXPECT_EQ(filled.model().n_kv_heads(), 2);
  EXPECT_TRUE(filled.fp8().has_current());
}

}  // namespace
}  // namespace tessera
