// RoPE forward and backward against an fp64 rotation over several shapes
// (one token, odd sequence lengths and head counts, head dims 2 to 64) and
// two thetas. The fp64 backward (the transposed rotation) is checked against
// central finite differences of the fp64 forward; the op is checked against
// both within one bf16 rounding (2^-8 relative). v and its gradient are
// untouched bit for bit; results are deterministic; bad arguments are named.
#include "worker/engine/cpu/rope.h"

#include <cmath>
#include <string>
#include <tuple>
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

struct Dims {
  int batch, seq, heads, hd;
  Shape QkvShape() const { return Shape{batch, seq, 3, heads, hd}; }
  int64_t Size() const { return int64_t{batch} * seq * 3 * heads * hd; }
};

// Rotates the q and k rows of x by angle s * theta^(-2i/hd) (sign +1) or by
// its negative (sign -1, the transpose), in fp64.
std::vector<double> RefRotate(std::vector<double> x, const Dims& d, double theta, double sign) {
  const int half = d.hd / 2;
  for (int b = 0; b < d.batch; ++b) {
    for (int s = 0; s < d.seq; ++s) {
      for (int part = 0; part < 2; ++part) {
        for (int h = 0; h < d.heads; ++h) {
          double* row = x.data() + (((int64_t{b} * d.seq + s) * 3 + part) * d.heads + h) * d.hd;
          for (int i = 0; i < half; ++i) {
            const double angle = s * std::pow(theta, -2.0 * i / d.hd);
            const double c = std::cos(angle), n = sign * std::sin(angle);
            const double x1 = row[i], x2 = row[i + half];
            row[i] = x1 * c - x2 * n;
            row[i + half] = x2 * c + x1 * n;
          }
        }
      }
    }
  }
  return x;
}

// True for elements of the v part of a [B, S, 3, nh, hd] tensor.
bool IsV(int64_t index, const Dims& d) { return (index / (int64_t{d.heads} * d.hd)) % 3 == 2; }

class RopeTest : public ::testing::TestWithParam<std::tuple<Dims, float>> {};

TEST_P(RopeTest, ForwardAndBackwardMatchFp64Rotation) {
  auto [d, theta] = GetParam();
  const FloatTensor input = FloatTensor::Random(kBf16, d.QkvShape(), 21 + d.seq * d.hd, 2.0f);
  FloatTensor qkv = input;
  ASSERT_TRUE(RopeForward(qkv.desc(), theta).ok());
  const std::vector<double> want = RefRotate(input.values(), d, theta, 1.0);
  EXPECT_TRUE(AllClose(qkv.values(), want, 1.0 / 256, 1e-6 * MaxAbs(want)));
  for (int64_t i = 0; i < qkv.size(); ++i) {
    if (IsV(i, d)) {
      ASSERT_EQ(qkv.Get(i), input.Get(i)) << "v changed at " << i;
    }
  }
  FloatTensor qkv_again = input;
  ASSERT_TRUE(RopeForward(qkv_again.desc(), theta).ok());
  EXPECT_TRUE(qkv_again.BitEqual(qkv));

  const FloatTensor grad_in = FloatTensor::Random(kBf16, d.QkvShape(), 22 + d.batch);
  FloatTensor grad = grad_in;
  ASSERT_TRUE(RopeBackward(grad.desc(), theta).ok());
  const std::vector<double> want_grad = RefRotate(grad_in.values(), d, theta, -1.0);
  EXPECT_TRUE(AllClose(grad.values(), want_grad, 1.0 / 256, 1e-6 * MaxAbs(want_grad)));
  for (int64_t i = 0; i < grad.size(); ++i) {
    if (IsV(i, d)) {
      ASSERT_EQ(grad.Get(i), grad_in.Get(i)) << "v gradient changed at " << i;
    }
  }
  FloatTensor grad_again = grad_in;
  ASSERT_TRUE(RopeBackward(grad_again.desc(), theta).ok());
  EXPECT_TRUE(grad_again.BitEqual(grad));

  // Backward undoes forward up to two bf16 roundings.
  FloatTensor round_trip = qkv;
  ASSERT_TRUE(RopeBackward(round_trip.desc(), theta).ok());
  EXPECT_TRUE(AllClose(round_trip.values(), input.values(), 2.0 / 256, 2.0 / 256 * MaxAbs(want)));
}

std::string RopeName(const ::testing::TestParamInfo<RopeTest::ParamType>& info) {
  auto [d, theta] = info.param;
  return "B" + std::to_string(d.batch) + "_S" + std::to_string(d.seq) + "_nh" +
         std::to_string(d.heads) + "_hd" + std::to_string(d.hd) + "_theta" +
         std::to_string(static_cast<int>(theta));
}

INSTANTIATE_TEST_SUITE_P(Shapes, RopeTest,
                         ::testing::Combine(::testing::Values(Dims{1, 1, 1, 2}, Dims{2, 9, 2, 8},
                                                              Dims{1, 17, 3, 16}, Dims{3, 5, 1, 64},
                                                              Dims{1, 128, 2, 32}),
                                            ::testing::Values(10000.0f, 500000.0f)),
                         RopeName);

TEST(Rope, ReferenceBackwardMatchesFiniteDifferences) {
  for (Dims d : {Dims{1, 3, 1, 2}, Dims{2, 5, 2, 6}}) {
    const double theta = 10000.0;
    const std::vector<double> x = FloatTensor::Random(DType::kFloat32, d.QkvShape(), 31).values();
    const std::vector<double> g = FloatTensor::Random(DType::kFloat32, d.QkvShape(), 32).values();
    auto loss = [&](const std::vector<double>& v) {
      const std::vector<double> y = RefRotate(v, d, theta, 1.0);
      double acc = 0.0;
      for (size_t i = 0; i < y.size(); ++i) acc += y[i] * g[i];
      return acc;
    };
    EXPECT_TRUE(AllClose(RefRotate(g, d, theta, -1.0), NumericGradient(loss, x), 1e-7, 1e-9));
  }
}

TEST(Rope, PositionZeroIsTheIdentity) {
  const Dims d{2, 1, 3, 8};
  const FloatTensor input = FloatTensor::Random(kBf16, d.QkvShape(), 41);
  FloatTensor qkv = input;
  ASSERT_TRUE(RopeForward(qkv.desc(), 10000.0f).ok());
  EXPECT_TRUE(qkv.BitEqual(input));
}

TEST(Rope, RejectsBadArgumentsNamingThem) {
  FloatTensor qkv = FloatTensor::Random(kBf16, Shape{1, 2, 3, 2, 4}, 51);
  const FloatTensor untouched = qkv;
  FloatTensor fp32 = FloatTensor::Random(DType::kFloat32, Shape{1, 2, 3, 2, 4}, 52);
  EXPECT_TRUE(InvalidArgumentNaming(RopeForward(fp32.desc(), 10000.0f), "qkv"));
  EXPECT_TRUE(InvalidArgumentNaming(RopeBackward(fp32.desc(), 10000.0f), "grad_qkv"));
  EXPECT_TRUE(InvalidArgumentNaming(RopeForward(qkv.desc(Shape{2, 3, 2, 4}), 10000.0f), "qkv"));
  EXPECT_TRUE(InvalidArgumentNaming(RopeForward(qkv.desc(Shape{1, 2, 2, 3, 4}), 10000.0f), "qkv"));
  EXPECT_TRUE(InvalidArgumentNaming(RopeForward(qkv.desc(Shape{1, 4, 3, 2, 1}), 10000.0f), "qkv"));
  EXPECT_TRUE(InvalidArgumentNaming(RopeBackward(qkv.desc(Shape{1, 1, 3, 1, 7}), 10000.0f), "grad_qkv"));
  EXPECT_TRUE(InvalidArgumentNaming(RopeForward(qkv.desc(), 0.0f), "theta"));
  EXPECT_TRUE(InvalidArgumentNaming(RopeForward(qkv.desc(), -10.0f), "theta"));
  EXPECT_TRUE(InvalidArgumentNaming(RopeForward(qkv.desc(), INFINITY), "theta"));
  EXPECT_TRUE(InvalidArgumentNaming(
      RopeForward(MakeTensor(nullptr, kBf16, Shape{1, 2, 3, 2, 4}), 10000.0f), "qkv"));
  EXPECT_TRUE(qkv.BitEqual(untouched));  // no failed call wrote anything
}

}  // namespace
}  // namespace cpu
}  // namespace tessera
