// RMSNorm forward against fp64, backward against central finite
// differences of the fp64 forward (for x and the weight).
#include "worker/engine/cpu/rmsnorm.h"

#include <cmath>

#include "gtest/gtest.h"
#include "worker/engine/cpu/reference_test_util.h"

namespace tessera {
namespace cpu {
namespace {

using namespace tessera::testing;

std::vector<double> RefForward(const std::vector<double>& x, const std::vector<double>& w, int t,
                               int h, double eps) {
  std::vector<double> y(t * h);
  for (int i = 0; i < t; ++i) {
    double ss = 0;
    for (int j = 0; j < h; ++j) ss += x[i * h + j] * x[i * h + j];
    double r = 1.0 / std::sqrt(ss / h + eps);
    for (int j = 0; j < h; ++j) y[i * h + j] = x[i * h + j] * r * w[j];
  }
  return y;
}

class RmsNormTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(RmsNormTest, ForwardAndBackward) {
  auto [t, h] = GetParam();
  const float eps = 1e-5f;
  std::vector<float> x = RandomFloats(t * h, 3 + t, 2.0f);
  std::vector<float> w = RandomFloats(h, 4 + h);
  for (float& v : w) v += 1.5f;
  std::vector<uint16_t> y(t * h);
  std::vector<float> rstd(t);
  Poison(y);
  Poison(rstd);
  ASSERT_TRUE(RmsNormForward(MakeTensor(x.data(), DType::kFloat32, Shape{t, h}),
                             MakeTensor(w.data(), DType::kFloat32, Shape{h}), eps,
                             MakeTensor(y.data(), DType::kBFloat16, Shape{t, h}),
                             MakeTensor(rstd.data(), DType::kFloat32, Shape{t}))
                  .ok());
  std::vector<double> xd(x.begin(), x.end()), wd(w.begin(), w.end());
  EXPECT_LT(RelativeError(FromBf16(y), RefForward(xd, wd, t, h, eps)), 5e-3);

  std::vector<float> dy = RandomFloats(t * h, 8);
  std::vector<float> dx(t * h, NAN), dw(h, 0.25f);
  ASSERT_TRUE(RmsNormBackward(MakeTensor(dy.data(), DType::kFloat32, Shape{t, h}),
                              MakeTensor(x.data(), DType::kFloat32, Shape{t, h}),
                              MakeTensor(w.data(), DType::kFloat32, Shape{h}),
                              MakeTensor(rstd.data(), DType::kFloat32, Shape{t}),
                              MakeTensor(dx.data(), DType::kFloat32, Shape{t, h}), false,
                              MakeTensor(dw.data(), DType::kFloat32, Shape{h}))
                  .ok());
  auto loss_x = [&](const std::vector<double>& xv) {
    auto yv = RefForward(xv, wd, t, h, eps);
    double s = 0;
    for (int i = 0; i < t * h; ++i) s += yv[i] * dy[i];
    return s;
  };
  auto loss_w = [&](const std::vector<double>& wv) {
    auto yv = RefForward(xd, wv, t, h, eps);
    double s = 0;
    for (int i = 0; i < t * h; ++i) s += yv[i] * dy[i];
    return s;
  };
  EXPECT_LT(RelativeError(dx, NumericGradient(loss_x, xd)), 1e-4);
  std::vector<double> want_dw = NumericGradient(loss_w, wd);
  for (double& v : want_dw) v += 0.25;  // accumulated onto the initial value
  EXPECT_LT(RelativeError(dw, want_dw), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Shapes, RmsNormTest,
                         ::testing::Values(std::make_tuple(1, 8), std::make_tuple(5, 33),
                                           std::make_tuple(16, 64)));

TEST(RmsNorm, RejectsMismatchedShapes) {
  std::vector<float> x(8), w(3), y(8), r(2);
  EXPECT_EQ(RmsNormForward(MakeTensor(x.data(), DType::kFloat32, Shape{2, 4}),
                           MakeTensor(w.data(), DType::kFloat32, Shape{3}), 1e-5f,
                           MakeTensor(y.data(), DType::kFloat32, Shape{2, 4}),
                           MakeTensor(r.data(), DType::kFloat32, Shape{2}))
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cpu
}  // namespace tessera
