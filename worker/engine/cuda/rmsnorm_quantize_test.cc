// RMSNorm straight to FP8 (RmsNormForwardQuantize) on the GPU (needs a GPU,
// tag "gpu"), over x fp32/bf16, weight fp32/bf16, e4m3/e5m2, with and
// without the plain codes (out.data null), on shapes that take the fused
// kernel (T a multiple of 32, H a multiple of 8 up to 4096: 32, 64, 128 and
// 256 threads per row with one vector each, 256 with two, among them the
// models' T = 16384, H = 1024 and T = 8192, H = 2048) and shapes that fall
// back to the two ops (T not a multiple of 32, H not a multiple of 8, H
// above 4096, T = 0).
//
// What is checked, and how exactly:
//  * Against the two CUDA ops in sequence (RmsNormForward into a bf16
//    tensor, then QuantizeTranspose): byte for byte, out, out_t, rstd, amax
//    and both scale_invs. No tolerance: the op promises the same bits.
//  * The GPU's codes against the CPU engine's encoder: with the GPU's own
//    rstd, the host recomputes every bf16 value (x * rstd) * w as the CPU
//    reference evaluates it and encodes it with cpu::EncodeFp8; every code
//    of out and out_t must equal that, and amax must be the exact max |value|.
//  * Against the CPU engine's op: rstd within 1e-5 relative L2 (the same
//    expressions, but the row's sum of squares in another order, so the last
//    bits of rstd may differ). Where rstd differs, a normalised value can
//    round to the neighbouring bf16 and its code can move by one FP8 step.
//    So a code may differ from the CPU engine's only where the host's bf16
//    values from the two rstds differ, by exactly one step, and in at most
//    1 of 1000 codes (at most 561 of 16.8M seen: bf16 x, H = 2048); amax
//    within one bf16 step (2^-7 relative); scale_inv exactly.
//  * Bad arguments are INVALID_ARGUMENT naming the field, on both engines.
#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/engine/cpu/fp8.h"
#include "worker/engine/cuda/engine_harness_for_test.h"

namespace tessera {
namespace testing {
namespace {

constexpr float kEps = 1e-5f;

// x dtype, weight dtype, FP8 format, with the plain codes, {T, H}
using Param = std::tuple<DType, DType, DType, bool, std::pair<int, int>>;

class RmsNormQuantizeTest : public CpuVsCudaTest, public ::testing::WithParamInterface<Param> {};

// Slots: 0 x [T, H], 1 weight [H], 2 scale, 3 out [T, H], 4 out_t [H, T],
// 5 amax, 6 out's scale_inv, 7 out_t's scale_inv, 8 rstd [T], 9 a bf16
// [T, H] for the unfused sequence. Outputs are poisoned; amax starts at 0.
std::vector<HostTensor> Inputs(DType dx, DType dw, DType fp8, int64_t t, int64_t h) {
  const uint32_t seed = static_cast<uint32_t>(t * 131 + h);
  // |x * rstd * w| reaches about 1.7: e4m3 at 300 saturates the largest
  // values (448), and both formats reach their subnormals.
  return {RandomTensor(dx, Shape{t, h}, seed, 2.f),
          RandomTensor(dw, Shape{h}, seed + 1),
          Scalar(fp8 == DType::kE4M3 ? 300.f : 20000.f),
          Poisoned(fp8, Shape{t, h}),
          Poisoned(fp8, Shape{h, t}),
          Scalar(0.f),
          Scalar(-1.f),
          Scalar(-1.f),
          Poisoned(DType::kFloat32, Shape{t}),
          Poisoned(DType::kBFloat16, Shape{t, h})};
}

TensorDesc Out(std::vector<TensorDesc>& d, bool with_out) {
  TensorDesc out = d[3];
  if (!with_out) out.data = nullptr;
  out.scale = d[2].As<float>();
  out.amax = d[5].As<float>();
  out.scale_inv = d[6].As<float>();
  return out;
}

TensorDesc OutT(std::vector<TensorDesc>& d) {
  TensorDesc out_t = d[4];
  out_t.scale_inv = d[7].As<float>();
  return out_t;
}

// The fused op, or RmsNormForward into slot 9 then QuantizeTranspose.
Body RmsNormToFp8(bool with_out, bool fused) {
  return [with_out, fused](Ops& ops, std::vector<TensorDesc>& d) {
    if (fused) {
      return ops.RmsNormForwardQuantize(d[0], d[1], kEps, Out(d, with_out), OutT(d), d[8], nullptr);
    }
    absl::Status s = ops.RmsNormForward(d[0], d[1], kEps, d[9], d[8], nullptr);
    if (s.ok()) s = ops.QuantizeTranspose(d[9], Out(d, with_out), OutT(d), nullptr);
    return s;
  };
}

// fp32 values of an fp32 or bf16 host tensor.
std::vector<float> Floats(const HostTensor& t) {
  const std::vector<double> v = AsDoubles(t);
  return std::vector<float>(v.begin(), v.end());
}

// The bf16-rounded normalised values for the given rstd, evaluated as the
// CPU reference does: (x * rstd) * w in fp32, rounded to nearest even.
std::vector<float> NormalisedBf16(const std::vector<float>& x, const std::vector<float>& w,
                                  const std::vector<float>& rstd, int64_t t, int64_t h) {
  std::vector<float> y(static_cast<size_t>(t * h));
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t j = 0; j < h; ++j) {
      const float scaled = x[r * h + j] * rstd[r];
      y[r * h + j] = cpu::RoundToBf16(scaled * w[j]);
    }
  }
  return y;
}

// Codes one FP8 step apart: the same sign, magnitudes differing by one.
bool OneStepApart(uint8_t a, uint8_t b) {
  return (a & 0x80) == (b & 0x80) && std::abs(int{a & 0x7F} - int{b & 0x7F}) == 1;
}

float First(const HostTensor& t) { return t.As<float>()[0]; }

TEST_P(RmsNormQuantizeTest, FusedEqualsTheTwoOpsOnTheGpu) {
  const auto [dx, dw, fp8, with_out, dims] = GetParam();
  const auto [t, h] = dims;
  const std::vector<HostTensor> inputs = Inputs(dx, dw, fp8, t, h);
  auto fused = RunOn(gpu(), inputs, RmsNormToFp8(with_out, true));
  auto twice = RunOn(gpu(), inputs, RmsNormToFp8(with_out, false));
  ASSERT_TRUE(fused.ok()) << fused.status();
  ASSERT_TRUE(twice.ok()) << twice.status();
  for (int slot = 3; slot <= 8; ++slot) {
    EXPECT_EQ((*fused)[slot].bytes, (*twice)[slot].bytes) << "slot " << slot;
  }
  if (!with_out) {
    EXPECT_EQ((*fused)[3].bytes, inputs[3].bytes) << "out was written";
  }
}

TEST_P(RmsNormQuantizeTest, MatchesTheCpuEngine) {
  const auto [dx, dw, fp8, with_out, dims] = GetParam();
  const auto [t, h] = dims;
  const std::vector<HostTensor> inputs = Inputs(dx, dw, fp8, t, h);
  auto [c, g] = Both(inputs, RmsNormToFp8(with_out, true));
  EXPECT_LT(Error(g[8], c[8]), 1e-5) << "rstd";
  EXPECT_EQ(First(g[6]), 1.0f / First(inputs[2])) << "scale_inv";
  EXPECT_EQ(First(g[6]), First(c[6])) << "scale_inv";
  EXPECT_EQ(First(g[7]), First(c[7])) << "out_t's scale_inv";
  if (t == 0) return;

  const std::vector<float> x = Floats(inputs[0]), w = Floats(inputs[1]);
  const std::vector<float> y_gpu = NormalisedBf16(x, w, g[8].As<float>(), t, h);
  const std::vector<float> y_cpu = NormalisedBf16(x, w, c[8].As<float>(), t, h);
  const float scale = First(inputs[2]);
  float max_abs = 0.f;
  int64_t wrong_codes = 0, differing = 0, unexplained = 0, far = 0, cpu_out_vs_out_t = 0;
  const std::vector<uint8_t>& out_g = g[3].bytes;
  const std::vector<uint8_t>& out_c = c[3].bytes;
  const std::vector<uint8_t>& out_t_g = g[4].bytes;
  const std::vector<uint8_t>& out_t_c = c[4].bytes;
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t j = 0; j < h; ++j) {
      const int64_t i = r * h + j, i_t = j * t + r;
      if (!std::isnan(y_gpu[i])) max_abs = std::max(max_abs, std::fabs(y_gpu[i]));
      // The GPU's codes are the CPU encoder's codes of the GPU's bf16 values.
      const uint8_t want = cpu::EncodeFp8(fp8, y_gpu[i] * scale);
      wrong_codes += out_t_g[i_t] != want;
      if (with_out) wrong_codes += out_g[i] != want;
      // Against the CPU engine, only where its rstd moved the bf16 value.
      if (out_t_g[i_t] != out_t_c[i_t]) {
        ++differing;
        unexplained += y_gpu[i] == y_cpu[i];
        far += !OneStepApart(out_t_g[i_t], out_t_c[i_t]);
      }
      if (with_out) cpu_out_vs_out_t += out_c[i] != out_t_c[i_t];
    }
  }
  EXPECT_EQ(wrong_codes, 0) << "codes differing from the CPU encoder of the GPU's bf16 values";
  EXPECT_EQ(First(g[5]), max_abs) << "amax";
  EXPECT_EQ(unexplained, 0) << "codes differing from the CPU engine's with the same bf16 value";
  EXPECT_EQ(far, 0) << "codes more than one step from the CPU engine's";
  EXPECT_EQ(cpu_out_vs_out_t, 0) << "the CPU engine's out and out_t disagree";
  EXPECT_LE(differing, t * h / 1000) << "codes differing from the CPU engine's";
  RecordProperty("codes_differing_from_cpu", std::to_string(differing));
  EXPECT_LE(std::fabs(First(g[5]) - First(c[5])), std::ldexp(First(c[5]), -7)) << "amax";
  if (!with_out) {
    EXPECT_EQ(g[3].bytes, inputs[3].bytes) << "out was written";
  }
}

// e.g. x_float32_w_bfloat16_e4m3_out_16384x1024
std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  const std::pair<int, int> dims = std::get<4>(info.param);
  return absl::StrCat("x_", DTypeName(std::get<0>(info.param)), "_w_",
                      DTypeName(std::get<1>(info.param)), "_", DTypeName(std::get<2>(info.param)),
                      std::get<3>(info.param) ? "_out_" : "_no_out_", dims.first, "x", dims.second);
}

INSTANTIATE_TEST_SUITE_P(
    DtypesAndShapes, RmsNormQuantizeTest,
    ::testing::Combine(::testing::Values(DType::kFloat32, DType::kBFloat16),
                       ::testing::Values(DType::kFloat32, DType::kBFloat16),
                       ::testing::Values(DType::kE4M3, DType::kE5M2), ::testing::Bool(),
                       ::testing::Values(
                           // fused: the models' shapes, then every row group shape
                           std::pair{16384, 1024}, std::pair{8192, 2048}, std::pair{256, 4096},
                           std::pair{64, 256}, std::pair{96, 512}, std::pair{32, 8},
                           std::pair{128, 1536}, std::pair{64, 2056},
                           // the two ops: T % 32, H % 8, H > 4096, no rows
                           std::pair{33, 1024}, std::pair{64, 130}, std::pair{64, 8192},
                           std::pair{0, 64})),
    ParamName);

// Each bad argument is INVALID_ARGUMENT whose message starts with the
// field's name, on both engines, before anything runs on the GPU.
TEST_F(CpuVsCudaTest, RmsNormForwardQuantizeRejectsBadArguments) {
  constexpr int64_t t = 64, h = 128;
  const std::vector<HostTensor> inputs =
      Inputs(DType::kFloat32, DType::kBFloat16, DType::kE4M3, t, h);
  struct Args {
    TensorDesc x, weight, out, out_t, rstd;
    float eps = kEps;
  };
  struct Case {
    const char* field;
    std::function<void(Args&)> spoil;
  };
  const std::vector<Case> cases = {
      {"x:",
       [](Args& a) {
         a.x.shape = Shape{t, h, 1};
       }},
      {"x:", [](Args& a) { a.x.dtype = DType::kE4M3; }},
      {"weight:", [](Args& a) { a.weight.shape = Shape{h - 8}; }},
      {"eps:", [](Args& a) { a.eps = -1.f; }},
      {"eps:", [](Args& a) { a.eps = INFINITY; }},
      {"out:", [](Args& a) { a.out.dtype = DType::kBFloat16; }},
      {"out:",
       [](Args& a) {
         a.out.shape = Shape{t, h / 2};
       }},
      {"out.scale:", [](Args& a) { a.out.scale = nullptr; }},
      {"out_t:",
       [](Args& a) {
         a.out_t.shape = Shape{t, h};
       }},
      {"out_t:", [](Args& a) { a.out_t.dtype = DType::kE5M2; }},
      {"rstd:", [](Args& a) { a.rstd.shape = Shape{t + 1}; }},
      {"rstd:", [](Args& a) { a.rstd.dtype = DType::kBFloat16; }},
  };
  for (Ops* ops : {&cpu(), &gpu()}) {
    const char* engine = ops == &cpu() ? "cpu: " : "cuda: ";
    for (const Case& bad : cases) {
      auto result = RunOn(*ops, inputs, [&bad](Ops& ops, std::vector<TensorDesc>& d) {
        Args a{d[0], d[1], Out(d, true), OutT(d), d[8]};
        bad.spoil(a);
        return ops.RmsNormForwardQuantize(a.x, a.weight, a.eps, a.out, a.out_t, a.rstd, nullptr);
      });
      ASSERT_FALSE(result.ok()) << engine << bad.field;
      EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument)
          << engine << result.status();
      EXPECT_EQ(result.status().message().rfind(bad.field, 0), 0u) << engine << result.status();
    }
  }
  // The GPU is still healthy and the good call goes through.
  EXPECT_TRUE(RunOn(gpu(), inputs, RmsNormToFp8(true, true)).ok());
}

}  // namespace
}  // namespace testing
}  // namespace tessera
