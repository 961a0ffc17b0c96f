// The spec hash changes with every field that shapes saved state and with
// none of those a resumed job may change.
#include "worker/trainer/spec_hash.h"

#include "gtest/gtest.h"
#include "worker/trainer/test_job_spec.h"

namespace tessera {
namespace {

TEST(SpecHash, CoversStateShapingFieldsOnly) {
  const v1::JobSpec base = TinyCpuTestJobSpec(1);
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
  EXPECT_TRUE(changed([](v1::JobSpec& s) { s.mutable_fp8()->set_disabled(true); }));
  EXPECT_TRUE(changed([](v1::JobSpec& s) { s.mutable_fp8()->mutable_current(); }));
  EXPECT_TRUE(changed([](v1::JobSpec& s) { s.mutable_data()->set_micro_batch_size(3); }));
  EXPECT_TRUE(changed([](v1::JobSpec& s) { s.set_seed(s.seed() + 1); }));

  EXPECT_FALSE(changed([](v1::JobSpec& s) { s.set_name("renamed"); }));
  EXPECT_FALSE(changed([](v1::JobSpec& s) { s.set_world_size(8); }));
  EXPECT_FALSE(changed([](v1::JobSpec& s) { s.set_steps(5); }));
  EXPECT_FALSE(changed([](v1::JobSpec& s) { s.mutable_checkpoint()->set_dir("/elsewhere"); }));
  EXPECT_FALSE(changed([](v1::JobSpec& s) { s.set_reshard_after_forward(true); }));
  EXPECT_FALSE(changed([](v1::JobSpec& s) { s.set_step_timeout_s(9); }));
}

}  // namespace
}  // namespace tessera
