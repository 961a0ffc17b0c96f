// Causal grouped-query attention against fp64 references over a grid of
// shapes: group sizes nh/nkv of 1, 2, 4 and 8 (with one and several kv
// heads), head dims 64 and 128 and small odd ones, ragged sequence lengths
// 1, 7, 33 and 100, and batches of 1 to 3.
//  * Forward: out within one bf16 rounding (2^-8 relative) of fp64, lse
//    within 1e-5.
//  * Backward: the fp64 analytic backward (dS = P (dP - D), key and value
//    gradients summed over each group) matches central finite differences of
//    the fp64 forward, and so does the op itself on tiny shapes; on the grid
//    the op matches that analytic backward evaluated with D from the op's own
//    bf16 output (its documented semantics) within 2^-8 relative, and the
//    exact fp64 gradient within 2e-2 in norm.
//  * Grouping: GQA equals multi-head attention on the same queries with each
//    kv head repeated for its query heads (out, lse and dq bit for bit), and
//    its key and value gradients are the sums of that run's per-head ones.
// Plus query head h reading kv head h / (nh / nkv), poisoned outputs,
// bit-determinism and argument errors; and document masking: a packed
// sequence gives each document the bits it gives alone, and document starts
// that break the rule are refused naming the position.
#include "worker/engine/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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
  int batch, seq, heads, kv_heads, hd;
  int group() const { return heads / kv_heads; }
  int qkv_heads() const { return heads + 2 * kv_heads; }
  Shape QkvShape() const { return Shape{batch, seq, qkv_heads(), hd}; }
  Shape OutShape() const { return Shape{batch, seq, heads, hd}; }
  Shape LseShape() const { return Shape{batch, heads, seq}; }
  // Offsets of element 0 of query head h, key head g and value head g of
  // token (b, s) in qkv, and of head h in out.
  int64_t Q(int b, int s, int h) const { return Row(b, s, h); }
  int64_t K(int b, int s, int g) const { return Row(b, s, heads + g); }
  int64_t V(int b, int s, int g) const { return Row(b, s, heads + kv_heads + g); }
  int64_t Out(int b, int s, int h) const { return ((int64_t{b} * seq + s) * heads + h) * hd; }

 private:
  int64_t Row(int b, int s, int head) const {
    return ((int64_t{b} * seq + s) * qkv_heads() + head) * hd;
  }
};

std::string DimsName(const Dims& d) {
  return "B" + std::to_string(d.batch) + "_S" + std::to_string(d.seq) + "_nh" +
         std::to_string(d.heads) + "_nkv" + std::to_string(d.kv_heads) + "_hd" +
         std::to_string(d.hd);
}

// gtest prints a failing parameter with this.
void PrintTo(const Dims& d, std::ostream* os) { *os << DimsName(d); }

struct Forward {
  std::vector<double> out, lse;
};

// Scaled causal scores of query i of head h against the keys 0..i of its kv
// head.
std::vector<double> Scores(const std::vector<double>& qkv, const Dims& d, int b, int h, int i) {
  const int g = h / d.group();
  std::vector<double> s(i + 1);
  for (int j = 0; j <= i; ++j) {
    double dot = 0.0;
    for (int c = 0; c < d.hd; ++c) dot += qkv[d.Q(b, i, h) + c] * qkv[d.K(b, j, g) + c];
    s[j] = dot / std::sqrt(static_cast<double>(d.hd));
  }
  return s;
}

Forward RefForward(const std::vector<double>& qkv, const Dims& d) {
  Forward f{std::vector<double>(static_cast<size_t>(d.batch) * d.seq * d.heads * d.hd, 0.0),
            std::vector<double>(static_cast<size_t>(d.batch) * d.heads * d.seq)};
  for (int b = 0; b < d.batch; ++b) {
    for (int h = 0; h < d.heads; ++h) {
      const int g = h / d.group();
      for (int i = 0; i < d.seq; ++i) {
        const std::vector<double> s = Scores(qkv, d, b, h, i);
        const double m = *std::max_element(s.begin(), s.end());
        double z = 0.0;
        for (double v : s) z += std::exp(v - m);
        f.lse[(int64_t{b} * d.heads + h) * d.seq + i] = std::log(z) + m;
        for (int j = 0; j <= i; ++j) {
          const double p = std::exp(s[j] - m) / z;
          for (int c = 0; c < d.hd; ++c) f.out[d.Out(b, i, h) + c] += p * qkv[d.V(b, j, g) + c];
        }
      }
    }
  }
  return f;
}

// Gradient of sum(out * dout) with respect to qkv, with D_i = dout_i . o_i
// taken from `o` (the exact forward output gives the exact gradient). Key
// and value gradients accumulate over every query head of their group.
std::vector<double> RefBackward(const std::vector<double>& qkv, const std::vector<double>& dout,
                                const std::vector<double>& o, const Dims& d) {
  std::vector<double> g(qkv.size(), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d.hd));
  for (int b = 0; b < d.batch; ++b) {
    for (int h = 0; h < d.heads; ++h) {
      const int kv = h / d.group();
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
          for (int c = 0; c < d.hd; ++c) dp += dout[d.Out(b, i, h) + c] * qkv[d.V(b, j, kv) + c];
          const double ds = p * (dp - di);
          for (int c = 0; c < d.hd; ++c) {
            g[d.Q(b, i, h) + c] += ds * scale * qkv[d.K(b, j, kv) + c];
            g[d.K(b, j, kv) + c] += ds * scale * qkv[d.Q(b, i, h) + c];
            g[d.V(b, j, kv) + c] += p * dout[d.Out(b, i, h) + c];
          }
        }
      }
    }
  }
  return g;
}

// Runs the op's forward into fresh poisoned outputs.
struct OpForward {
  FloatTensor out, lse;
};
OpForward RunForward(FloatTensor& qkv, const Dims& d) {
  OpForward f{FloatTensor::Poisoned(kBf16, d.OutShape()),
              FloatTensor::Poisoned(kF32, d.LseShape())};
  const absl::Status s = AttentionForward(qkv.desc(), d.kv_heads, f.out.desc(), f.lse.desc());
  EXPECT_TRUE(s.ok()) << s;
  return f;
}

// Runs the op's backward into a fresh poisoned gradient.
FloatTensor RunBackward(FloatTensor& dout, FloatTensor& qkv, OpForward& fwd, const Dims& d) {
  FloatTensor grad = FloatTensor::Poisoned(kBf16, d.QkvShape());
  const absl::Status s = AttentionBackward(dout.desc(), qkv.desc(), d.kv_heads, fwd.out.desc(),
                                           fwd.lse.desc(), grad.desc());
  EXPECT_TRUE(s.ok()) << s;
  return grad;
}

class AttentionTest : public ::testing::TestWithParam<Dims> {};

TEST_P(AttentionTest, ForwardAndBackwardMatchFp64) {
  const Dims d = GetParam();
  // Wider inputs for small heads keep the softmax far from uniform.
  const float spread = d.hd <= 16 ? 2.0f : 1.5f;
  const uint32_t seed = 31 + d.seq + d.hd + 7 * d.heads + 101 * d.kv_heads;
  FloatTensor qkv = FloatTensor::Random(kBf16, d.QkvShape(), seed, spread);
  OpForward fwd = RunForward(qkv, d);
  const std::vector<double> qd = qkv.values();
  const Forward ref = RefForward(qd, d);
  EXPECT_TRUE(AllClose(fwd.out.values(), ref.out, 1.0 / 256, 1e-5 * MaxAbs(ref.out)));
  EXPECT_TRUE(AllClose(fwd.lse.values(), ref.lse, 1e-6, 1e-5));

  OpForward again = RunForward(qkv, d);
  EXPECT_TRUE(again.out.BitEqual(fwd.out));
  EXPECT_TRUE(again.lse.BitEqual(fwd.lse));

  FloatTensor dout = FloatTensor::Random(kBf16, d.OutShape(), seed + 1);
  FloatTensor grad = RunBackward(dout, qkv, fwd, d);
  const std::vector<double> dd = dout.values();
  // Per element against the documented semantics (D from the bf16 output);
  // NaN (an element left poisoned) never passes.
  const std::vector<double> want = RefBackward(qd, dd, fwd.out.values(), d);
  EXPECT_TRUE(AllClose(grad.values(), want, 1.0 / 256, 1e-4 * MaxAbs(want)));
  // In norm against the exact gradient (D from the fp64 output).
  EXPECT_LT(RelativeError(grad.values(), RefBackward(qd, dd, ref.out, d)), 2e-2);

  EXPECT_TRUE(RunBackward(dout, qkv, fwd, d).BitEqual(grad));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionTest,
    ::testing::Values(
        // Multi-head (group 1).
        Dims{1, 1, 1, 1, 64}, Dims{2, 7, 2, 2, 64}, Dims{1, 100, 2, 2, 128}, Dims{1, 5, 3, 3, 3},
        // Group 2.
        Dims{1, 33, 4, 2, 64}, Dims{2, 7, 8, 4, 128}, Dims{1, 100, 6, 3, 5},
        // Group 4.
        Dims{2, 100, 4, 1, 64}, Dims{1, 33, 8, 2, 128}, Dims{3, 7, 4, 1, 5},
        // Group 8.
        Dims{1, 1, 8, 1, 128}, Dims{1, 33, 8, 1, 64}, Dims{1, 100, 8, 1, 128},
        Dims{2, 33, 16, 2, 5}),
    [](const ::testing::TestParamInfo<Dims>& info) { return DimsName(info.param); });

TEST(Attention, BackwardMatchesFiniteDifferences) {
  for (Dims d : {Dims{1, 1, 1, 1, 2}, Dims{1, 4, 2, 1, 3}, Dims{2, 5, 4, 2, 4},
                 Dims{1, 6, 8, 1, 2}}) {
    SCOPED_TRACE(DimsName(d));
    // bf16 inputs, so the op and the fp64 reference see the same values.
    FloatTensor qkv_t = FloatTensor::Random(kBf16, d.QkvShape(), 41, 2.0f);
    FloatTensor dout_t = FloatTensor::Random(kBf16, d.OutShape(), 42);
    const std::vector<double> qkv = qkv_t.values(), dout = dout_t.values();
    auto loss = [&](const std::vector<double>& v) {
      const std::vector<double> o = RefForward(v, d).out;
      double acc = 0.0;
      for (size_t i = 0; i < o.size(); ++i) acc += o[i] * dout[i];
      return acc;
    };
    const std::vector<double> numeric = NumericGradient(loss, qkv);
    const std::vector<double> analytic = RefBackward(qkv, dout, RefForward(qkv, d).out, d);
    EXPECT_TRUE(AllClose(analytic, numeric, 1e-6, 1e-8));
    // The op itself, up to its bf16 output and gradient.
    OpForward fwd = RunForward(qkv_t, d);
    FloatTensor grad = RunBackward(dout_t, qkv_t, fwd, d);
    EXPECT_LT(RelativeError(grad.values(), numeric), 2e-2);
  }
}

TEST(Attention, GroupedEqualsMultiHeadWithRepeatedKvHeadsAndSumsTheirGradients) {
  for (Dims gqa : {Dims{2, 9, 4, 2, 8}, Dims{1, 33, 8, 1, 64}, Dims{1, 17, 8, 2, 128}}) {
    SCOPED_TRACE(DimsName(gqa));
    const Dims mha{gqa.batch, gqa.seq, gqa.heads, gqa.heads, gqa.hd};
    FloatTensor qkv = FloatTensor::Random(kBf16, gqa.QkvShape(), 71 + gqa.hd, 1.5f);
    // The same queries; kv head g copied to the kv slots of its query heads.
    FloatTensor repeated = FloatTensor::Poisoned(kBf16, mha.QkvShape());
    for (int b = 0; b < gqa.batch; ++b) {
      for (int s = 0; s < gqa.seq; ++s) {
        for (int h = 0; h < gqa.heads; ++h) {
          const int g = h / gqa.group();
          for (int c = 0; c < gqa.hd; ++c) {
            repeated.Set(mha.Q(b, s, h) + c, qkv.Get(gqa.Q(b, s, h) + c));
            repeated.Set(mha.K(b, s, h) + c, qkv.Get(gqa.K(b, s, g) + c));
            repeated.Set(mha.V(b, s, h) + c, qkv.Get(gqa.V(b, s, g) + c));
          }
        }
      }
    }
    OpForward f_gqa = RunForward(qkv, gqa);
    OpForward f_mha = RunForward(repeated, mha);
    EXPECT_TRUE(f_gqa.out.BitEqual(f_mha.out));
    EXPECT_TRUE(f_gqa.lse.BitEqual(f_mha.lse));

    FloatTensor dout = FloatTensor::Random(kBf16, gqa.OutShape(), 72);
    FloatTensor g_gqa = RunBackward(dout, qkv, f_gqa, gqa);
    FloatTensor g_mha = RunBackward(dout, repeated, f_mha, mha);
    std::vector<double> dq_gqa, dq_mha, dkv_gqa, dkv_sum, dkv_abs_sum;
    for (int b = 0; b < gqa.batch; ++b) {
      for (int s = 0; s < gqa.seq; ++s) {
        for (int h = 0; h < gqa.heads; ++h) {
          for (int c = 0; c < gqa.hd; ++c) {
            dq_gqa.push_back(g_gqa.Get(gqa.Q(b, s, h) + c));
            dq_mha.push_back(g_mha.Get(mha.Q(b, s, h) + c));
          }
        }
        for (int g = 0; g < gqa.kv_heads; ++g) {
          for (int c = 0; c < gqa.hd; ++c) {
            double dk = 0.0, dv = 0.0, dk_abs = 0.0, dv_abs = 0.0;
            for (int h = g * gqa.group(); h < (g + 1) * gqa.group(); ++h) {
              dk += g_mha.Get(mha.K(b, s, h) + c);
              dv += g_mha.Get(mha.V(b, s, h) + c);
              dk_abs += std::fabs(g_mha.Get(mha.K(b, s, h) + c));
              dv_abs += std::fabs(g_mha.Get(mha.V(b, s, h) + c));
            }
            dkv_gqa.push_back(g_gqa.Get(gqa.K(b, s, g) + c));
            dkv_sum.push_back(dk);
            dkv_abs_sum.push_back(dk_abs);
            dkv_gqa.push_back(g_gqa.Get(gqa.V(b, s, g) + c));
            dkv_sum.push_back(dv);
            dkv_abs_sum.push_back(dv_abs);
          }
        }
      }
    }
    EXPECT_EQ(dq_gqa, dq_mha);
    // The GQA sum is rounded to bf16 once (error <= 2^-8 of the sum), each
    // per-head term once (<= 2^-8 of the term); fp32 order adds ~1e-7.
    const double fp32_noise = 1e-5 * MaxAbs(dkv_sum);
    int bad = 0;
    for (size_t i = 0; i < dkv_sum.size(); ++i) {
      const double bound = (std::fabs(dkv_sum[i]) + dkv_abs_sum[i]) / 256 + fp32_noise;
      if (!(std::fabs(dkv_gqa[i] - dkv_sum[i]) <= bound) && bad++ < 5) {
        ADD_FAILURE() << "kv gradient element " << i << ": " << dkv_gqa[i] << " vs sum "
                      << dkv_sum[i];
      }
    }
    EXPECT_EQ(bad, 0);
  }
}

TEST(Attention, FirstTokenOfEachQueryHeadIsTheValueOfItsGroupsKvHead) {
  // nh 6, nkv 3: query heads 0,1 -> kv 0; 2,3 -> kv 1; 4,5 -> kv 2 (not h % nkv).
  const Dims d{2, 3, 6, 3, 4};
  FloatTensor qkv = FloatTensor::Random(kBf16, d.QkvShape(), 51, 3.0f);
  OpForward fwd = RunForward(qkv, d);
  for (int b = 0; b < d.batch; ++b) {
    for (int h = 0; h < d.heads; ++h) {
      for (int c = 0; c < d.hd; ++c) {
        EXPECT_EQ(fwd.out.Get(d.Out(b, 0, h) + c), qkv.Get(d.V(b, 0, h / 2) + c)) << "head " << h;
      }
    }
  }
}

TEST(Attention, RejectsBadArgumentsNamingThem) {
  const Dims d{1, 4, 4, 2, 8};
  FloatTensor qkv = FloatTensor::Random(kBf16, d.QkvShape(), 61);
  FloatTensor out = FloatTensor::Poisoned(kBf16, d.OutShape());
  FloatTensor lse = FloatTensor::Poisoned(kF32, d.LseShape());
  FloatTensor dout = FloatTensor::Random(kBf16, d.OutShape(), 62);
  FloatTensor grad = FloatTensor::Poisoned(kBf16, d.QkvShape());
  FloatTensor qkv_f32 = FloatTensor::Random(kF32, d.QkvShape(), 63);
  FloatTensor out_f32 = FloatTensor::Random(kF32, d.OutShape(), 64);
  const int nkv = d.kv_heads;

  auto forward = [&](const TensorDesc& q, int kv, const TensorDesc& o, const TensorDesc& l) {
    return AttentionForward(q, kv, o, l);
  };
  EXPECT_TRUE(InvalidArgumentNaming(forward(qkv_f32.desc(), nkv, out.desc(), lse.desc()), "qkv"));
  EXPECT_TRUE(InvalidArgumentNaming(
      forward(qkv.desc(Shape{1, 4, 3, 2, 8}), nkv, out.desc(), lse.desc()), "qkv"));
  EXPECT_TRUE(InvalidArgumentNaming(
      forward(qkv.desc(Shape{1, 4, 8, 0}), nkv, out.desc(), lse.desc()), "qkv"));
  // n_kv_heads below 1, or not dividing nh = 4.
  for (int bad : {0, -1, 3}) {
    EXPECT_TRUE(
        InvalidArgumentNaming(forward(qkv.desc(), bad, out.desc(), lse.desc()), "n_kv_heads"))
        << bad;
  }
  // qkv's head count is not nh + 2 * nkv: 8 heads hold nh 4 with nkv 2, not
  // with nkv 1 or 4, nor nh 2 or 8 (from out) with nkv 2.
  for (int kv : {1, 4}) {
    EXPECT_TRUE(InvalidArgumentNaming(forward(qkv.desc(), kv, out.desc(), lse.desc()), "qkv"))
        << kv;
  }
  EXPECT_TRUE(InvalidArgumentNaming(
      forward(qkv.desc(), nkv, out.desc(Shape{1, 4, 2, 8}), lse.desc(Shape{1, 2, 4})), "qkv"));
  EXPECT_TRUE(InvalidArgumentNaming(
      forward(qkv.desc(Shape{1, 4, 10, 8}), nkv, out.desc(), lse.desc()), "qkv"));
  EXPECT_TRUE(InvalidArgumentNaming(forward(qkv.desc(), nkv, out_f32.desc(), lse.desc()), "out"));
  EXPECT_TRUE(InvalidArgumentNaming(
      forward(qkv.desc(), nkv, out.desc(Shape{1, 4, 8, 4}), lse.desc()), "out"));
  EXPECT_TRUE(InvalidArgumentNaming(
      forward(qkv.desc(), nkv, out.desc(Shape{1, 4, 0, 8}), lse.desc()), "out"));
  EXPECT_TRUE(InvalidArgumentNaming(
      forward(qkv.desc(), nkv, out.desc(), lse.desc(Shape{1, 4, 3})), "lse"));
  EXPECT_TRUE(InvalidArgumentNaming(
      forward(qkv.desc(), nkv, out.desc(), out.desc(d.LseShape())), "lse"));
  EXPECT_TRUE(InvalidArgumentNaming(
      forward(MakeTensor(nullptr, kBf16, d.QkvShape()), nkv, out.desc(), lse.desc()), "qkv"));
  for (int64_t i = 0; i < out.size(); ++i) ASSERT_TRUE(std::isnan(out.Get(i)));
  for (int64_t i = 0; i < lse.size(); ++i) ASSERT_TRUE(std::isnan(lse.Get(i)));

  ASSERT_TRUE(forward(qkv.desc(), nkv, out.desc(), lse.desc()).ok());
  auto backward = [&](const TensorDesc& go, int kv, const TensorDesc& o, const TensorDesc& l,
                      const TensorDesc& g) {
    return AttentionBackward(go, qkv.desc(), kv, o, l, g);
  };
  EXPECT_TRUE(InvalidArgumentNaming(
      backward(out_f32.desc(), nkv, out.desc(), lse.desc(), grad.desc()), "grad_out"));
  EXPECT_TRUE(InvalidArgumentNaming(
      backward(dout.desc(Shape{1, 4, 2, 16}), nkv, out.desc(), lse.desc(), grad.desc()),
      "grad_out"));
  EXPECT_TRUE(InvalidArgumentNaming(
      backward(dout.desc(), nkv, out_f32.desc(), lse.desc(), grad.desc()), "out"));
  for (int bad : {0, 3}) {
    EXPECT_TRUE(InvalidArgumentNaming(
        backward(dout.desc(), bad, out.desc(), lse.desc(), grad.desc()), "n_kv_heads"));
  }
  EXPECT_TRUE(InvalidArgumentNaming(
      backward(dout.desc(), 1, out.desc(), lse.desc(), grad.desc()), "qkv"));
  EXPECT_TRUE(InvalidArgumentNaming(
      backward(dout.desc(), nkv, out.desc(), lse.desc(Shape{2, 2, 4}), grad.desc()), "lse"));
  EXPECT_TRUE(InvalidArgumentNaming(
      backward(dout.desc(), nkv, out.desc(), lse.desc(), qkv_f32.desc()), "grad_qkv"));
  EXPECT_TRUE(InvalidArgumentNaming(
      backward(dout.desc(), nkv, out.desc(), lse.desc(), grad.desc(Shape{1, 4, 4, 16})),
      "grad_qkv"));
  EXPECT_TRUE(InvalidArgumentNaming(
      backward(dout.desc(), nkv, out.desc(), lse.desc(), MakeTensor(nullptr, kBf16, d.QkvShape())),
      "grad_qkv"));
  for (int64_t i = 0; i < grad.size(); ++i) ASSERT_TRUE(std::isnan(grad.Get(i)));
}

// Document masking: a packed sequence gives each of its documents exactly
// the bits that document gives alone (forward output and lse, and the
// backward's gradients), with grouped-query heads, for random inputs and
// documents of uneven lengths, one of them a single token.
TEST(AttentionDocumentMask, PackedDocumentsMatchEachDocumentAlone) {
  const Dims d{2, 24, 4, 2, 8};
  // Documents per sequence, as (start, length).
  const std::vector<std::vector<std::pair<int, int>>> docs = {
      {{0, 7}, {7, 1}, {8, 9}, {17, 7}}, {{0, 24}}};
  std::vector<int32_t> starts(d.batch * d.seq);
  for (int b = 0; b < d.batch; ++b) {
    for (const auto& [start, length] : docs[b]) {
      for (int i = start; i < start + length; ++i) starts[b * d.seq + i] = start;
    }
  }
  const TensorDesc doc_starts = MakeTensor(starts.data(), DType::kInt32, Shape{d.batch, d.seq});
  FloatTensor qkv = FloatTensor::Random(kBf16, d.QkvShape(), 77, 1.5f);
  FloatTensor dout = FloatTensor::Random(kBf16, d.OutShape(), 78);
  OpForward packed{FloatTensor::Poisoned(kBf16, d.OutShape()),
                   FloatTensor::Poisoned(kF32, d.LseShape())};
  ASSERT_TRUE(AttentionForward(qkv.desc(), d.kv_heads, packed.out.desc(), packed.lse.desc(),
                               doc_starts)
                  .ok());
  FloatTensor grad = FloatTensor::Poisoned(kBf16, d.QkvShape());
  ASSERT_TRUE(AttentionBackward(dout.desc(), qkv.desc(), d.kv_heads, packed.out.desc(),
                                packed.lse.desc(), grad.desc(), doc_starts)
                  .ok());
  int documents = 0;
  for (int b = 0; b < d.batch; ++b) {
    for (const auto& [start, length] : docs[b]) {
      SCOPED_TRACE(absl::StrCat("sequence ", b, ", document at ", start));
      ++documents;
      // The document on its own: a batch of one sequence of `length` tokens.
      const Dims one{1, length, d.heads, d.kv_heads, d.hd};
      const int64_t qkv_row = int64_t{d.qkv_heads()} * d.hd, out_row = int64_t{d.heads} * d.hd;
      FloatTensor q1 = FloatTensor::Poisoned(kBf16, one.QkvShape());
      FloatTensor dout1 = FloatTensor::Poisoned(kBf16, one.OutShape());
      for (int i = 0; i < length; ++i) {
        for (int64_t c = 0; c < qkv_row; ++c) q1.Set(i * qkv_row + c, qkv.Get(d.Q(b, start + i, 0) + c));
        for (int64_t c = 0; c < out_row; ++c) {
          dout1.Set(i * out_row + c, dout.Get(d.Out(b, start + i, 0) + c));
        }
      }
      OpForward alone = RunForward(q1, one);
      FloatTensor grad1 = RunBackward(dout1, q1, alone, one);
      for (int i = 0; i < length; ++i) {
        for (int64_t c = 0; c < out_row; ++c) {
          ASSERT_EQ(packed.out.Get(d.Out(b, start + i, 0) + c), alone.out.Get(i * out_row + c))
              << "out, token " << i;
        }
        for (int h = 0; h < d.heads; ++h) {
          ASSERT_EQ(packed.lse.Get((int64_t{b} * d.heads + h) * d.seq + start + i),
                    alone.lse.Get(int64_t{h} * length + i))
              << "lse, token " << i << ", head " << h;
        }
        for (int64_t c = 0; c < qkv_row; ++c) {
          ASSERT_EQ(grad.Get(d.Q(b, start + i, 0) + c), grad1.Get(i * qkv_row + c))
              << "grad_qkv, token " << i;
        }
      }
    }
  }
  EXPECT_EQ(documents, 5);
  // And masking changes something: the last document of sequence 0 differs
  // from plain causal attention over the whole sequence.
  OpForward whole = RunForward(qkv, d);
  EXPECT_NE(whole.out.Get(d.Out(0, 20, 0)), packed.out.Get(d.Out(0, 20, 0)));
}

TEST(AttentionDocumentMask, StartsThatBreakTheRuleAreRefusedByPosition) {
  const Dims d{1, 6, 2, 1, 8};
  FloatTensor qkv = FloatTensor::Random(kBf16, d.QkvShape(), 5);
  OpForward f{FloatTensor::Poisoned(kBf16, d.OutShape()), FloatTensor::Poisoned(kF32, d.LseShape())};
  struct Case {
    std::vector<int32_t> starts;
    const char* message;
  };
  for (const Case& c : {Case{{1, 1, 1, 1, 1, 1}, "doc_starts[0, 0]: must be 0"},
                        Case{{0, 0, 2, 2, 3, 2}, "doc_starts[0, 4]: must be 2"},
                        Case{{0, 0, 0, 5, 5, 5}, "doc_starts[0, 3]: must be 0"},
                        Case{{0, 0, 0, 0, 0, -1}, "doc_starts[0, 5]"}}) {
    std::vector<int32_t> starts = c.starts;
    const absl::Status s =
        AttentionForward(qkv.desc(), d.kv_heads, f.out.desc(), f.lse.desc(),
                         MakeTensor(starts.data(), DType::kInt32, Shape{1, 6}));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_TRUE(absl::StartsWith(s.message(), c.message)) << s;
  }
  std::vector<int32_t> starts(6, 0);
  EXPECT_TRUE(InvalidArgumentNaming(
      AttentionForward(qkv.desc(), d.kv_heads, f.out.desc(), f.lse.desc(),
                       MakeTensor(starts.data(), DType::kInt32, Shape{1, 5})),
      "doc_starts"));
  EXPECT_TRUE(InvalidArgumentNaming(
      AttentionForward(qkv.desc(), d.kv_heads, f.out.desc(), f.lse.desc(),
                       MakeTensor(starts.data(), DType::kFloat32, Shape{1, 6})),
      "doc_starts"));
}

}  // namespace
}  // namespace cpu
}  // namespace tessera
