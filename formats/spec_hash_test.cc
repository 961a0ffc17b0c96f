// The spec hash changes with every field that shapes saved state and with
// none of those a resumed job may change.
#include "formats/spec_hash.h"

#include "gtest/gtest.h"

namespace tessera {
namespace {

// A small job with every covered section set.
v1::JobSpec BaseSpec() {
  v1::JobSpec spec;
  v1::ModelConfig* m = spec.mutable_model();
  m->set_vocab_size(64);
  m->set_d_model(32);
  m->set_n_layers(2);
  m->set_n_heads(2);
  m->set_ffn_dim(48);
  m->set_seq_len(16);
  m->set_norm_eps(1e-5f);
  m->set_rope_theta(10000.f);
  spec.mutable_data()->set_micro_batch_size(1);
  spec.mutable_data()->mutable_synthetic()->set_task(v1::SyntheticData::ADDITION);
  spec.mutable_optimizer()->set_lr(3e-3f);
  spec.mutable_optimizer()->set_beta2(0.95f);
  spec.mutable_fp8()->mutable_delayed()->set_amax_history_len(4);
  spec.set_steps(1000);
  spec.set_seed(11);
  return spec;
}

TEST(SpecHash, CoversStateShapingFieldsOnly) {
  const v1::JobSpec base = BaseSpec();
  const std::string h = CheckpointSpecHash(base);
  EXPECT_EQ(h.size(), 64u);
  EXPECT_EQ(h, CheckpointSpecHash(base));

  auto changed = [&](auto edit) {
    v1::JobSpec s = base;
    edit(s);
    return CheckpointSpecHash(s) != h;
  };
  EXPECT_TRUE(changed([](v1::JobSpec& s) { s.mutable_model()->set_d_model(64); }));
  EXPECT_TRUE(changed([](v1::JobSpec& s) { s.mutable_model()->set_rope_theta(500.f); }));
  EXPECT_TRUE(changed([](v1::JobSpec& s) { s.mutable_optimizer()->set_beta2(0.99f); }));
  EXPECT_TRUE(changed([](v1::JobSpec& s) { s.mutable_data()->set_micro_batch_size(3); }));
  EXPECT_TRUE(changed([](v1::JobSpec& s) { s.set_seed(s.seed() + 1); }));

  EXPECT_FALSE(changed([](v1::JobSpec& s) { s.set_name("renamed"); }));
  EXPECT_FALSE(changed([](v1::JobSpec& s) { s.set_world_size(8); }));
  EXPECT_FALSE(changed([](v1::JobSpec& s) { s.set_steps(5); }));
  EXPECT_FALSE(changed([](v1::JobSpec& s) { s.mutable_checkpoint()->set_dir("/elsewhere"); }));
  EXPECT_FALSE(changed([](v1::JobSpec& s) { s.set_reshard_after_forward(true); }));
  EXPECT_FALSE(changed([](v1::JobSpec& s) { s.set_step_timeout_s(9); }));
  EXPECT_FALSE(changed([](v1::JobSpec& s) { s.set_disable_step_graph(true); }));
  // The recipe is recorded beside the hash and may change on resume.
  EXPECT_FALSE(changed([](v1::JobSpec& s) { s.mutable_fp8()->set_disabled(true); }));
  EXPECT_FALSE(changed([](v1::JobSpec& s) { s.mutable_fp8()->mutable_current(); }));
  // Statistics measure the state; they change none of it.
  EXPECT_FALSE(changed([](v1::JobSpec& s) { s.mutable_fp8()->set_stats_interval_steps(10); }));
  EXPECT_FALSE(changed([](v1::JobSpec& s) { s.mutable_fp8()->set_saturation_warn_fraction(0.5); }));
  EXPECT_FALSE(changed([](v1::JobSpec& s) { s.mutable_fp8()->set_underflow_warn_fraction(0.5); }));
  // The shadow loss reads the state and writes none of it.
  EXPECT_FALSE(changed([](v1::JobSpec& s) { s.mutable_fp8()->set_shadow_interval_steps(100); }));
  EXPECT_FALSE(changed([](v1::JobSpec& s) { s.mutable_fp8()->set_shadow_gap_warn(0.5f); }));
  EXPECT_FALSE(changed([](v1::JobSpec& s) { s.mutable_fp8()->set_shadow_batch_sequences(1); }));
  // Recomputation changes what a step keeps in memory, never a saved bit.
  EXPECT_FALSE(changed([](v1::JobSpec& s) {
    s.mutable_memory()->set_recompute(v1::MemoryConfig::BLOCKS);
  }));
}

// Version 1 manifests recorded a hash that covered fp8 too: it is computed
// the same way as before, so those checkpoints still load.
TEST(SpecHash, LegacyHashCoversTheFp8Recipe) {
  const v1::JobSpec base = BaseSpec();
  v1::JobSpec bf16 = base;
  bf16.mutable_fp8()->set_disabled(true);
  EXPECT_NE(LegacyCheckpointSpecHash(base), LegacyCheckpointSpecHash(bf16));
  EXPECT_NE(LegacyCheckpointSpecHash(base), CheckpointSpecHash(base));
  v1::JobSpec named = base;
  named.set_name("other");
  EXPECT_EQ(LegacyCheckpointSpecHash(base), LegacyCheckpointSpecHash(named));
  v1::JobSpec watched = base;
  watched.mutable_fp8()->set_stats_interval_steps(10);
  EXPECT_EQ(LegacyCheckpointSpecHash(base), LegacyCheckpointSpecHash(watched));
  v1::JobSpec shadowed = base;
  shadowed.mutable_fp8()->set_shadow_interval_steps(100);
  shadowed.mutable_fp8()->set_shadow_gap_warn(0.5f);
  shadowed.mutable_fp8()->set_shadow_batch_sequences(1);
  EXPECT_EQ(LegacyCheckpointSpecHash(base), LegacyCheckpointSpecHash(shadowed));
}

// A checkpoint written with GEMM tuning on resumes with it off and the
// other way round: the choice of algorithm shapes no saved state.
TEST(SpecHash, GemmTuningDoesNotChangeTheHash) {
  v1::JobSpec tuned = BaseSpec();
  tuned.set_nondeterministic_gemm_tuning(true);
  EXPECT_EQ(CheckpointSpecHash(tuned), CheckpointSpecHash(BaseSpec()));
}

}  // namespace
}  // namespace tessera
