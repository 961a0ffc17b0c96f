// Causal attention: forward and lse against fp64, backward against finite
// differences of the fp64 forward.
#include "worker/engine/cpu/attention.h"

#include <cmath>

#include "gtest/gtest.h"
#include "worker/engine/cpu/reference_test_util.h"

namespace tessera {
namespace cpu {
namespace {

using namespace tessera::testing;

// Returns out [B, S, nh, hd]; fills lse [B, nh, S].
std::vector<double> RefAttention(const std::vector<double>& qkv, int b, int s, int nh, int hd,
                                 std::vector<double>* lse) {
  std::vector<double> out(b * s * nh * hd, 0.0);
  if (lse) lse->assign(b * nh * s, 0.0);
  auto at = [&](int bi, int si, int part, int h, int c) {
    return qkv[(((bi * s + si) * 3 + part) * nh + h) * hd + c];
  };
  for (int bi = 0; bi < b; ++bi) {
    for (int h = 0; h < nh; ++h) {
      for (int i = 0; i < s; ++i) {
        std::vector<double> sc(i + 1);
        double m = -INFINITY;
        for (int j = 0; j <= i; ++j) {
          double d = 0;
          for (int c = 0; c < hd; ++c) d += at(bi, i, 0, h, c) * at(bi, j, 1, h, c);
          sc[j] = d / std::sqrt(static_cast<double>(hd));
          m = std::max(m, sc[j]);
        }
        double z = 0;
        for (double& v : sc) z += std::exp(v - m);
        if (lse) (*lse)[(bi * nh + h) * s + i] = std::log(z) + m;
        for (int j = 0; j <= i; ++j) {
          double p = std::exp(sc[j] - m) / z;
          for (int c = 0; c < hd; ++c) out[((bi * s + i) * nh + h) * hd + c] += p * at(bi, j, 2, h, c);
        }
      }
    }
  }
  return out;
}

class AttentionTest : public ::testing::TestWithParam<std::tuple<int, int, int, int>> {};

TEST_P(AttentionTest, ForwardAndBackward) {
  auto [b, s, nh, hd] = GetParam();
  const int n = b * s * 3 * nh * hd, no = b * s * nh * hd;
  auto qkv = ToBf16(RandomFloats(n, 31 + s, 1.5f));
  std::vector<uint16_t> out(no);
  std::vector<float> lse(b * nh * s);
  Poison(out);
  Poison(lse);
  TensorDesc Q = MakeTensor(qkv.data(), DType::kBFloat16, Shape{b, s, 3, nh, hd});
  TensorDesc O = MakeTensor(out.data(), DType::kBFloat16, Shape{b, s, nh, hd});
  TensorDesc L = MakeTensor(lse.data(), DType::kFloat32, Shape{b, nh, s});
  ASSERT_TRUE(AttentionForward(Q, O, L).ok());
  std::vector<double> qd = FromBf16(qkv), ref_lse;
  EXPECT_LT(RelativeError(FromBf16(out), RefAttention(qd, b, s, nh, hd, &ref_lse)), 5e-3);
  EXPECT_LT(RelativeError(lse, ref_lse), 1e-5);

  auto dout = ToBf16(RandomFloats(no, 32));
  std::vector<double> dd = FromBf16(dout);
  std::vector<uint16_t> dqkv(n);
  Poison(dqkv);
  ASSERT_TRUE(AttentionBackward(MakeTensor(dout.data(), DType::kBFloat16, Shape{b, s, nh, hd}), Q,
                                O, L, MakeTensor(dqkv.data(), DType::kBFloat16, Shape{b, s, 3, nh, hd}))
                  .ok());
  auto loss = [&](const std::vector<double>& v) {
    auto o = RefAttention(v, b, s, nh, hd, nullptr);
    double acc = 0;
    for (int i = 0; i < no; ++i) acc += o[i] * dd[i];
    return acc;
  };
  EXPECT_LT(RelativeError(FromBf16(dqkv), NumericGradient(loss, qd)), 2e-2);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionTest,
                         ::testing::Values(std::make_tuple(1, 1, 1, 4), std::make_tuple(2, 7, 2, 8),
                                           std::make_tuple(1, 16, 3, 16)));

}  // namespace
}  // namespace cpu
}  // namespace tessera
