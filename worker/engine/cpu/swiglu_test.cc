// SwiGLU forward against fp64, backward against finite differences.
#include "worker/engine/cpu/swiglu.h"

#include <cmath>

#include "gtest/gtest.h"
#include "worker/engine/cpu/reference_test_util.h"

namespace tessera {
namespace cpu {
namespace {

using namespace tessera::testing;

std::vector<double> RefForward(const std::vector<double>& gu, int t, int f) {
  std::vector<double> y(t * f);
  for (int i = 0; i < t; ++i) {
    for (int j = 0; j < f; ++j) {
      double g = gu[i * 2 * f + j], u = gu[i * 2 * f + f + j];
      y[i * f + j] = g / (1 + std::exp(-g)) * u;
    }
  }
  return y;
}

TEST(SwiGlu, ForwardAndBackward) {
  for (auto [t, f] : {std::pair{1, 3}, std::pair{7, 16}, std::pair{32, 48}}) {
    auto gu = ToBf16(RandomFloats(t * 2 * f, 11 + f, 3.0f));
    std::vector<uint16_t> y(t * f);
    Poison(y);
    TensorDesc GU = MakeTensor(gu.data(), DType::kBFloat16, Shape{t, 2 * f});
    ASSERT_TRUE(SwiGluForward(GU, MakeTensor(y.data(), DType::kBFloat16, Shape{t, f})).ok());
    std::vector<double> gud = FromBf16(gu);
    EXPECT_LT(RelativeError(FromBf16(y), RefForward(gud, t, f)), 5e-3);
    auto dy = ToBf16(RandomFloats(t * f, 12));
    std::vector<uint16_t> dgu(t * 2 * f);
    Poison(dgu);
    ASSERT_TRUE(SwiGluBackward(MakeTensor(dy.data(), DType::kBFloat16, Shape{t, f}), GU,
                               MakeTensor(dgu.data(), DType::kBFloat16, Shape{t, 2 * f}))
                    .ok());
    std::vector<double> dyd = FromBf16(dy);
    auto loss = [&](const std::vector<double>& v) {
      auto yv = RefForward(v, t, f);
      double s = 0;
      for (int i = 0; i < t * f; ++i) s += yv[i] * dyd[i];
      return s;
    };
    EXPECT_LT(RelativeError(FromBf16(dgu), NumericGradient(loss, gud)), 8e-3);
  }
}

}  // namespace
}  // namespace cpu
}  // namespace tessera
