// The rule for which job may load which checkpoint: the FP8 recipe may
// change, every other covered field may not, and a refusal names the field.
#include "formats/checkpoint_compatibility.h"

#include "formats/spec_hash.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

v1::JobSpec BaseSpec() {
  v1::JobSpec spec;
  v1::ModelConfig* m = spec.mutable_model();
  m->set_vocab_size(64);
  m->set_d_model(32);
  m->set_n_layers(2);
  m->set_n_heads(2);
  m->set_ffn_dim(48);
  m->set_seq_len(16);
  spec.mutable_data()->set_micro_batch_size(1);
  spec.mutable_data()->mutable_synthetic()->set_task(v1::SyntheticData::ADDITION);
  spec.mutable_optimizer()->set_lr(3e-3f);
  spec.mutable_fp8()->mutable_delayed()->set_amax_history_len(16);
  spec.set_steps(100);
  spec.set_seed(11);
  return spec;
}

// The manifest `spec`'s job writes.
RankManifest ManifestOf(const v1::JobSpec& spec) {
  RankManifest m;
  m.spec = ManifestSpecOf(spec);
  return m;
}

// A manifest as written before recipes were recorded.
RankManifest VersionOneManifestOf(const v1::JobSpec& spec) {
  RankManifest m;
  m.version = 1;
  m.spec.hash = LegacyCheckpointSpecHash(spec);
  return m;
}

TEST(CheckpointCompatibility, EveryChangeOfRecipeIsAllowed) {
  const v1::JobSpec saved = BaseSpec();
  const RankManifest manifest = ManifestOf(saved);
  std::vector<v1::JobSpec> resumed(5, saved);
  resumed[0].mutable_fp8()->set_disabled(true);
  resumed[1].mutable_fp8()->mutable_current();
  resumed[2].mutable_fp8()->mutable_delayed()->set_amax_history_len(4);
  resumed[3].mutable_fp8()->mutable_delayed()->set_margin(1);
  resumed[4].clear_fp8();
  for (const v1::JobSpec& spec : resumed) {
    EXPECT_TRUE(CheckCheckpointFitsJob(manifest, spec, "m").ok()) << spec.fp8().ShortDebugString();
    absl::StatusOr<v1::Fp8Recipe> recipe = SavedFp8Recipe(manifest, spec, "m");
    ASSERT_TRUE(recipe.ok()) << recipe.status();
    EXPECT_EQ(recipe->ShortDebugString(), saved.fp8().ShortDebugString());
  }
  // And from bf16 back to FP8.
  v1::JobSpec bf16 = saved;
  bf16.mutable_fp8()->set_disabled(true);
  EXPECT_TRUE(CheckCheckpointFitsJob(ManifestOf(bf16), saved, "m").ok());
}

TEST(CheckpointCompatibility, OtherChangesAreRefusedNamingTheField) {
  const v1::JobSpec saved = BaseSpec();
  const RankManifest manifest = ManifestOf(saved);
  struct Case {
    void (*edit)(v1::JobSpec&);
    std::string named;
  };
  const Case cases[] = {
      {[](v1::JobSpec& s) { s.mutable_model()->set_d_model(64); },
       "model.d_model: the checkpoint has 32, this job 64"},
      {[](v1::JobSpec& s) { s.mutable_optimizer()->set_lr(1e-3f); }, "optimizer.lr: "},
      {[](v1::JobSpec& s) { s.mutable_data()->set_micro_batch_size(2); },
       "data.micro_batch_size: the checkpoint has 1, this job 2"},
      {[](v1::JobSpec& s) { s.set_seed(12); }, "seed: the checkpoint has 11, this job 12"},
  };
  for (const Case& c : cases) {
    v1::JobSpec spec = saved;
    c.edit(spec);
    // A change of recipe alongside changes nothing in the verdict.
    spec.mutable_fp8()->set_disabled(true);
    const absl::Status s = CheckCheckpointFitsJob(manifest, spec, "step-5/rank-0.manifest");
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("step-5/rank-0.manifest: "), absl::string_view::npos) << s;
    EXPECT_NE(s.message().find(c.named), absl::string_view::npos) << s;
    EXPECT_EQ(s.message().find("fp8"), s.message().find("fp8, world_size")) << s;
  }
  // Fields outside the hash change nothing.
  v1::JobSpec longer = saved;
  longer.set_steps(1000);
  longer.set_world_size(4);
  longer.set_name("renamed");
  EXPECT_TRUE(CheckCheckpointFitsJob(manifest, longer, "m").ok());
}

TEST(CheckpointCompatibility, AManifestWhoseFieldsDoNotMatchItsHashIsDataLoss) {
  v1::JobSpec other = BaseSpec();
  other.set_seed(99);
  RankManifest manifest = ManifestOf(BaseSpec());
  manifest.spec.fields = ManifestOf(other).spec.fields;
  EXPECT_EQ(CheckCheckpointFitsJob(manifest, other, "m").code(), absl::StatusCode::kDataLoss);
  manifest.spec.fields = "\xff\xff";
  EXPECT_EQ(CheckCheckpointFitsJob(manifest, other, "m").code(), absl::StatusCode::kDataLoss);
}

// Checkpoints written before recipes were recorded resume with the same
// recipe; with another they are refused, saying why.
TEST(CheckpointCompatibility, VersionOneCheckpointsResumeOnlyWithTheirRecipe) {
  const v1::JobSpec saved = BaseSpec();
  const RankManifest manifest = VersionOneManifestOf(saved);
  EXPECT_TRUE(CheckCheckpointFitsJob(manifest, saved, "m").ok());
  absl::StatusOr<v1::Fp8Recipe> recipe = SavedFp8Recipe(manifest, saved, "m");
  ASSERT_TRUE(recipe.ok());
  EXPECT_FALSE(Fp8RecipesDiffer(*recipe, saved.fp8()));

  v1::JobSpec bf16 = saved;
  bf16.mutable_fp8()->set_disabled(true);
  const absl::Status s = CheckCheckpointFitsJob(manifest, bf16, "m");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("predates checkpoints that record their spec and FP8 recipe"),
            absl::string_view::npos)
      << s;
}

TEST(CheckpointCompatibility, RecipesAreComparedAsTheyRun) {
  v1::Fp8Recipe unset, explicit_default, disabled_delayed, disabled_current;
  explicit_default.mutable_delayed()->set_amax_history_len(16);
  explicit_default.mutable_delayed()->set_amax_compute(v1::DelayedScaling::MAX);
  disabled_delayed.set_disabled(true);
  disabled_delayed.mutable_delayed()->set_amax_history_len(4);
  disabled_current.set_disabled(true);
  disabled_current.mutable_current();
  EXPECT_FALSE(Fp8RecipesDiffer(unset, explicit_default));
  EXPECT_FALSE(Fp8RecipesDiffer(disabled_delayed, disabled_current));
  EXPECT_TRUE(Fp8RecipesDiffer(unset, disabled_delayed));
  EXPECT_EQ(DescribeFp8RecipeChange(unset, explicit_default), "");

  v1::Fp8Recipe current, tuned;
  current.mutable_current();
  tuned.mutable_delayed()->set_amax_history_len(4);
  tuned.mutable_delayed()->set_margin(2);
  tuned.mutable_delayed()->set_amax_compute(v1::DelayedScaling::MOST_RECENT);
  EXPECT_EQ(DescribeFp8Recipe(unset), "delayed scaling (amax history 16)");
  EXPECT_EQ(DescribeFp8Recipe(disabled_current), "disabled (bf16)");
  EXPECT_EQ(DescribeFp8Recipe(current), "current scaling");
  EXPECT_EQ(DescribeFp8Recipe(tuned), "delayed scaling (amax history 4, margin 2, most recent amax)");
  EXPECT_EQ(DescribeFp8RecipeChange(unset, disabled_delayed),
            "FP8 recipe changed from delayed scaling (amax history 16) to disabled (bf16)");
  EXPECT_EQ(DescribeFp8RecipeChange(disabled_delayed, current),
            "FP8 recipe changed from disabled (bf16) to current scaling");
}

}  // namespace
}  // namespace tessera
