// The chunked fused loss against the naive full-logits fp64 computation:
// loss, valid count, grad_x and grad_weight (accumulated onto existing
// values), with ignored tokens and chunk sizes that do not divide T; and
// the loss-only mode (null gradient outputs) against the full call.
#include "worker/engine/cpu/fused_linear_cross_entropy.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/cpu/reference_test_util.h"

namespace tessera {
namespace cpu {
namespace {

using namespace tessera::testing;

class FusedCeTest : public ::testing::TestWithParam<std::tuple<int, int, int, int>> {};

TEST_P(FusedCeTest, MatchesNaiveFullLogits) {
  auto [t, h, v, chunk] = GetParam();
  const int kIgnore = -100;
  auto x = ToBf16(RandomFloats(t * h, 61 + t, 1.0f));
  auto w = ToBf16(RandomFloats(v * h, 62 + v, 0.5f));
  std::vector<int32_t> targets(t);
  for (int i = 0; i < t; ++i) targets[i] = (i % 4 == 3) ? kIgnore : (i * 7 + 3) % v;
  std::vector<uint16_t> gx(t * h);
  Poison(gx);
  std::vector<float> gw = RandomFloats(v * h, 63);
  const std::vector<float> gw_before = gw;
  float loss_sum = 1.5f, valid = 2.0f;  // accumulated onto
  ASSERT_TRUE(FusedLinearCrossEntropy(MakeTensor(x.data(), DType::kBFloat16, Shape{t, h}),
                                      MakeTensor(w.data(), DType::kBFloat16, Shape{v, h}),
                                      MakeTensor(targets.data(), DType::kInt32, Shape{t}), kIgnore,
                                      chunk, &loss_sum, &valid,
                                      MakeTensor(gx.data(), DType::kBFloat16, Shape{t, h}),
                                      MakeTensor(gw.data(), DType::kFloat32, Shape{v, h}),
                                      /*accumulate_grad_weight=*/true)
                  .ok());
  // Naive: full [T, V] logits in fp64.
  std::vector<double> xd = FromBf16(x), wd = FromBf16(w);
  double loss = 0;
  int count = 0;
  std::vector<double> want_gx(t * h, 0.0), want_gw(gw_before.begin(), gw_before.end());
  // The same weight gradient built from dlogits rounded to bf16, as the
  // documented beta=1 GEMM with bf16 operands computes it.
  std::vector<double> want_gw16(gw_before.begin(), gw_before.end());
  for (int i = 0; i < t; ++i) {
    if (targets[i] == kIgnore) continue;
    std::vector<double> logits(v);
    double m = -INFINITY;
    for (int k = 0; k < v; ++k) {
      double s = 0;
      for (int j = 0; j < h; ++j) s += xd[i * h + j] * wd[k * h + j];
      logits[k] = s;
      m = std::max(m, s);
    }
    double z = 0;
    for (double l : logits) z += std::exp(l - m);
    double lse = std::log(z) + m;
    loss += lse - logits[targets[i]];
    ++count;
    for (int k = 0; k < v; ++k) {
      double d = std::exp(logits[k] - lse) - (k == targets[i] ? 1.0 : 0.0);
      double d16 = RoundToBf16(static_cast<float>(d));
      for (int j = 0; j < h; ++j) {
        want_gx[i * h + j] += d * wd[k * h + j];
        want_gw[k * h + j] += d * xd[i * h + j];
        want_gw16[k * h + j] += d16 * xd[i * h + j];
      }
    }
  }
  EXPECT_NEAR(loss_sum, 1.5 + loss, 1e-4 * std::fabs(loss) + 1e-4);
  EXPECT_EQ(valid, 2.0f + count);
  EXPECT_LT(RelativeError(FromBf16(gx), want_gx), 1e-2);
  std::vector<double> got_delta(v * h), want_delta(v * h), want_delta16(v * h);
  for (int i = 0; i < v * h; ++i) {
    got_delta[i] = static_cast<double>(gw[i]) - gw_before[i];
    want_delta[i] = want_gw[i] - gw_before[i];
    want_delta16[i] = want_gw16[i] - gw_before[i];
  }
  EXPECT_LT(RelativeError(got_delta, want_delta), 1e-2);
  // Against bf16-rounded dlogits the only differences left are fp32
  // rounding and the rare dlogit whose fp32 value rounds to the other bf16
  // neighbour: far below the ~1e-3 that skipping the rounding would give.
  EXPECT_LT(RelativeError(got_delta, want_delta16), 1e-4)
      << "unrounded dlogits would differ by " << RelativeError(want_delta, want_delta16);
  for (int i = 0; i < t; ++i) {
    if (targets[i] != kIgnore) continue;
    for (int j = 0; j < h; ++j) EXPECT_EQ(gx[i * h + j], 0) << "ignored row " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, FusedCeTest,
                         ::testing::Values(std::make_tuple(1, 8, 5, 4),      // T < chunk
                                           std::make_tuple(13, 16, 37, 4),   // ragged chunks
                                           std::make_tuple(32, 24, 64, 32),  // one chunk
                                           std::make_tuple(40, 32, 256, 7)));

// Without accumulation the first chunk writes grad_weight: whatever it held
// before (here NaN) is gone, and the result equals accumulating onto zeros.
// With no tokens, it is zeroed (not accumulating) or left alone.
TEST(FusedCeWriteTest, WritesGradWeightUnlessAccumulating) {
  for (int t : {0, 13}) {
    SCOPED_TRACE(t);
    const int h = 16, v = 37, chunk = 4;
    auto x = ToBf16(RandomFloats(std::max(t, 1) * h, 71, 1.0f));
    auto w = ToBf16(RandomFloats(v * h, 72, 0.5f));
    std::vector<int32_t> targets(std::max(t, 1));
    for (int i = 0; i < t; ++i) targets[i] = (i * 5 + 1) % v;
    const auto run = [&](std::vector<float>& gw, bool accumulate) {
      std::vector<uint16_t> gx(std::max(t, 1) * h);
      float loss = 0.f, valid = 0.f;
      return FusedLinearCrossEntropy(MakeTensor(x.data(), DType::kBFloat16, Shape{t, h}),
                                     MakeTensor(w.data(), DType::kBFloat16, Shape{v, h}),
                                     MakeTensor(targets.data(), DType::kInt32, Shape{t}), -100,
                                     chunk, &loss, &valid,
                                     MakeTensor(gx.data(), DType::kBFloat16, Shape{t, h}),
                                     MakeTensor(gw.data(), DType::kFloat32, Shape{v, h}),
                                     accumulate);
    };
    std::vector<float> written(v * h, std::nanf("")), onto_zeros(v * h, 0.f);
    ASSERT_TRUE(run(written, false).ok());
    ASSERT_TRUE(run(onto_zeros, true).ok());
    EXPECT_EQ(written, onto_zeros);
    std::vector<float> kept = RandomFloats(v * h, 73);
    const std::vector<float> before = kept;
    ASSERT_TRUE(run(kept, true).ok());
    if (t == 0) EXPECT_EQ(kept, before) << "accumulating no tokens changed grad_weight";
    if (t > 0) EXPECT_NE(kept, before);
  }
}

// Host storage for one call, with the descriptors over it.
struct CeCall {
  int t, h, v;
  std::vector<uint16_t> x, w, gx;
  std::vector<int32_t> targets;
  std::vector<float> gw;
  float loss_sum = 0.f, valid = 0.f;

  CeCall(int t_, int h_, int v_, uint32_t seed, float x_scale)
      : t(t_),
        h(h_),
        v(v_),
        x(RandomBf16(t_ * h_, seed, x_scale)),
        w(RandomBf16(v_ * h_, seed + 1, 0.5f)),
        gx(t_ * h_),
        targets(RandomInts(t_, seed + 2, 0, v_)),
        gw(RandomFloats(v_ * h_, seed + 3)) {
    Poison(gx);
  }
  absl::Status Run(int chunk, int ignore_index = -100) {
    return FusedLinearCrossEntropy(MakeTensor(x.data(), DType::kBFloat16, Shape{t, h}),
                                   MakeTensor(w.data(), DType::kBFloat16, Shape{v, h}),
                                   MakeTensor(targets.data(), DType::kInt32, Shape{t}),
                                   ignore_index, chunk, &loss_sum, &valid,
                                   MakeTensor(gx.data(), DType::kBFloat16, Shape{t, h}),
                                   MakeTensor(gw.data(), DType::kFloat32, Shape{v, h}),
                                   /*accumulate_grad_weight=*/true);
  }
};

TEST(FusedCe, RepeatedCallsAreBitIdentical) {
  CeCall first(50, 64, 300, 71, 1.0f);
  CeCall again = first;
  ASSERT_TRUE(first.Run(16).ok());
  ASSERT_TRUE(again.Run(16).ok());
  EXPECT_EQ(std::memcmp(&first.loss_sum, &again.loss_sum, sizeof(float)), 0);
  EXPECT_EQ(first.valid, again.valid);
  EXPECT_EQ(first.gx, again.gx);
  EXPECT_EQ(std::memcmp(first.gw.data(), again.gw.data(), first.gw.size() * sizeof(float)), 0);
}

TEST(FusedCe, ChunkSizeChangesNothingButRounding) {
  // Per token the computation does not depend on the chunk, so loss and
  // grad_x agree across chunk sizes; grad_weight sums chunks in a different
  // order, so it agrees to fp32 rounding.
  CeCall one(23, 16, 40, 81, 1.0f), many = one;
  ASSERT_TRUE(one.Run(23).ok());
  ASSERT_TRUE(many.Run(3).ok());
  EXPECT_NEAR(one.loss_sum, many.loss_sum, 1e-5f * std::fabs(one.loss_sum));
  EXPECT_EQ(one.gx, many.gx);
  EXPECT_LT(RelativeError(many.gw, one.gw), 1e-6);
}

TEST(FusedCe, AllTokensIgnoredLeavesGradWeightAndZeroesGradX) {
  CeCall call(9, 8, 12, 91, 1.0f);
  std::fill(call.targets.begin(), call.targets.end(), -1);
  const std::vector<float> gw_before = call.gw;
  call.loss_sum = 4.0f;
  call.valid = 3.0f;
  ASSERT_TRUE(call.Run(4, /*ignore_index=*/-1).ok());
  EXPECT_EQ(call.loss_sum, 4.0f);
  EXPECT_EQ(call.valid, 3.0f);
  for (uint16_t g : call.gx) ASSERT_EQ(g, 0);
  EXPECT_EQ(call.gw, gw_before);
}

TEST(FusedCe, LargeLogitsStayFinite) {
  // Logits of several hundred overflow exp() without the max subtraction.
  CeCall call(6, 32, 50, 101, 200.0f);
  const std::vector<float> gw_before = call.gw;
  ASSERT_TRUE(call.Run(4).ok());
  EXPECT_TRUE(std::isfinite(call.loss_sum));
  EXPECT_GT(call.loss_sum, 100.0f);  // confidently wrong tokens cost a lot
  for (uint16_t g : call.gx) ASSERT_TRUE(std::isfinite(Bf16ToFloat(g)));
  for (float g : call.gw) ASSERT_TRUE(std::isfinite(g));
  // Each dlogits row (softmax - onehot) sums to zero, so every column of
  // the grad_weight increment sums over V to zero, up to the bf16 rounding
  // of dlogits.
  for (int j = 0; j < 32; ++j) {
    double sum = 0, size = 0;
    for (int k = 0; k < 50; ++k) {
      const double d = static_cast<double>(call.gw[k * 32 + j]) - gw_before[k * 32 + j];
      sum += d;
      size += std::fabs(d);
    }
    EXPECT_LT(std::fabs(sum), 1e-2 * size + 1e-3) << "column " << j;
  }
}

// Loss only (null gradient outputs): the same loss and count bits as the
// full call, with and without ignored tokens and over several chunks; the
// caller's (poisoned) gradient buffers are never handed over, so a sized
// descriptor without data must not be touched either.
TEST(FusedCe, LossOnlyMatchesTheFullCallAndWritesNoGradient) {
  for (int chunk : {5, 16, 64}) {
    SCOPED_TRACE(chunk);
    CeCall full(37, 16, 70, 121, 1.0f);
    for (int i = 0; i < full.t; i += 5) full.targets[i] = -100;
    full.loss_sum = 0.25f;
    full.valid = 1.0f;
    CeCall loss_only = full;
    ASSERT_TRUE(full.Run(chunk).ok());
    const std::vector<uint16_t> gx_before = loss_only.gx;
    const std::vector<float> gw_before = loss_only.gw;
    for (bool sized : {false, true}) {
      SCOPED_TRACE(sized ? "sized descriptors without data" : "default descriptors");
      float loss_sum = 0.25f, valid = 1.0f;
      TensorDesc gx, gw;
      if (sized) {
        gx = MakeTensor(nullptr, DType::kBFloat16, Shape{full.t, full.h});
        gw = MakeTensor(nullptr, DType::kFloat32, Shape{full.v, full.h});
      }
      ASSERT_TRUE(FusedLinearCrossEntropy(
                      MakeTensor(loss_only.x.data(), DType::kBFloat16, Shape{full.t, full.h}),
                      MakeTensor(loss_only.w.data(), DType::kBFloat16, Shape{full.v, full.h}),
                      MakeTensor(loss_only.targets.data(), DType::kInt32, Shape{full.t}), -100,
                      chunk, &loss_sum, &valid, gx, gw, /*accumulate_grad_weight=*/true)
                      .ok());
      EXPECT_EQ(std::memcmp(&loss_sum, &full.loss_sum, sizeof(float)), 0)
          << loss_sum << " vs " << full.loss_sum;
      EXPECT_EQ(valid, full.valid);
    }
    EXPECT_EQ(loss_only.gx, gx_before);
    EXPECT_EQ(loss_only.gw, gw_before);
  }
  // One gradient output without the other is refused.
  CeCall call(4, 8, 10, 131, 1.0f);
  float loss = 0, valid = 0;
  const absl::Status s = FusedLinearCrossEntropy(
      MakeTensor(call.x.data(), DType::kBFloat16, Shape{4, 8}),
      MakeTensor(call.w.data(), DType::kBFloat16, Shape{10, 8}),
      MakeTensor(call.targets.data(), DType::kInt32, Shape{4}), -100, 2, &loss, &valid,
      TensorDesc{}, MakeTensor(call.gw.data(), DType::kFloat32, Shape{10, 8}), false);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("grad_x:", 0), 0u) << s;
}

TEST(FusedCe, RejectsBadArguments) {
  CeCall call(4, 8, 10, 111, 1.0f);
  EXPECT_EQ(call.Run(0).code(), absl::StatusCode::kInvalidArgument);
  std::vector<float> gx32(4 * 8);
  float loss = 0, valid = 0;
  absl::Status s =
      FusedLinearCrossEntropy(MakeTensor(call.x.data(), DType::kBFloat16, Shape{4, 8}),
                              MakeTensor(call.w.data(), DType::kBFloat16, Shape{10, 8}),
                              MakeTensor(call.targets.data(), DType::kInt32, Shape{4}), -100, 2,
                              &loss, &valid, MakeTensor(gx32.data(), DType::kFloat32, Shape{4, 8}),
                              MakeTensor(call.gw.data(), DType::kFloat32, Shape{10, 8}), true);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("grad_x"), std::string::npos) << s;
  call.targets[2] = -5;  // negative and not the ignore index
  s = call.Run(2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("token 2"), std::string::npos) << s;
}

TEST(FusedCe, OutOfRangeTargetIsRejected) {
  std::vector<uint16_t> x(4, 0x3f80), w(8, 0x3f80), gx(4);
  std::vector<float> gw(8);
  std::vector<int32_t> targets = {1, 5};
  float loss = 0, valid = 0;
  absl::Status s = FusedLinearCrossEntropy(
      MakeTensor(x.data(), DType::kBFloat16, Shape{2, 2}),
      MakeTensor(w.data(), DType::kBFloat16, Shape{4, 2}),
      MakeTensor(targets.data(), DType::kInt32, Shape{2}), -100, 8, &loss, &valid,
      MakeTensor(gx.data(), DType::kBFloat16, Shape{2, 2}),
      MakeTensor(gw.data(), DType::kFloat32, Shape{4, 2}), true);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("token 1"), std::string::npos) << s;
}

}  // namespace
}  // namespace cpu
}  // namespace tessera
