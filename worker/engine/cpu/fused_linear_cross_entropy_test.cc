// The chunked fused loss against the naive full-logits fp64 computation:
// loss, valid count, grad_x and grad_weight (accumulated onto existing
// values), with ignored tokens and chunk sizes that do not divide T.
#include "worker/engine/cpu/fused_linear_cross_entropy.h"

#include <cmath>

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
                                      MakeTensor(gw.data(), DType::kFloat32, Shape{v, h}))
                  .ok());
  // Naive: full [T, V] logits in fp64.
  std::vector<double> xd = FromBf16(x), wd = FromBf16(w);
  double loss = 0;
  int count = 0;
  std::vector<double> want_gx(t * h, 0.0), want_gw(gw_before.begin(), gw_before.end());
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
      for (int j = 0; j < h; ++j) {
        want_gx[i * h + j] += d * wd[k * h + j];
        want_gw[k * h + j] += d * xd[i * h + j];
      }
    }
  }
  EXPECT_NEAR(loss_sum, 1.5 + loss, 1e-4 * std::fabs(loss) + 1e-4);
  EXPECT_EQ(valid, 2.0f + count);
  EXPECT_LT(RelativeError(FromBf16(gx), want_gx), 1e-2);
  std::vector<double> got_delta(v * h), want_delta(v * h);
  for (int i = 0; i < v * h; ++i) {
    got_delta[i] = gw[i] - gw_before[i];
    want_delta[i] = want_gw[i] - gw_before[i];
  }
  EXPECT_LT(RelativeError(got_delta, want_delta), 1e-2);
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
      MakeTensor(gw.data(), DType::kFloat32, Shape{4, 2}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("token 1"), std::string::npos) << s;
}

}  // namespace
}  // namespace cpu
}  // namespace tessera
