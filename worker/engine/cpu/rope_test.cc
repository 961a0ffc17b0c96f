// RoPE forward and backward on the grouped-query layout [B, S, nh + 2*nkv,
// hd] against an fp64 rotation of the nh query and nkv key heads, over
// several shapes (one token, odd sequence lengths and head counts, group
// sizes 1 to 8, head dims 2 to 128) and two thetas. The fp64 backward (the
// transposed rotation) is checked against central finite differences of the
// fp64 forward; the op is checked against both within one bf16 rounding
// (2^-8 relative). The value heads and their gradients are untouched bit for
// bit; results are deterministic; bad arguments are named.
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
  int batch, seq, heads, kv_heads, hd;
  int qkv_heads() const { return heads + 2 * kv_heads; }
  Shape QkvShape() const { return Shape{batch, seq, qkv_heads(), hd}; }
};

// Rotates the query and key rows (heads [0, nh + nkv) of every token) of x
// by angle s * theta^(-2i/hd) (sign +1) or by its negative (sign -1, the
// transpose), in fp64.
std::vector<double> RefRotate(std::vector<double> x, const Dims& d, double theta, double sign) {
  const int half = d.hd / 2;
  for (int b = 0; b < d.batch; ++b) {
    for (int s = 0; s < d.seq; ++s) {
      for (int head = 0; head < d.heads + d.kv_heads; ++head) {
        double* row = x.data() + ((int64_t{b} * d.seq + s) * d.qkv_heads() + head) * d.hd;
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
  return x;
}

// True for elements of the value heads of a [B, S, nh + 2*nkv, hd] tensor.
bool IsValue(int64_t index, const Dims& d) {
  return (index / d.hd) % d.qkv_heads() >= d.heads + d.kv_heads;
}

class RopeTest : public ::testing::TestWithParam<std::tuple<Dims, float>> {};

TEST_P(RopeTest, ForwardAndBackwardMatchFp64Rotation) {
  auto [d, theta] = GetParam();
  const FloatTensor input = FloatTensor::Random(kBf16, d.QkvShape(), 21 + d.seq * d.hd, 2.0f);
  FloatTensor qkv = input;
  ASSERT_TRUE(RopeForward(qkv.desc(), d.kv_heads, theta).ok());
  const std::vector<double> want = RefRotate(input.values(), d, theta, 1.0);
  EXPECT_TRUE(AllClose(qkv.values(), want, 1.0 / 256, 1e-6 * MaxAbs(want)));
  for (int64_t i = 0; i < qkv.size(); ++i) {
    if (IsValue(i, d)) {
      ASSERT_EQ(qkv.Get(i), input.Get(i)) << "value head changed at " << i;
    }
  }
  FloatTensor qkv_again = input;
  ASSERT_TRUE(RopeForward(qkv_again.desc(), d.kv_heads, theta).ok());
  EXPECT_TRUE(qkv_again.BitEqual(qkv));

  const FloatTensor grad_in = FloatTensor::Random(kBf16, d.QkvShape(), 22 + d.batch);
  FloatTensor grad = grad_in;
  ASSERT_TRUE(RopeBackward(grad.desc(), d.kv_heads, theta).ok());
  const std::vector<double> want_grad = RefRotate(grad_in.values(), d, theta, -1.0);
  EXPECT_TRUE(AllClose(grad.values(), want_grad, 1.0 / 256, 1e-6 * MaxAbs(want_grad)));
  for (int64_t i = 0; i < grad.size(); ++i) {
    if (IsValue(i, d)) {
      ASSERT_EQ(grad.Get(i), grad_in.Get(i)) << "value gradient changed at " << i;
    }
  }
  FloatTensor grad_again = grad_in;
  ASSERT_TRUE(RopeBackward(grad_again.desc(), d.kv_heads, theta).ok());
  EXPECT_TRUE(grad_again.BitEqual(grad));

  // Backward undoes forward up to two bf16 roundings.
  FloatTensor round_trip = qkv;
  ASSERT_TRUE(RopeBackward(round_trip.desc(), d.kv_heads, theta).ok());
  EXPECT_TRUE(AllClose(round_trip.values(), input.values(), 2.0 / 256, 2.0 / 256 * MaxAbs(want)));
}

std::string RopeName(const ::testing::TestParamInfo<RopeTest::ParamType>& info) {
  auto [d, theta] = info.param;
  return "B" + std::to_string(d.batch) + "_S" + std::to_string(d.seq) + "_nh" +
         std::to_string(d.heads) + "_nkv" + std::to_string(d.kv_heads) + "_hd" +
         std::to_string(d.hd) + "_theta" +
         std::to_string(static_cast<int>(theta));
}

INSTANTIATE_TEST_SUITE_P(Shapes, RopeTest,
                         ::testing::Combine(::testing::Values(Dims{1, 1, 1, 1, 2},
                                                              Dims{2, 9, 2, 2, 8},
                                                              Dims{1, 17, 3, 3, 16},
                                                              Dims{2, 7, 4, 2, 6},
                                                              Dims{3, 5, 4, 1, 64},
                                                              Dims{1, 33, 8, 1, 128},
                                                              Dims{1, 100, 8, 2, 32}),
                                            ::testing::Values(10000.0f, 500000.0f)),
                         RopeName);

TEST(Rope, ReferenceBackwardMatchesFiniteDifferences) {
  for (Dims d : {Dims{1, 3, 1, 1, 2}, Dims{2, 5, 2, 2, 6}, Dims{1, 4, 4, 1, 4}}) {
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
  const Dims d{2, 1, 4, 2, 8};
  const FloatTensor input = FloatTensor::Random(kBf16, d.QkvShape(), 41);
  FloatTensor qkv = input;
  ASSERT_TRUE(RopeForward(qkv.desc(), d.kv_heads, 10000.0f).ok());
  EXPECT_TRUE(qkv.BitEqual(input));
}

TEST(Rope, RejectsBadArgumentsNamingThem) {
  // nh 2 and nkv 1: 4 heads.
  const Shape shape{1, 2, 4, 4};
  FloatTensor qkv = FloatTensor::Random(kBf16, shape, 51);
  const FloatTensor untouched = qkv;
  FloatTensor fp32 = FloatTensor::Random(DType::kFloat32, shape, 52);
  EXPECT_TRUE(InvalidArgumentNaming(RopeForward(fp32.desc(), 1, 10000.0f), "qkv"));
  EXPECT_TRUE(InvalidArgumentNaming(RopeBackward(fp32.desc(), 1, 10000.0f), "grad_qkv"));
  EXPECT_TRUE(InvalidArgumentNaming(RopeForward(qkv.desc(Shape{2, 4, 4}), 1, 10000.0f), "qkv"));
  EXPECT_TRUE(
      InvalidArgumentNaming(RopeForward(qkv.desc(Shape{1, 2, 1, 4, 4}), 1, 10000.0f), "qkv"));
  // n_kv_heads below 1, or leaving no query head (4 heads, 2 * 2 of them kv).
  EXPECT_TRUE(InvalidArgumentNaming(RopeForward(qkv.desc(), 0, 10000.0f), "n_kv_heads"));
  EXPECT_TRUE(InvalidArgumentNaming(RopeBackward(qkv.desc(), -1, 10000.0f), "n_kv_heads"));
  EXPECT_TRUE(InvalidArgumentNaming(RopeForward(qkv.desc(), 2, 10000.0f), "qkv"));
  EXPECT_TRUE(InvalidArgumentNaming(RopeBackward(qkv.desc(), 2, 10000.0f), "grad_qkv"));
  // 7 heads with nkv 2 leave nh = 3, which 2 does not divide.
  EXPECT_TRUE(InvalidArgumentNaming(RopeForward(qkv.desc(Shape{1, 1, 7, 4}), 2, 10000.0f),
                                    "n_kv_heads"));
  EXPECT_TRUE(InvalidArgumentNaming(RopeForward(qkv.desc(Shape{1, 8, 4, 1}), 1, 10000.0f), "qkv"));
  EXPECT_TRUE(
      InvalidArgumentNaming(RopeBackward(qkv.desc(Shape{1, 1, 4, 7}), 1, 10000.0f), "grad_qkv"));
  EXPECT_TRUE(InvalidArgumentNaming(RopeForward(qkv.desc(), 1, 0.0f), "theta"));
  EXPECT_TRUE(InvalidArgumentNaming(RopeForward(qkv.desc(), 1, -10.0f), "theta"));
  EXPECT_TRUE(InvalidArgumentNaming(RopeForward(qkv.desc(), 1, INFINITY), "theta"));
  EXPECT_TRUE(
      InvalidArgumentNaming(RopeForward(MakeTensor(nullptr, kBf16, shape), 1, 10000.0f), "qkv"));
  EXPECT_TRUE(qkv.BitEqual(untouched));  // no failed call wrote anything
}

}  // namespace
}  // namespace cpu
}  // namespace tessera
