// RoPE: forward against an fp64 rotation, backward (the inverse rotation) as
// the exact adjoint checked by finite differences.
#include "worker/engine/cpu/rope.h"

#include <cmath>

#include "gtest/gtest.h"
#include "worker/engine/cpu/reference_test_util.h"

namespace tessera {
namespace cpu {
namespace {

using namespace tessera::testing;

std::vector<double> RefRope(std::vector<double> x, int b, int s, int nh, int hd, double theta) {
  const int half = hd / 2;
  for (int bi = 0; bi < b; ++bi) {
    for (int si = 0; si < s; ++si) {
      for (int part = 0; part < 2; ++part) {
        for (int h = 0; h < nh; ++h) {
          double* row = x.data() + (((bi * s + si) * 3 + part) * nh + h) * hd;
          for (int i = 0; i < half; ++i) {
            double angle = si * std::pow(theta, -2.0 * i / hd);
            double x1 = row[i], x2 = row[i + half];
            row[i] = x1 * std::cos(angle) - x2 * std::sin(angle);
            row[i + half] = x2 * std::cos(angle) + x1 * std::sin(angle);
          }
        }
      }
    }
  }
  return x;
}

TEST(Rope, ForwardAndBackward) {
  const int b = 2, s = 9, nh = 2, hd = 8;
  const float theta = 10000.f;
  const int n = b * s * 3 * nh * hd;
  auto qkv = ToBf16(RandomFloats(n, 21));
  std::vector<double> xd = FromBf16(qkv);
  TensorDesc t = MakeTensor(qkv.data(), DType::kBFloat16, Shape{b, s, 3, nh, hd});
  ASSERT_TRUE(RopeForward(t, theta).ok());
  EXPECT_LT(RelativeError(FromBf16(qkv), RefRope(xd, b, s, nh, hd, theta)), 5e-3);
  // v (part 2) is untouched.
  auto g = ToBf16(RandomFloats(n, 22));
  std::vector<double> gd = FromBf16(g);
  ASSERT_TRUE(RopeBackward(MakeTensor(g.data(), DType::kBFloat16, Shape{b, s, 3, nh, hd}), theta).ok());
  auto loss = [&](const std::vector<double>& v) {
    auto y = RefRope(v, b, s, nh, hd, theta);
    double acc = 0;
    for (int i = 0; i < n; ++i) acc += y[i] * gd[i];
    return acc;
  };
  EXPECT_LT(RelativeError(FromBf16(g), NumericGradient(loss, xd)), 8e-3);
  std::vector<uint16_t> bad(10);
  EXPECT_FALSE(RopeForward(MakeTensor(bad.data(), DType::kBFloat16, Shape{1, 1, 3, 1, 3}), theta).ok());
}

}  // namespace
}  // namespace cpu
}  // namespace tessera
