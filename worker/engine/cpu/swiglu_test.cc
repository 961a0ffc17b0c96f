// SwiGLU forward and backward against fp64 over several shapes (T = 1,
// F = 1, odd sizes), including gates large enough that expf(-g) overflows.
// The fp64 analytic backward is checked against central finite differences
// of the fp64 forward; the op is checked against it within one bf16
// rounding (2^-8 relative). Plus poisoned outputs, bit-determinism and
// argument errors.
#include "worker/engine/cpu/swiglu.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/cpu/float_tensor_for_test.h"
#include "worker/engine/cpu/reference_test_util.h"

namespace tessera {
namespace cpu {
namespace {

using ::tessera::testing::AllClose;
using ::tessera::testing::FloatTensor;
using ::tessera::testing::InvalidArgumentNaming;
using ::tessera::testing::MaxAbs;
using ::tessera::testing::NumericGradient;

constexpr DType kBf16 = DType::kBFloat16;

double Sigmoid(double g) { return 1.0 / (1.0 + std::exp(-g)); }

std::vector<double> RefForward(const std::vector<double>& gu, int t_count, int f) {
  std::vector<double> y(static_cast<size_t>(t_count) * f);
  for (int t = 0; t < t_count; ++t) {
    for (int j = 0; j < f; ++j) {
      const double g = gu[t * 2 * f + j], u = gu[t * 2 * f + f + j];
      y[t * f + j] = g * Sigmoid(g) * u;
    }
  }
  return y;
}

// d(sum y * dy) / d gate_up, in gate_up's column layout.
std::vector<double> RefBackward(const std::vector<double>& gu, const std::vector<double>& dy,
                                int t_count, int f) {
  std::vector<double> grad(gu.size());
  for (int t = 0; t < t_count; ++t) {
    for (int j = 0; j < f; ++j) {
      const double g = gu[t * 2 * f + j], u = gu[t * 2 * f + f + j], sig = Sigmoid(g);
      grad[t * 2 * f + j] = dy[t * f + j] * u * sig * (1.0 + g * (1.0 - sig));
      grad[t * 2 * f + f + j] = dy[t * f + j] * g * sig;
    }
  }
  return grad;
}

class SwiGluTest : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(SwiGluTest, ForwardAndBackwardMatchFp64) {
  auto [t_count, f] = GetParam();
  std::vector<float> values = ::tessera::testing::RandomFloats(t_count * 2 * f, 11 + f, 4.0f);
  // Saturated gates in the first row: expf(-g) overflows to inf at g = -96.
  const float extremes[] = {-96.0f, 96.0f, -30.0f, 30.0f};
  for (int j = 0; j < f && j < 4; ++j) values[j] = extremes[j];
  FloatTensor gate_up = FloatTensor::Of(kBf16, Shape{t_count, 2 * f}, values);
  FloatTensor out = FloatTensor::Poisoned(kBf16, Shape{t_count, f});
  ASSERT_TRUE(SwiGluForward(gate_up.desc(), out.desc()).ok());
  const std::vector<double> gu = gate_up.values();
  const std::vector<double> want = RefForward(gu, t_count, f);
  // The absolute floor covers saturated gates, where fp32 gives exactly 0 for
  // a true value below 1e-38.
  EXPECT_TRUE(AllClose(out.values(), want, 1.0 / 256, 1e-6 * MaxAbs(want) + 1e-30));
  FloatTensor out_again = FloatTensor::Poisoned(kBf16, Shape{t_count, f});
  ASSERT_TRUE(SwiGluForward(gate_up.desc(), out_again.desc()).ok());
  EXPECT_TRUE(out_again.BitEqual(out));

  FloatTensor dy = FloatTensor::Random(kBf16, Shape{t_count, f}, 12 + t_count);
  FloatTensor grad = FloatTensor::Poisoned(kBf16, Shape{t_count, 2 * f});
  ASSERT_TRUE(SwiGluBackward(dy.desc(), gate_up.desc(), grad.desc()).ok());
  const std::vector<double> want_grad = RefBackward(gu, dy.values(), t_count, f);
  EXPECT_TRUE(AllClose(grad.values(), want_grad, 1.0 / 256, 1e-6 * MaxAbs(want_grad) + 1e-30));
  FloatTensor grad_again = FloatTensor::Poisoned(kBf16, Shape{t_count, 2 * f});
  ASSERT_TRUE(SwiGluBackward(dy.desc(), gate_up.desc(), grad_again.desc()).ok());
  EXPECT_TRUE(grad_again.BitEqual(grad));
}

std::string SwiGluName(const ::testing::TestParamInfo<std::pair<int, int>>& info) {
  return "T" + std::to_string(info.param.first) + "_F" + std::to_string(info.param.second);
}

INSTANTIATE_TEST_SUITE_P(Shapes, SwiGluTest,
                         ::testing::Values(std::pair{1, 1}, std::pair{1, 3}, std::pair{5, 33},
                                           std::pair{7, 16}, std::pair{32, 48},
                                           std::pair{64, 257}),
                         SwiGluName);

TEST(SwiGlu, ReferenceBackwardMatchesFiniteDifferences) {
  for (auto shape : {std::pair{1, 1}, std::pair{3, 5}, std::pair{4, 8}}) {
    // Plain variables: lambdas capturing structured bindings need C++20.
    const int t_count = shape.first, f = shape.second;
    const std::vector<double> gu =
        FloatTensor::Random(DType::kFloat32, Shape{t_count, 2 * f}, 21, 4.0f).values();
    const std::vector<double> dy =
        FloatTensor::Random(DType::kFloat32, Shape{t_count, f}, 22).values();
    auto loss = [&](const std::vector<double>& v) {
      const std::vector<double> y = RefForward(v, t_count, f);
      double acc = 0.0;
      for (size_t i = 0; i < y.size(); ++i) acc += y[i] * dy[i];
      return acc;
    };
    EXPECT_TRUE(AllClose(RefBackward(gu, dy, t_count, f), NumericGradient(loss, gu), 1e-6, 1e-9));
  }
}

TEST(SwiGlu, RejectsBadArgumentsNamingThem) {
  const int t = 3, f = 4;
  FloatTensor gate_up = FloatTensor::Random(kBf16, Shape{t, 2 * f}, 31);
  FloatTensor out = FloatTensor::Poisoned(kBf16, Shape{t, f});
  FloatTensor dy = FloatTensor::Random(kBf16, Shape{t, f}, 32);
  FloatTensor grad = FloatTensor::Poisoned(kBf16, Shape{t, 2 * f});
  FloatTensor fp32 = FloatTensor::Random(DType::kFloat32, Shape{t, 2 * f}, 33);

  EXPECT_TRUE(InvalidArgumentNaming(SwiGluForward(fp32.desc(), out.desc()), "gate_up"));
  EXPECT_TRUE(InvalidArgumentNaming(SwiGluForward(gate_up.desc(Shape{t * 2 * f}), out.desc()), "gate_up"));
  // An odd width cannot split into gate and up halves.
  EXPECT_TRUE(InvalidArgumentNaming(SwiGluForward(gate_up.desc(Shape{8, 3}), out.desc()), "gate_up"));
  EXPECT_TRUE(InvalidArgumentNaming(SwiGluForward(gate_up.desc(), out.desc(Shape{t, f + 1})), "out"));
  EXPECT_TRUE(InvalidArgumentNaming(SwiGluForward(gate_up.desc(), fp32.desc(Shape{t, f})), "out"));
  EXPECT_TRUE(InvalidArgumentNaming(
      SwiGluForward(MakeTensor(nullptr, kBf16, Shape{t, 2 * f}), out.desc()), "gate_up"));
  for (int64_t i = 0; i < out.size(); ++i) EXPECT_TRUE(std::isnan(out.Get(i)));

  EXPECT_TRUE(InvalidArgumentNaming(
      SwiGluBackward(fp32.desc(Shape{t, f}), gate_up.desc(), grad.desc()), "grad_out"));
  EXPECT_TRUE(InvalidArgumentNaming(
      SwiGluBackward(dy.desc(Shape{t, f - 1}), gate_up.desc(), grad.desc()), "grad_out"));
  EXPECT_TRUE(InvalidArgumentNaming(SwiGluBackward(dy.desc(), gate_up.desc(), fp32.desc()), "grad_gate_up"));
  EXPECT_TRUE(InvalidArgumentNaming(
      SwiGluBackward(dy.desc(), gate_up.desc(), grad.desc(Shape{2 * f, t})), "grad_gate_up"));
  for (int64_t i = 0; i < grad.size(); ++i) EXPECT_TRUE(std::isnan(grad.Get(i)));
}

}  // namespace
}  // namespace cpu
}  // namespace tessera
