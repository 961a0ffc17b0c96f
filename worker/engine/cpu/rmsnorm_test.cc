// RMSNorm forward and backward against fp64 references over every fp32/bf16
// combination of x, weight and output and several shapes (T = 1, H = 1, odd
// sizes). The fp64 analytic backward is first checked against central
// finite differences of the fp64 forward; the op is then checked against it
// with tolerances of one rounding of the output dtype (bf16: 2^-8 relative,
// fp32: 1e-5 relative), both with and without accumulate_grad_x, plus
// bit-determinism and argument errors.
#include "worker/engine/cpu/rmsnorm.h"

#include <algorithm>
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

constexpr DType kF32 = DType::kFloat32;
constexpr DType kBf16 = DType::kBFloat16;
constexpr float kEps = 1e-5f;

// Relative tolerance for a result stored in `dtype` after fp32 arithmetic.
double Tolerance(DType dtype) { return dtype == kF32 ? 1e-5 : 1.0 / 256; }

struct Reference {
  std::vector<double> out, rstd;
};

Reference RefForward(const std::vector<double>& x, const std::vector<double>& w, int t_count, int h) {
  Reference r{std::vector<double>(x.size()), std::vector<double>(t_count)};
  for (int t = 0; t < t_count; ++t) {
    double sum_sq = 0.0;
    for (int j = 0; j < h; ++j) sum_sq += x[t * h + j] * x[t * h + j];
    r.rstd[t] = 1.0 / std::sqrt(sum_sq / h + kEps);
    for (int j = 0; j < h; ++j) r.out[t * h + j] = x[t * h + j] * r.rstd[t] * w[j];
  }
  return r;
}

// Analytic gradients of sum(out * dy) with respect to x and w.
void RefBackward(const std::vector<double>& x, const std::vector<double>& w,
                 const std::vector<double>& dy, int t_count, int h, std::vector<double>* dx,
                 std::vector<double>* dw) {
  dx->assign(x.size(), 0.0);
  dw->assign(h, 0.0);
  for (int t = 0; t < t_count; ++t) {
    double sum_sq = 0.0, dot = 0.0;
    for (int j = 0; j < h; ++j) {
      sum_sq += x[t * h + j] * x[t * h + j];
      dot += w[j] * dy[t * h + j] * x[t * h + j];
    }
    const double r = 1.0 / std::sqrt(sum_sq / h + kEps);
    for (int j = 0; j < h; ++j) {
      (*dx)[t * h + j] = r * w[j] * dy[t * h + j] - x[t * h + j] * r * r * r * dot / h;
      (*dw)[j] += dy[t * h + j] * x[t * h + j] * r;
    }
  }
}

double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  double acc = 0.0;
  for (size_t i = 0; i < a.size(); ++i) acc += a[i] * b[i];
  return acc;
}

class RmsNormTest
    : public ::testing::TestWithParam<std::tuple<DType, DType, DType, std::pair<int, int>>> {};

TEST_P(RmsNormTest, ForwardAndBackwardMatchFp64) {
  auto [x_dtype, w_dtype, out_dtype, shape] = GetParam();
  auto [t_count, h] = shape;
  FloatTensor x = FloatTensor::Random(x_dtype, Shape{t_count, h}, 3 + t_count * h, 2.0f);
  std::vector<float> w_values = ::tessera::testing::RandomFloats(h, 5 + h, 0.5f);
  for (float& v : w_values) v += 1.0f;  // weights around 1, as trained norms are
  FloatTensor w = FloatTensor::Of(w_dtype, Shape{h}, w_values);
  FloatTensor out = FloatTensor::Poisoned(out_dtype, Shape{t_count, h});
  FloatTensor rstd = FloatTensor::Poisoned(kF32, Shape{t_count});
  ASSERT_TRUE(RmsNormForward(x.desc(), w.desc(), kEps, out.desc(), rstd.desc()).ok());
  const std::vector<double> xd = x.values(), wd = w.values();
  const Reference ref = RefForward(xd, wd, t_count, h);
  EXPECT_TRUE(AllClose(rstd.values(), ref.rstd, 1e-5, 0.0));
  EXPECT_TRUE(AllClose(out.values(), ref.out, Tolerance(out_dtype), 1e-6 * MaxAbs(ref.out)));

  FloatTensor out_again = FloatTensor::Poisoned(out_dtype, Shape{t_count, h});
  FloatTensor rstd_again = FloatTensor::Poisoned(kF32, Shape{t_count});
  ASSERT_TRUE(RmsNormForward(x.desc(), w.desc(), kEps, out_again.desc(), rstd_again.desc()).ok());
  EXPECT_TRUE(out_again.BitEqual(out));
  EXPECT_TRUE(rstd_again.BitEqual(rstd));

  // Backward: dy in out's dtype, grad_x in x's dtype, both accumulate modes.
  FloatTensor dy = FloatTensor::Random(out_dtype, Shape{t_count, h}, 7 + t_count);
  std::vector<double> dx_ref, dw_ref;
  RefBackward(xd, wd, dy.values(), t_count, h, &dx_ref, &dw_ref);
  // dx is a difference of two terms of size ~|rstd w dy| that can cancel
  // (completely as H -> 1), so its absolute tolerance scales with the terms.
  double term_scale = 0.0;
  const std::vector<double> dyd = dy.values();
  for (int t = 0; t < t_count; ++t) {
    for (int j = 0; j < h; ++j) {
      term_scale = std::max(term_scale, std::fabs(ref.rstd[t] * wd[j] * dyd[t * h + j]));
    }
  }
  const double dx_atol = 1e-5 * term_scale, dw_atol = 1e-5 * MaxAbs(dw_ref);
  for (bool accumulate : {false, true}) {
    SCOPED_TRACE(accumulate ? "accumulate_grad_x" : "overwrite grad_x");
    const FloatTensor dx_start = accumulate
                                     ? FloatTensor::Random(x_dtype, Shape{t_count, h}, 9 + h)
                                     : FloatTensor::Poisoned(x_dtype, Shape{t_count, h});
    const FloatTensor dw_start = FloatTensor::Random(kF32, Shape{h}, 11 + h);
    FloatTensor dx = dx_start, dw = dw_start;
    ASSERT_TRUE(RmsNormBackward(dy.desc(), x.desc(), w.desc(), rstd.desc(), dx.desc(), accumulate,
                                dw.desc())
                    .ok());
    std::vector<double> want_dx = dx_ref, want_dw = dw_ref;
    const std::vector<double> dx0 = dx_start.values(), dw0 = dw_start.values();
    if (accumulate) {
      for (size_t i = 0; i < want_dx.size(); ++i) want_dx[i] += dx0[i];
    }
    for (int j = 0; j < h; ++j) want_dw[j] += dw0[j];
    EXPECT_TRUE(AllClose(dx.values(), want_dx, Tolerance(x_dtype), dx_atol));
    EXPECT_TRUE(AllClose(dw.values(), want_dw, 1e-5, dw_atol));

    FloatTensor dx_again = dx_start, dw_again = dw_start;
    ASSERT_TRUE(RmsNormBackward(dy.desc(), x.desc(), w.desc(), rstd.desc(), dx_again.desc(),
                                accumulate, dw_again.desc())
                    .ok());
    EXPECT_TRUE(dx_again.BitEqual(dx));
    EXPECT_TRUE(dw_again.BitEqual(dw));
  }
}

std::string RmsNormName(const ::testing::TestParamInfo<RmsNormTest::ParamType>& info) {
  auto [x_dtype, w_dtype, out_dtype, shape] = info.param;
  return std::string("x_") + testing::Name(x_dtype) + "_w_" + testing::Name(w_dtype) + "_out_" +
         testing::Name(out_dtype) + "_T" + std::to_string(shape.first) + "_H" +
         std::to_string(shape.second);
}

INSTANTIATE_TEST_SUITE_P(
    DTypesAndShapes, RmsNormTest,
    ::testing::Combine(::testing::Values(kF32, kBf16), ::testing::Values(kF32, kBf16),
                       ::testing::Values(kF32, kBf16),
                       ::testing::Values(std::pair{1, 1}, std::pair{1, 8}, std::pair{3, 17},
                                         std::pair{7, 33}, std::pair{16, 64})),
    RmsNormName);

TEST(RmsNorm, ReferenceBackwardMatchesFiniteDifferences) {
  for (auto shape : {std::pair{1, 1}, std::pair{1, 5}, std::pair{4, 9}, std::pair{3, 16}}) {
    // Plain variables: lambdas capturing structured bindings need C++20.
    const int t_count = shape.first, h = shape.second;
    SCOPED_TRACE(::testing::Message() << "T " << t_count << " H " << h);
    const std::vector<double> x = FloatTensor::Random(kF32, Shape{t_count, h}, 41, 2.0f).values();
    const std::vector<double> w = FloatTensor::Random(kF32, Shape{h}, 42).values();
    const std::vector<double> dy = FloatTensor::Random(kF32, Shape{t_count, h}, 43).values();
    std::vector<double> dx, dw;
    RefBackward(x, w, dy, t_count, h, &dx, &dw);
    auto loss_x = [&](const std::vector<double>& v) { return Dot(RefForward(v, w, t_count, h).out, dy); };
    auto loss_w = [&](const std::vector<double>& v) { return Dot(RefForward(x, v, t_count, h).out, dy); };
    EXPECT_TRUE(AllClose(dx, NumericGradient(loss_x, x), 1e-6, 1e-8));
    EXPECT_TRUE(AllClose(dw, NumericGradient(loss_w, w), 1e-6, 1e-8));
  }
}

TEST(RmsNorm, EmptyBatchIsANoOp) {
  FloatTensor x(kBf16, Shape{0, 8}), out(kBf16, Shape{0, 8}), rstd(kF32, Shape{0});
  FloatTensor w = FloatTensor::Random(kF32, Shape{8}, 1);
  EXPECT_TRUE(RmsNormForward(x.desc(), w.desc(), kEps, out.desc(), rstd.desc()).ok());
}

TEST(RmsNorm, RejectsBadArgumentsNamingThem) {
  const int t = 2, h = 4;
  FloatTensor x = FloatTensor::Random(kBf16, Shape{t, h}, 51);
  FloatTensor w = FloatTensor::Random(kF32, Shape{h}, 52);
  FloatTensor out = FloatTensor::Poisoned(kBf16, Shape{t, h});
  FloatTensor rstd = FloatTensor::Poisoned(kF32, Shape{t});
  FloatTensor dx = FloatTensor::Poisoned(kF32, Shape{t, h});
  FloatTensor dw = FloatTensor::Random(kF32, Shape{h}, 53);
  std::vector<int32_t> ints(t * h, 1);
  TensorDesc int_x = MakeTensor(ints.data(), DType::kInt32, Shape{t, h});

  EXPECT_TRUE(InvalidArgumentNaming(RmsNormForward(int_x, w.desc(), kEps, out.desc(), rstd.desc()), "x"));
  EXPECT_TRUE(InvalidArgumentNaming(
      RmsNormForward(x.desc(Shape{t * h}), w.desc(), kEps, out.desc(), rstd.desc()), "x"));
  EXPECT_TRUE(InvalidArgumentNaming(
      RmsNormForward(x.desc(Shape{t * h, 0}), w.desc(Shape{0}), kEps, out.desc(Shape{t * h, 0}),
                     rstd.desc(Shape{t * h})),
      "x"));
  EXPECT_TRUE(InvalidArgumentNaming(
      RmsNormForward(x.desc(), w.desc(Shape{h - 1}), kEps, out.desc(), rstd.desc()), "weight"));
  EXPECT_TRUE(InvalidArgumentNaming(
      RmsNormForward(x.desc(), w.desc(), kEps, out.desc(Shape{t, h + 1}), rstd.desc()), "out"));
  EXPECT_TRUE(InvalidArgumentNaming(
      RmsNormForward(x.desc(), w.desc(), kEps, MakeTensor(ints.data(), DType::kE4M3, Shape{t, h}),
                     rstd.desc()),
      "out"));
  EXPECT_TRUE(InvalidArgumentNaming(
      RmsNormForward(x.desc(), w.desc(), kEps, out.desc(), x.desc(Shape{t})), "rstd"));
  EXPECT_TRUE(InvalidArgumentNaming(
      RmsNormForward(x.desc(), w.desc(), -1.0f, out.desc(), rstd.desc()), "eps"));
  EXPECT_TRUE(InvalidArgumentNaming(
      RmsNormForward(x.desc(), w.desc(), NAN, out.desc(), rstd.desc()), "eps"));
  for (int64_t i = 0; i < out.size(); ++i) EXPECT_TRUE(std::isnan(out.Get(i)));

  ASSERT_TRUE(RmsNormForward(x.desc(), w.desc(), kEps, out.desc(), rstd.desc()).ok());
  EXPECT_TRUE(InvalidArgumentNaming(
      RmsNormBackward(out.desc(Shape{h, t}), x.desc(), w.desc(), rstd.desc(), dx.desc(), false,
                      dw.desc()),
      "grad_out"));
  EXPECT_TRUE(InvalidArgumentNaming(
      RmsNormBackward(out.desc(), x.desc(), w.desc(), rstd.desc(Shape{t + 1}), dx.desc(), false,
                      dw.desc()),
      "rstd"));
  EXPECT_TRUE(InvalidArgumentNaming(
      RmsNormBackward(out.desc(), x.desc(), w.desc(), rstd.desc(), dx.desc(Shape{t, h - 1}), false,
                      dw.desc()),
      "grad_x"));
  EXPECT_TRUE(InvalidArgumentNaming(
      RmsNormBackward(out.desc(), x.desc(), w.desc(), rstd.desc(), dx.desc(), false,
                      x.desc(Shape{h})),
      "grad_weight"));
  EXPECT_TRUE(InvalidArgumentNaming(
      RmsNormBackward(out.desc(), x.desc(), w.desc(), rstd.desc(), dx.desc(), false,
                      MakeTensor(nullptr, kF32, Shape{h})),
      "grad_weight"));
}

}  // namespace
}  // namespace cpu
}  // namespace tessera
