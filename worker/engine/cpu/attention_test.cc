// Causal attention against fp64 references over several shapes (one token,
// odd sequence lengths, head counts and head dims, and seq 256 x hd 64).
//  * Forward: out within one bf16 rounding (2^-8 relative) of fp64, lse
//    within 1e-5.
//  * Backward: the fp64 analytic backward (dS = P (dP - D)) matches central
//    finite differences of the fp64 forward; the op matches that analytic
//    backward evaluated with D from the op's own bf16 output (its documented
//    semantics) within 2^-8 relative, and the exact fp64 gradient within 2e-2
//    in norm.
// Plus poisoned outputs, bit-determinism and argument errors.
#include "worker/engine/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <string>
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
using ::tessera::testing::RelativeError;

constexpr DType kBf16 = DType::kBFloat16;
constexpr DType kF32 = DType::kFloat32;

struct Dims {
  int batch, seq, heads, hd;
  Shape QkvShape() const { return Shape{batch, seq, 3, heads, hd}; }
  Shape OutShape() const { return Shape{batch, seq, heads, hd}; }
  Shape LseShape() const { return Shape{batch, heads, seq}; }
  int64_t Qkv(int b, int s, int part, int h) const {
    return (((int64_t{b} * seq + s) * 3 + part) * heads + h) * hd;
  }
  int64_t Out(int b, int s, int h) const { return ((int64_t{b} * seq + s) * heads + h) * hd; }
};

struct Forward {
  std::vector<double> out, lse;
};

// Scaled causal scores of query i against keys 0..i.
std::vector<double> Scores(const std::vector<double>& qkv, const Dims& d, int b, int h, int i) {
  std::vector<double> s(i + 1);
  for (int j = 0; j <= i; ++j) {
    double dot = 0.0;
    for (int c = 0; c < d.hd; ++c) dot += qkv[d.Qkv(b, i, 0, h) + c] * qkv[d.Qkv(b, j, 1, h) + c];
    s[j] = dot / std::sqrt(static_cast<double>(d.hd));
  }
  return s;
}

Forward RefForward(const std::vector<double>& qkv, const Dims& d) {
  Forward f{std::vector<double>(static_cast<size_t>(d.batch) * d.seq * d.heads * d.hd, 0.0),
            std::vector<double>(static_cast<size_t>(d.batch) * d.heads * d.seq)};
  for (int b = 0; b < d.batch; ++b) {
    for (int h = 0; h < d.heads; ++h) {
      for (int i = 0; i < d.seq; ++i) {
        const std::vector<double> s = Scores(qkv, d, b, h, i);
        const double m = *std::max_element(s.begin(), s.end());
        double z = 0.0;
        for (double v : s) z += std::exp(v - m);
        f.lse[(int64_t{b} * d.heads + h) * d.seq + i] = std::log(z) + m;
        for (int j = 0; j <= i; ++j) {
          const double p = std::exp(s[j] - m) / z;
          for (int c = 0; c < d.hd; ++c) f.out[d.Out(b, i, h) + c] += p * qkv[d.Qkv(b, j, 2, h) + c];
        }
      }
    }
  }
  return f;
}

// Gradient of sum(out * dout) with respect to qkv, with D_i = dout_i . o_i
// taken from `o` (the exact forward output gives the exact gradient).
std::vector<double> RefBackward(const std::vector<double>& qkv, const std::vector<double>& dout,
                                const std::vector<double>& o, const Dims& d) {
  std::vector<double> g(qkv.size(), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d.hd));
  for (int b = 0; b < d.batch; ++b) {
    for (int h = 0; h < d.heads; ++h) {
      for (int i = 0; i < d.seq; ++i) {
        const std::vector<double> s = Scores(qkv, d, b, h, i);
        const double m = *std::max_element(s.begin(), s.end());
        double z = 0.0;
        for (double v : s) z += std::exp(v - m);
        double di = 0.0;
        for (int c = 0; c < d.hd; ++c) di += dout[d.Out(b, i, h) + c] * o[d.Out(b, i, h) + c];
        for (int j = 0; j <= i; ++j) {
          const double p = std::exp(s[j] - m) / z;
          double dp = 0.0;
          for (int c = 0; c < d.hd; ++c) dp += dout[d.Out(b, i, h) + c] * qkv[d.Qkv(b, j, 2, h) + c];
          const double ds = p * (dp - di);
          for (int c = 0; c < d.hd; ++c) {
            g[d.Qkv(b, i, 0, h) + c] += ds * scale * qkv[d.Qkv(b, j, 1, h) + c];
            g[d.Qkv(b, j, 1, h) + c] += ds * scale * qkv[d.Qkv(b, i, 0, h) + c];
            g[d.Qkv(b, j, 2, h) + c] += p * dout[d.Out(b, i, h) + c];
          }
        }
      }
    }
  }
  return g;
}

class AttentionTest : public ::testing::TestWithParam<Dims> {};

TEST_P(AttentionTest, ForwardAndBackwardMatchFp64) {
  const Dims d = GetParam();
  // Wider inputs for small heads keep the softmax far from uniform.
  const float spread = d.hd <= 16 ? 2.0f : 1.5f;
  FloatTensor qkv = FloatTensor::Random(kBf16, d.QkvShape(), 31 + d.seq + d.hd, spread);
  FloatTensor out = FloatTensor::Poisoned(kBf16, d.OutShape());
  FloatTensor lse = FloatTensor::Poisoned(kF32, d.LseShape());
  ASSERT_TRUE(AttentionForward(qkv.desc(), out.desc(), lse.desc()).ok());
  const std::vector<double> qd = qkv.values();
  const Forward ref = RefForward(qd, d);
  EXPECT_TRUE(AllClose(out.values(), ref.out, 1.0 / 256, 1e-5 * MaxAbs(ref.out)));
  EXPECT_TRUE(AllClose(lse.values(), ref.lse, 1e-6, 1e-5));

  FloatTensor out_again = FloatTensor::Poisoned(kBf16, d.OutShape());
  FloatTensor lse_again = FloatTensor::Poisoned(kF32, d.LseShape());
  ASSERT_TRUE(AttentionForward(qkv.desc(), out_again.desc(), lse_again.desc()).ok());
  EXPECT_TRUE(out_again.BitEqual(out));
  EXPECT_TRUE(lse_again.BitEqual(lse));

  FloatTensor dout = FloatTensor::Random(kBf16, d.OutShape(), 37 + d.batch);
  FloatTensor grad = FloatTensor::Poisoned(kBf16, d.QkvShape());
  ASSERT_TRUE(AttentionBackward(dout.desc(), qkv.desc(), out.desc(), lse.desc(), grad.desc()).ok());
  const std::vector<double> dd = dout.values();
  // Per element against the documented semantics (D from the bf16 output).
  const std::vector<double> want = RefBackward(qd, dd, out.values(), d);
  EXPECT_TRUE(AllClose(grad.values(), want, 1.0 / 256, 1e-4 * MaxAbs(want)));
  // In norm against the exact gradient (D from the fp64 output).
  EXPECT_LT(RelativeError(grad.values(), RefBackward(qd, dd, ref.out, d)), 2e-2);

  FloatTensor grad_again = FloatTensor::Poisoned(kBf16, d.QkvShape());
  ASSERT_TRUE(
      AttentionBackward(dout.desc(), qkv.desc(), out.desc(), lse.desc(), grad_again.desc()).ok());
  EXPECT_TRUE(grad_again.BitEqual(grad));
}

std::string AttentionName(const ::testing::TestParamInfo<Dims>& info) {
  const Dims& d = info.param;
  return "B" + std::to_string(d.batch) + "_S" + std::to_string(d.seq) + "_nh" +
         std::to_string(d.heads) + "_hd" + std::to_string(d.hd);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionTest,
                         ::testing::Values(Dims{1, 1, 1, 4}, Dims{2, 7, 2, 8}, Dims{1, 5, 3, 3},
                                           Dims{1, 16, 3, 16}, Dims{2, 64, 2, 32},
                                           Dims{1, 256, 2, 64}),
                         AttentionName);

TEST(Attention, ReferenceBackwardMatchesFiniteDifferences) {
  for (Dims d : {Dims{1, 1, 1, 2}, Dims{1, 4, 1, 3}, Dims{2, 5, 2, 4}}) {
    SCOPED_TRACE(AttentionName(::testing::TestParamInfo<Dims>(d, 0)));
    const std::vector<double> qkv = FloatTensor::Random(kF32, d.QkvShape(), 41, 2.0f).values();
    const std::vector<double> dout = FloatTensor::Random(kF32, d.OutShape(), 42).values();
    auto loss = [&](const std::vector<double>& v) {
      const std::vector<double> o = RefForward(v, d).out;
      double acc = 0.0;
      for (size_t i = 0; i < o.size(); ++i) acc += o[i] * dout[i];
      return acc;
    };
    const std::vector<double> analytic = RefBackward(qkv, dout, RefForward(qkv, d).out, d);
    EXPECT_TRUE(AllClose(analytic, NumericGradient(loss, qkv), 1e-6, 1e-8));
  }
}

TEST(Attention, FirstTokenAttendsOnlyToItself) {
  const Dims d{1, 3, 1, 4};
  FloatTensor qkv = FloatTensor::Random(kBf16, d.QkvShape(), 51, 3.0f);
  FloatTensor out = FloatTensor::Poisoned(kBf16, d.OutShape());
  FloatTensor lse = FloatTensor::Poisoned(kF32, d.LseShape());
  ASSERT_TRUE(AttentionForward(qkv.desc(), out.desc(), lse.desc()).ok());
  for (int c = 0; c < d.hd; ++c) EXPECT_EQ(out.Get(c), qkv.Get(d.Qkv(0, 0, 2, 0) + c));
}

TEST(Attention, RejectsBadArgumentsNamingThem) {
  const Dims d{1, 4, 2, 8};
  FloatTensor qkv = FloatTensor::Random(kBf16, d.QkvShape(), 61);
  FloatTensor out = FloatTensor::Poisoned(kBf16, d.OutShape());
  FloatTensor lse = FloatTensor::Poisoned(kF32, d.LseShape());
  FloatTensor dout = FloatTensor::Random(kBf16, d.OutShape(), 62);
  FloatTensor grad = FloatTensor::Poisoned(kBf16, d.QkvShape());
  FloatTensor qkv_f32 = FloatTensor::Random(kF32, d.QkvShape(), 63);
  FloatTensor out_f32 = FloatTensor::Random(kF32, d.OutShape(), 64);

  EXPECT_TRUE(InvalidArgumentNaming(AttentionForward(qkv_f32.desc(), out.desc(), lse.desc()), "qkv"));
  EXPECT_TRUE(InvalidArgumentNaming(
      AttentionForward(qkv.desc(Shape{1, 4, 2, 3, 8}), out.desc(), lse.desc()), "qkv"));
  EXPECT_TRUE(InvalidArgumentNaming(
      AttentionForward(qkv.desc(Shape{4, 3, 2, 8}), out.desc(), lse.desc()), "qkv"));
  EXPECT_TRUE(InvalidArgumentNaming(AttentionForward(qkv.desc(), out_f32.desc(), lse.desc()), "out"));
  EXPECT_TRUE(InvalidArgumentNaming(
      AttentionForward(qkv.desc(), out.desc(Shape{1, 4, 8, 2}), lse.desc()), "out"));
  EXPECT_TRUE(InvalidArgumentNaming(
      AttentionForward(qkv.desc(), out.desc(), lse.desc(Shape{1, 4, 2})), "lse"));
  EXPECT_TRUE(InvalidArgumentNaming(
      AttentionForward(qkv.desc(), out.desc(), out.desc(d.LseShape())), "lse"));
  for (int64_t i = 0; i < out.size(); ++i) EXPECT_TRUE(std::isnan(out.Get(i)));

  ASSERT_TRUE(AttentionForward(qkv.desc(), out.desc(), lse.desc()).ok());
  EXPECT_TRUE(InvalidArgumentNaming(
      AttentionBackward(out_f32.desc(), qkv.desc(), out.desc(), lse.desc(), grad.desc()), "grad_out"));
  EXPECT_TRUE(InvalidArgumentNaming(
      AttentionBackward(dout.desc(), qkv.desc(), out_f32.desc(), lse.desc(), grad.desc()), "out"));
  EXPECT_TRUE(InvalidArgumentNaming(
      AttentionBackward(dout.desc(), qkv.desc(), out.desc(), lse.desc(Shape{2, 1, 4}), grad.desc()),
      "lse"));
  EXPECT_TRUE(InvalidArgumentNaming(
      AttentionBackward(dout.desc(), qkv.desc(), out.desc(), lse.desc(), qkv_f32.desc()), "grad_qkv"));
  EXPECT_TRUE(InvalidArgumentNaming(
      AttentionBackward(dout.desc(), qkv.desc(), out.desc(), lse.desc(), grad.desc(Shape{1, 4, 3, 1, 16})),
      "grad_qkv"));
  EXPECT_TRUE(InvalidArgumentNaming(
      AttentionBackward(dout.desc(), qkv.desc(), out.desc(), lse.desc(),
                        MakeTensor(nullptr, kBf16, d.QkvShape())),
      "grad_qkv"));
  for (int64_t i = 0; i < grad.size(); ++i) EXPECT_TRUE(std::isnan(grad.Get(i)));
}

}  // namespace
}  // namespace cpu
}  // namespace tessera
