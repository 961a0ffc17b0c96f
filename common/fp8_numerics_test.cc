// The ranks' parts of an FP8 statistics step add up (counts summed, amax
// and scale the largest, matched by tensor whatever the order), the
// fractions follow, the thresholds default, and "worst first" orders by
// saturation, then underflow.
#include "common/fp8_numerics.h"

#include "gtest/gtest.h"

namespace tessera {
namespace {

v1::Fp8TensorStats Part(int block, const char* linear, v1::Fp8TensorStats::Role role,
                        float amax, int64_t saturated, int64_t underflowed, int64_t elements) {
  v1::Fp8TensorStats t;
  t.set_block(block);
  t.set_linear(linear);
  t.set_role(role);
  t.set_format(role == v1::Fp8TensorStats::GRADIENT ? "e5m2" : "e4m3");
  t.set_amax(amax);
  t.set_scale(448 / amax);
  t.set_saturated(saturated);
  t.set_underflowed(underflowed);
  t.set_elements(elements);
  return t;
}

TEST(Fp8Numerics, RanksAddUp) {
  google::protobuf::RepeatedPtrField<v1::Fp8TensorStats> rank0, rank1;
  *rank0.Add() = Part(0, "qkv", v1::Fp8TensorStats::INPUT, 2.f, 1, 10, 100);
  *rank0.Add() = Part(1, "down", v1::Fp8TensorStats::GRADIENT, 1.f, 0, 0, 100);
  // The other rank's in another order.
  *rank1.Add() = Part(1, "down", v1::Fp8TensorStats::GRADIENT, 4.f, 3, 50, 300);
  *rank1.Add() = Part(0, "qkv", v1::Fp8TensorStats::INPUT, 1.f, 1, 0, 100);
  v1::Fp8Numerics record;
  AddRankNumerics(rank0, record);
  AddRankNumerics(rank1, record);
  SetFractions(record);
  ASSERT_EQ(record.tensors_size(), 2);
  const v1::Fp8TensorStats& qkv = record.tensors(0);
  EXPECT_EQ(qkv.amax(), 2.f);
  EXPECT_EQ(qkv.scale(), 448.f);  // the largest
  EXPECT_EQ(qkv.saturated(), 2);
  EXPECT_EQ(qkv.underflowed(), 10);
  EXPECT_EQ(qkv.elements(), 200);
  EXPECT_DOUBLE_EQ(qkv.saturated_fraction(), 0.01);
  EXPECT_DOUBLE_EQ(qkv.underflow_fraction(), 0.05);
  const v1::Fp8TensorStats& down = record.tensors(1);
  EXPECT_EQ(down.amax(), 4.f);
  EXPECT_EQ(down.elements(), 400);
  EXPECT_DOUBLE_EQ(down.saturated_fraction(), 3.0 / 400);
  EXPECT_EQ(Fp8TensorName(down), "block 1 down gradient");
  EXPECT_EQ(Fp8TensorName(qkv), "block 0 qkv input");
  EXPECT_DOUBLE_EQ(WorstSaturation(record), 0.01);
  EXPECT_DOUBLE_EQ(WorstUnderflow(record), 50.0 / 400);
}

TEST(Fp8Numerics, WorstFirstBySaturationThenUnderflow) {
  v1::Fp8Numerics record;
  *record.add_tensors() = Part(0, "qkv", v1::Fp8TensorStats::WEIGHT, 1, 0, 5, 100);
  *record.add_tensors() = Part(0, "down", v1::Fp8TensorStats::INPUT, 1, 2, 0, 100);
  *record.add_tensors() = Part(1, "qkv", v1::Fp8TensorStats::WEIGHT, 1, 0, 9, 100);
  *record.add_tensors() = Part(2, "qkv", v1::Fp8TensorStats::WEIGHT, 1, 0, 0, 100);
  SetFractions(record);
  const std::vector<v1::Fp8TensorStats> worst = WorstFp8Tensors(record, 3);
  ASSERT_EQ(worst.size(), 3);
  EXPECT_EQ(Fp8TensorName(worst[0]), "block 0 down input");
  EXPECT_EQ(Fp8TensorName(worst[1]), "block 1 qkv weight");
  EXPECT_EQ(Fp8TensorName(worst[2]), "block 0 qkv weight");
  EXPECT_EQ(WorstFp8Tensors(record, 0).size(), 4);
}

TEST(Fp8Numerics, ThresholdsDefaultWhenZero) {
  v1::Fp8Recipe recipe;
  EXPECT_DOUBLE_EQ(SaturationWarnFraction(recipe), 0.001);
  EXPECT_DOUBLE_EQ(UnderflowWarnFraction(recipe), 0.5);
  recipe.set_saturation_warn_fraction(0.2);
  recipe.set_underflow_warn_fraction(0.3);
  EXPECT_DOUBLE_EQ(SaturationWarnFraction(recipe), 0.2);
  EXPECT_DOUBLE_EQ(UnderflowWarnFraction(recipe), 0.3);
}

}  // namespace
}  // namespace tessera
