// Quantize / QuantizeTranspose / Dequantize / Amax / Transpose /
// UpdateFp8Scales against per-element expectations on random inputs.
#include "worker/engine/cpu/quantize.h"

#include <cmath>

#include "gtest/gtest.h"
#include "worker/engine/cpu/fp8.h"
#include "worker/engine/cpu/reference_test_util.h"

namespace tessera {
namespace cpu {
namespace {

using testing::RandomFloats;
using testing::ToBf16;

class QuantizeTest : public ::testing::TestWithParam<std::tuple<DType, DType, int, int>> {};

TEST_P(QuantizeTest, MatchesPerElementEncodingWithFusedAmax) {
  auto [in_dtype, out_dtype, rows, cols] = GetParam();
  const int n = rows * cols;
  std::vector<float> x = RandomFloats(n, 17 + rows, 3.0f);
  std::vector<uint16_t> xb = ToBf16(x);
  TensorDesc in = in_dtype == DType::kFloat32 ? MakeTensor(x.data(), in_dtype, Shape{rows, cols})
                                               : MakeTensor(xb.data(), in_dtype, Shape{rows, cols});
  std::vector<uint8_t> q(n, 0xAA), qt(n, 0xAA);
  float scale = 37.5f, scale_inv = -1, amax = 0.25f;
  TensorDesc out = MakeTensor(q.data(), out_dtype, Shape{rows, cols});
  out.scale = &scale;
  out.scale_inv = &scale_inv;
  out.amax = &amax;
  TensorDesc out_t = MakeTensor(qt.data(), out_dtype, Shape{cols, rows});
  ASSERT_TRUE(QuantizeTranspose(in, out, out_t).ok());
  float want_amax = 0.25f;
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      float v = in_dtype == DType::kFloat32 ? x[r * cols + c] : Bf16ToFloat(xb[r * cols + c]);
      want_amax = std::max(want_amax, std::fabs(v));
      uint8_t code = EncodeFp8(out_dtype, v * scale);
      ASSERT_EQ(q[r * cols + c], code);
      ASSERT_EQ(qt[c * rows + r], code);
    }
  }
  EXPECT_EQ(amax, want_amax);
  EXPECT_EQ(scale_inv, 1.0f / scale);
  // Plain Quantize gives the same bytes; Dequantize inverts within FP8 precision.
  std::vector<uint8_t> q2(n, 0x11);
  TensorDesc out2 = out;
  out2.data = q2.data();
  ASSERT_TRUE(Quantize(in, out2).ok());
  EXPECT_EQ(q2, q);
  std::vector<float> back(n, NAN);
  ASSERT_TRUE(Dequantize(out, MakeTensor(back.data(), DType::kFloat32, Shape{n})).ok());
  const float rel = out_dtype == DType::kE4M3 ? 1.0f / 16 : 1.0f / 8;
  for (int i = 0; i < n; ++i) {
    float v = in_dtype == DType::kFloat32 ? x[i] : Bf16ToFloat(xb[i]);
    EXPECT_NEAR(back[i], v, std::fabs(v) * rel + 1e-3f) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, QuantizeTest,
                         ::testing::Combine(::testing::Values(DType::kFloat32, DType::kBFloat16),
                                            ::testing::Values(DType::kE4M3, DType::kE5M2),
                                            ::testing::Values(1, 7, 32),
                                            ::testing::Values(1, 13, 64)));

TEST(UpdateFp8Scales, DelayedMaxHistoryMarginAndZeroAmax) {
  const int n = 3, len = 4;
  float amax[n] = {2.0f, 0.0f, 1.0f};
  float history[len * n] = {0};
  history[1 * n + 0] = 8.0f;  // an older, larger amax for tensor 0
  float scale[n] = {1, 5, 1}, scale_inv[n] = {1, 0.2f, 1};
  ASSERT_TRUE(UpdateFp8Scales(amax, history, scale, scale_inv, n, len, 448.0f, 1, AmaxAlgo::kMax).ok());
  EXPECT_FLOAT_EQ(scale[0], 448.0f / 8.0f / 2.0f);  // max over history, margin 1
  EXPECT_FLOAT_EQ(scale_inv[0], 1.0f / scale[0]);
  EXPECT_FLOAT_EQ(scale[1], 5.0f);  // zero amax keeps the scale
  EXPECT_FLOAT_EQ(scale[2], 224.0f);
  EXPECT_FLOAT_EQ(history[0], 2.0f);         // newest in row 0
  EXPECT_FLOAT_EQ(history[2 * n + 0], 8.0f);  // rolled down one row
  EXPECT_EQ(amax[0], 0.0f);                   // consumed
  amax[0] = 1.0f;
  ASSERT_TRUE(UpdateFp8Scales(amax, history, scale, scale_inv, n, len, 448.0f, 0,
                              AmaxAlgo::kMostRecent).ok());
  EXPECT_FLOAT_EQ(scale[0], 448.0f);
}

TEST(Transpose, TransposesBytesAndWords) {
  std::vector<uint8_t> a(6);
  for (int i = 0; i < 6; ++i) a[i] = static_cast<uint8_t>(i * 7 + 1);
  std::vector<uint8_t> t(6, 0);
  float sinv = 0.5f, sinv_out = 0;
  TensorDesc in = MakeTensor(a.data(), DType::kE4M3, Shape{2, 3});
  in.scale_inv = &sinv;
  TensorDesc out = MakeTensor(t.data(), DType::kE4M3, Shape{3, 2});
  out.scale_inv = &sinv_out;
  ASSERT_TRUE(Transpose(in, out).ok());
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 3; ++c) EXPECT_EQ(t[c * 2 + r], a[r * 3 + c]);
  }
  EXPECT_EQ(sinv_out, 0.5f);
  EXPECT_FALSE(Transpose(in, MakeTensor(t.data(), DType::kE4M3, Shape{2, 3})).ok());
}

TEST(Amax, IgnoresNaNAndCombines) {
  std::vector<float> x = {1.0f, -3.5f, NAN, 2.0f};
  float amax = 1.0f;
  ASSERT_TRUE(Amax(MakeTensor(x.data(), DType::kFloat32, Shape{4}), &amax).ok());
  EXPECT_EQ(amax, 3.5f);
}

}  // namespace
}  // namespace cpu
}  // namespace tessera
