// A statistics record's WARNING events: one per tensor past a threshold,
// worst first, naming block, tensor, fraction and threshold; none for a
// record within the thresholds; at most kMaxFp8Warnings, the last saying
// how many more passed.
#include "server/fp8_numerics_warning.h"

#include "gtest/gtest.h"

namespace tessera {
namespace {

v1::Fp8TensorStats Tensor(int block, const char* linear, double saturated, double underflow) {
  v1::Fp8TensorStats t;
  t.set_block(block);
  t.set_linear(linear);
  t.set_role(v1::Fp8TensorStats::INPUT);
  t.set_format("e4m3");
  t.set_amax(812);
  t.set_scale(0.55f);
  t.set_elements(10000);
  t.set_saturated_fraction(saturated);
  t.set_underflow_fraction(underflow);
  return t;
}

TEST(Fp8NumericsWarning, NamesTheTensorTheFractionAndTheThreshold) {
  v1::Fp8Numerics record;
  record.set_step(40);
  *record.add_tensors() = Tensor(0, "qkv", 0.0001, 0.001);   // within both
  *record.add_tensors() = Tensor(3, "down", 0.0231, 0.0);    // saturates
  *record.add_tensors() = Tensor(2, "gate_up", 0.0, 0.62);   // underflows
  *record.add_tensors() = Tensor(1, "qkv", 0.0, 0.2);        // as healthy gradients do
  v1::Fp8Recipe recipe;  // default thresholds: 0.1% and 50%
  const std::vector<v1::Fp8NumericsWarning> w = Fp8NumericsWarnings(record, recipe);
  ASSERT_EQ(w.size(), 2);
  EXPECT_EQ(w[0].severity(), v1::WARNING);
  EXPECT_EQ(w[0].kind(), v1::Fp8NumericsWarning::SATURATION);
  EXPECT_EQ(w[0].step(), 40);
  EXPECT_EQ(w[0].tensor().block(), 3);
  EXPECT_DOUBLE_EQ(w[0].threshold(), 0.001);
  EXPECT_EQ(w[0].message(),
            "step 40: block 3 down input (e4m3): 2.31% of values saturate at the format's "
            "maximum (threshold 0.10%; amax 812, scale 0.55)");
  EXPECT_EQ(w[1].kind(), v1::Fp8NumericsWarning::UNDERFLOW);
  EXPECT_NE(w[1].message().find("block 2 gate_up input (e4m3): 62.00% of values underflow to zero "
                                "(threshold 50.00%"),
            std::string::npos)
      << w[1].message();

  recipe.set_saturation_warn_fraction(0.05);
  recipe.set_underflow_warn_fraction(0.7);
  EXPECT_TRUE(Fp8NumericsWarnings(record, recipe).empty());
}

TEST(Fp8NumericsWarning, StepZeroOfDelayedScalingJudgesOnlyTheWeights) {
  v1::Fp8Numerics record;
  record.set_step(0);
  *record.add_tensors() = Tensor(0, "down", 0.0, 0.8);  // an input, at scale 1
  v1::Fp8TensorStats weight = Tensor(1, "qkv", 0.3, 0.0);
  weight.set_role(v1::Fp8TensorStats::WEIGHT);
  *record.add_tensors() = weight;
  const std::vector<v1::Fp8NumericsWarning> w = Fp8NumericsWarnings(record, v1::Fp8Recipe());
  ASSERT_EQ(w.size(), 1);
  EXPECT_EQ(w[0].tensor().linear(), "qkv");
  // Current scaling measures every tensor before its cast: all count.
  v1::Fp8Recipe current;
  current.mutable_current();
  EXPECT_EQ(Fp8NumericsWarnings(record, current).size(), 2);
  // So does every later step.
  record.set_step(1);
  EXPECT_EQ(Fp8NumericsWarnings(record, v1::Fp8Recipe()).size(), 2);
}

TEST(Fp8NumericsWarning, AtMostAFewPerRecord) {
  v1::Fp8Numerics record;
  record.set_step(5);
  for (int b = 0; b < 12; ++b) *record.add_tensors() = Tensor(b, "qkv", 0.01 * (b + 1), 0.0);
  const std::vector<v1::Fp8NumericsWarning> w = Fp8NumericsWarnings(record, v1::Fp8Recipe());
  ASSERT_EQ(w.size(), kMaxFp8Warnings);
  EXPECT_EQ(w[0].tensor().block(), 11);  // the worst first
  EXPECT_NE(w.back().message().find("and 4 more"), std::string::npos) << w.back().message();
}

}  // namespace
}  // namespace tessera
