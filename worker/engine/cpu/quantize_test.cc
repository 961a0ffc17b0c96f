// Quantize / QuantizeTranspose / Dequantize / Amax / Transpose /
// UpdateFp8Scales against per-element expectations on random inputs.
#include "worker/engine/cpu/quantize.h"

#include <algorithm>
#include <cmath>
#include <vector>

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
  ASSERT_TRUE(UpdateFp8Scales(amax, history, scale, scale_inv, 1, n, len, 448.0f, 1, AmaxAlgo::kMax)
                  .ok());
  EXPECT_FLOAT_EQ(scale[0], 448.0f / 8.0f / 2.0f);  // max over history, margin 1
  EXPECT_FLOAT_EQ(scale_inv[0], 1.0f / scale[0]);
  EXPECT_FLOAT_EQ(scale[1], 5.0f);  // zero amax keeps the scale
  EXPECT_FLOAT_EQ(scale[2], 224.0f);
  EXPECT_FLOAT_EQ(history[0], 2.0f);         // newest in row 0
  EXPECT_FLOAT_EQ(history[2 * n + 0], 8.0f);  // rolled down one row
  EXPECT_EQ(amax[0], 0.0f);                   // consumed
  amax[0] = 1.0f;
  ASSERT_TRUE(UpdateFp8Scales(amax, history, scale, scale_inv, 1, n, len, 448.0f, 0,
                              AmaxAlgo::kMostRecent)
                  .ok());
  EXPECT_FLOAT_EQ(scale[0], 448.0f);
}

TEST(Quantize, SaturatesNaNAndSkipsNaNInAmax) {
  // Values far beyond fp8_max / scale saturate; NaN input stays NaN and does
  // not poison the fused amax.
  std::vector<float> x = {1000.f, -1e9f, INFINITY, NAN, 0.5f, -0.0f};
  std::vector<uint8_t> q(x.size());
  testing::Poison(q);
  for (DType d : {DType::kE4M3, DType::kE5M2}) {
    float scale = 2.0f, scale_inv = 0.f, amax = 3.0f;
    TensorDesc out = MakeTensor(q.data(), d, Shape{static_cast<int64_t>(x.size())});
    out.scale = &scale;
    out.scale_inv = &scale_inv;
    out.amax = &amax;
    ASSERT_TRUE(Quantize(MakeTensor(x.data(), DType::kFloat32, out.shape), out).ok());
    const uint8_t max_code = d == DType::kE4M3 ? 0x7E : 0x7B;
    EXPECT_EQ(q[0], d == DType::kE4M3 ? max_code : EncodeE5M2(2000.f));
    EXPECT_EQ(q[1], 0x80 | max_code);
    EXPECT_EQ(q[2], max_code);
    EXPECT_EQ(q[3], kFp8NaN);
    EXPECT_EQ(q[4], EncodeFp8(d, 1.0f));
    EXPECT_EQ(q[5], 0x80);
    EXPECT_EQ(amax, INFINITY);  // |inf| is a real maximum; NaN is skipped
    EXPECT_EQ(scale_inv, 0.5f);
  }
}

TEST(QuantizeTranspose, TransposeOnlyWhenOutDataIsNull) {
  const int rows = 5, cols = 9;
  std::vector<uint16_t> x = testing::RandomBf16(rows * cols, 31, 4.0f);
  std::vector<uint8_t> qt(rows * cols);
  testing::Poison(qt);
  float scale = 100.f, scale_inv = 0.f, scale_inv_t = 0.f, amax = 0.f;
  TensorDesc out = MakeTensor(nullptr, DType::kE4M3, Shape{rows, cols});
  out.scale = &scale;
  out.scale_inv = &scale_inv;
  out.amax = &amax;
  TensorDesc out_t = MakeTensor(qt.data(), DType::kE4M3, Shape{cols, rows});
  out_t.scale_inv = &scale_inv_t;
  ASSERT_TRUE(
      QuantizeTranspose(MakeTensor(x.data(), DType::kBFloat16, Shape{rows, cols}), out, out_t)
          .ok());
  float want_amax = 0.f;
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      const float v = Bf16ToFloat(x[r * cols + c]);
      want_amax = std::max(want_amax, std::fabs(v));
      ASSERT_EQ(qt[c * rows + r], EncodeE4M3(v * scale)) << r << "," << c;
    }
  }
  EXPECT_EQ(amax, want_amax);
  EXPECT_EQ(scale_inv, 0.01f);
  EXPECT_EQ(scale_inv_t, 1.0f / scale);
}

TEST(QuantizeTranspose, RejectsMismatchedOutputs) {
  std::vector<float> x = RandomFloats(6, 3);
  std::vector<uint8_t> q(6), qt(6);
  float scale = 1.f;
  TensorDesc in = MakeTensor(x.data(), DType::kFloat32, Shape{2, 3});
  TensorDesc out = MakeTensor(q.data(), DType::kE4M3, Shape{2, 3});
  out.scale = &scale;
  EXPECT_EQ(QuantizeTranspose(in, out, MakeTensor(qt.data(), DType::kE4M3, Shape{2, 3})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(QuantizeTranspose(in, out, MakeTensor(qt.data(), DType::kE5M2, Shape{3, 2})).code(),
            absl::StatusCode::kInvalidArgument);
  TensorDesc no_scale = out;
  no_scale.scale = nullptr;
  EXPECT_EQ(Quantize(in, no_scale).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Quantize(in, MakeTensor(q.data(), DType::kBFloat16, Shape{2, 3})).code(),
            absl::StatusCode::kInvalidArgument);
  TensorDesc short_out = out;
  short_out.shape = Shape{5};
  EXPECT_EQ(Quantize(in, short_out).code(), absl::StatusCode::kInvalidArgument);
}

TEST(Dequantize, WritesScaledValuesInBothOutputDtypes) {
  std::vector<uint8_t> q(64);
  for (int i = 0; i < 64; ++i) q[i] = static_cast<uint8_t>((i * 37 + 11) % 256);
  for (DType d : {DType::kE4M3, DType::kE5M2}) {
    float scale_inv = 0.375f;
    TensorDesc in = MakeTensor(q.data(), d, Shape{8, 8});
    in.scale_inv = &scale_inv;
    std::vector<float> f(64);
    std::vector<uint16_t> b(64);
    testing::Poison(f);
    testing::Poison(b);
    ASSERT_TRUE(Dequantize(in, MakeTensor(f.data(), DType::kFloat32, Shape{64})).ok());
    ASSERT_TRUE(Dequantize(in, MakeTensor(b.data(), DType::kBFloat16, Shape{64})).ok());
    for (int i = 0; i < 64; ++i) {
      const float want = DecodeFp8(d, q[i]) * 0.375f;
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(f[i]));
        continue;
      }
      EXPECT_EQ(f[i], want) << i;  // fp8 * 0.375 is exact in fp32
      EXPECT_EQ(b[i], FloatToBf16(want)) << i;
    }
  }
}

TEST(UpdateFp8Scales, CurrentScalingAndNonFiniteAmax) {
  // history_len 1 with kMostRecent: the scale follows this step's amax.
  const int n = 4;
  float amax[n] = {2.0f, INFINITY, NAN, 0.0f};
  float history[n] = {7, 7, 7, 7};
  float scale[n] = {3, 3, 3, 3}, scale_inv[n] = {9, 9, 9, 9};
  ASSERT_TRUE(
      UpdateFp8Scales(amax, history, scale, scale_inv, 1, n, 1, 57344.0f, 2, AmaxAlgo::kMostRecent)
          .ok());
  EXPECT_EQ(scale[0], 57344.0f / 2.0f / 4.0f);
  EXPECT_EQ(scale_inv[0], 1.0f / scale[0]);
  for (int i = 1; i < n; ++i) {
    EXPECT_EQ(scale[i], 3.0f) << i;  // inf, NaN and 0 leave the scale alone
    EXPECT_EQ(scale_inv[i], 9.0f) << i;
    EXPECT_EQ(amax[i], 0.0f) << i;  // but the amax is still consumed
  }
  EXPECT_EQ(history[0], 2.0f);
  EXPECT_EQ(history[3], 0.0f);
}

TEST(UpdateFp8Scales, HistoryRollsOneRowPerCallAndAgesOut) {
  // kMax over a window of 3: a spike governs the scale for exactly 3 calls.
  const int n = 2, len = 3;
  float history[len * n];
  std::fill(history, history + len * n, 0.f);
  float scale[n] = {1, 1}, scale_inv[n] = {1, 1};
  const float steps[5][n] = {{16, 1}, {1, 2}, {1, 4}, {1, 8}, {1, 0.5f}};
  const float want_a0[5] = {16, 16, 16, 1, 1};
  const float want_a1[5] = {1, 2, 4, 8, 8};
  for (int s = 0; s < 5; ++s) {
    float amax[n] = {steps[s][0], steps[s][1]};
    ASSERT_TRUE(
        UpdateFp8Scales(amax, history, scale, scale_inv, 1, n, len, 448.0f, 0, AmaxAlgo::kMax)
            .ok());
    EXPECT_EQ(scale[0], 448.0f / want_a0[s]) << "step " << s;
    EXPECT_EQ(scale[1], 448.0f / want_a1[s]) << "step " << s;
    for (int h = 0; h < len; ++h) {
      const int src = s - h;
      EXPECT_EQ(history[h * n + 1], src >= 0 ? steps[src][1] : 0.f) << "step " << s << " row " << h;
    }
  }
  EXPECT_EQ(
      UpdateFp8Scales(nullptr, history, scale, scale_inv, 1, n, 0, 448.0f, 0, AmaxAlgo::kMax)
          .code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(UpdateFp8Scales, StridedScaleInvLeavesThePaddingAlone) {
  // Stride 4: tensor i's 1 / scale at scale_inv[4 i]; the floats between
  // are not the op's and keep their values.
  const int n = 3, stride = 4;
  float amax[n] = {2.0f, 0.0f, 8.0f};
  float history[n] = {0, 0, 0};
  float scale[n] = {1, 5, 1};
  float scale_inv[n * stride];
  for (int i = 0; i < n * stride; ++i) scale_inv[i] = 100.f + i;
  ASSERT_TRUE(UpdateFp8Scales(amax, history, scale, scale_inv, stride, n, 1, 448.0f, 0,
                              AmaxAlgo::kMostRecent)
                  .ok());
  EXPECT_EQ(scale_inv[0], 1.0f / 224.0f);
  EXPECT_EQ(scale_inv[stride], 100.f + stride);  // zero amax: unchanged
  EXPECT_EQ(scale_inv[2 * stride], 1.0f / 56.0f);
  for (int i = 0; i < n * stride; ++i) {
    if (i % stride != 0) {
      EXPECT_EQ(scale_inv[i], 100.f + i) << i;
    }
  }
  const absl::Status bad =
      UpdateFp8Scales(amax, history, scale, scale_inv, 0, n, 1, 448.0f, 0, AmaxAlgo::kMostRecent);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("scale_inv_stride"), std::string::npos) << bad.message();
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

TEST(Amax, RandomBf16AndFp32KeepTheLargerOldValue) {
  std::vector<float> x = RandomFloats(1000, 77, 5.0f);
  std::vector<uint16_t> xb = ToBf16(x);
  float want = 0.f, want_b = 0.f;
  for (size_t i = 0; i < x.size(); ++i) {
    want = std::max(want, std::fabs(x[i]));
    want_b = std::max(want_b, std::fabs(Bf16ToFloat(xb[i])));
  }
  float amax = 0.5f;
  ASSERT_TRUE(Amax(MakeTensor(x.data(), DType::kFloat32, Shape{1000}), &amax).ok());
  EXPECT_EQ(amax, want);
  amax = 0.5f;
  ASSERT_TRUE(Amax(MakeTensor(xb.data(), DType::kBFloat16, Shape{10, 100}), &amax).ok());
  EXPECT_EQ(amax, want_b);
  amax = 1e6f;  // an older, larger amax survives
  ASSERT_TRUE(Amax(MakeTensor(x.data(), DType::kFloat32, Shape{1000}), &amax).ok());
  EXPECT_EQ(amax, 1e6f);
  EXPECT_EQ(Amax(MakeTensor(x.data(), DType::kE4M3, Shape{1000}), &amax).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Transpose, FourAndTwoByteWordsAndWidthMismatch) {
  const int rows = 7, cols = 3;
  std::vector<float> a = RandomFloats(rows * cols, 8);
  std::vector<float> t(rows * cols);
  testing::Poison(t);
  ASSERT_TRUE(Transpose(MakeTensor(a.data(), DType::kFloat32, Shape{rows, cols}),
                        MakeTensor(t.data(), DType::kFloat32, Shape{cols, rows}))
                  .ok());
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) EXPECT_EQ(t[c * rows + r], a[r * cols + c]);
  }
  std::vector<uint16_t> b = testing::RandomBf16(rows * cols, 9), bt(rows * cols);
  testing::Poison(bt);
  ASSERT_TRUE(Transpose(MakeTensor(b.data(), DType::kBFloat16, Shape{rows, cols}),
                        MakeTensor(bt.data(), DType::kBFloat16, Shape{cols, rows}))
                  .ok());
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) EXPECT_EQ(bt[c * rows + r], b[r * cols + c]);
  }
  EXPECT_EQ(Transpose(MakeTensor(a.data(), DType::kFloat32, Shape{rows, cols}),
                      MakeTensor(bt.data(), DType::kBFloat16, Shape{cols, rows}))
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cpu
}  // namespace tessera
