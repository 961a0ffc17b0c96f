// SwiGLU straight to FP8 (SwiGluForwardQuantize, SwiGluBackwardQuantize) on
// the GPU (needs a GPU, tag "gpu"). The ops promise to equal SwiGLU followed
// by QuantizeTranspose bit for bit, so on the GPU the fused result must be
// byte-identical to the two GPU ops in sequence (codes, transposed codes,
// amax, scale_inv), for e4m3 and e5m2, on shapes that take the fused kernel
// (T and F multiples of 64: the backward's two-halves-per-block kernel; F a
// multiple of 32 only: its one-tile kernel) and shapes that fall back to
// the two ops. Against the CPU reference the bf16 values may
// differ in their last bit (expf), so the dequantized results are compared
// at 2e-2 relative L2 (FP8's own rounding plus that).
#include <cmath>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/cpu/fp8.h"
#include "worker/engine/cuda/engine_harness_for_test.h"

namespace tessera {
namespace testing {
namespace {

using Param = std::tuple<int, int, DType>;  // T, F, FP8 format

class SwiGluQuantizeTest : public CpuVsCudaTest, public ::testing::WithParamInterface<Param> {};

// Slots: 0 gate_up, 1 grad_out, 2 scale, 3..6 forward (codes, codes_t, amax,
// scale_inv), 7..10 backward (the same), 11 bf16 scratch [T, 2F].
std::vector<HostTensor> Inputs(int64_t t, int64_t f, DType fp8) {
  return {RandomTensor(DType::kBFloat16, Shape{t, 2 * f}, 11, 6.f),
          RandomTensor(DType::kBFloat16, Shape{t, f}, 12, 2.f),
          Scalar(fp8 == DType::kE4M3 ? 40.f : 3000.f),
          Poisoned(fp8, Shape{t, f}), Poisoned(fp8, Shape{f, t}), Scalar(0.f), Scalar(-1.f),
          Poisoned(fp8, Shape{t, 2 * f}), Poisoned(fp8, Shape{2 * f, t}), Scalar(0.f), Scalar(-1.f),
          Poisoned(DType::kBFloat16, Shape{t, 2 * f})};
}

// The values FP8 codes stand for (the common scale cancels in a relative error).
std::vector<double> Decoded(const HostTensor& codes) {
  std::vector<double> v(codes.bytes.size());
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = codes.dtype == DType::kE4M3 ? cpu::DecodeE4M3(codes.bytes[i]) : cpu::DecodeE5M2(codes.bytes[i]);
  }
  return v;
}

TensorDesc Codes(std::vector<TensorDesc>& d, int slot) {
  TensorDesc c = d[slot];
  c.scale = d[2].As<float>();
  c.amax = d[slot + 2].As<float>();
  c.scale_inv = d[slot + 3].As<float>();
  return c;
}

// The fused ops, or (unfused) SwiGLU into the bf16 scratch then QuantizeTranspose.
absl::Status SwiGluToFp8(Ops& ops, std::vector<TensorDesc>& d, bool fused) {
  const int64_t t = d[0].shape[0], f = d[0].shape[1] / 2;
  if (fused) {
    absl::Status s = ops.SwiGluForwardQuantize(d[0], Codes(d, 3), d[4], nullptr);
    if (s.ok()) s = ops.SwiGluBackwardQuantize(d[1], d[0], Codes(d, 7), d[8], nullptr);
    return s;
  }
  TensorDesc act = d[11];
  act.shape = Shape{t, f};
  absl::Status s = ops.SwiGluForward(d[0], act, nullptr);
  if (s.ok()) s = ops.QuantizeTranspose(act, Codes(d, 3), d[4], nullptr);
  if (s.ok()) s = ops.SwiGluBackward(d[1], d[0], d[11], nullptr);
  if (s.ok()) s = ops.QuantizeTranspose(d[11], Codes(d, 7), d[8], nullptr);
  return s;
}

TEST_P(SwiGluQuantizeTest, FusedEqualsTheTwoOpsOnTheGpu) {
  const auto [t, f, fp8] = GetParam();
  const std::vector<HostTensor> inputs = Inputs(t, f, fp8);
  auto fused = RunOn(gpu(), inputs, [](Ops& ops, std::vector<TensorDesc>& d) { return SwiGluToFp8(ops, d, true); });
  auto twice = RunOn(gpu(), inputs, [](Ops& ops, std::vector<TensorDesc>& d) { return SwiGluToFp8(ops, d, false); });
  ASSERT_TRUE(fused.ok()) << fused.status();
  ASSERT_TRUE(twice.ok()) << twice.status();
  for (int slot = 3; slot <= 10; ++slot) {
    EXPECT_EQ((*fused)[slot].bytes, (*twice)[slot].bytes) << "slot " << slot;
  }
}

TEST_P(SwiGluQuantizeTest, MatchesTheCpuReference) {
  const auto [t, f, fp8] = GetParam();
  auto [c, g] = Both(Inputs(t, f, fp8), [](Ops& ops, std::vector<TensorDesc>& d) { return SwiGluToFp8(ops, d, true); });
  for (int slot : {3, 4, 7, 8}) {
    EXPECT_LT(RelativeError(Decoded(g[slot]), Decoded(c[slot])), 2e-2) << "slot " << slot;
  }
  for (int slot : {5, 6, 9, 10}) {
    EXPECT_NEAR(g[slot].As<float>()[0], c[slot].As<float>()[0], 1e-2 * std::abs(c[slot].As<float>()[0]))
        << "slot " << slot;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SwiGluQuantizeTest,
    ::testing::Combine(::testing::Values(128, 33),
                       // 192 and 2816: fused; 96: fused backward only (2F = 192); 20: neither
                       ::testing::Values(192, 2816, 96, 20),
                       ::testing::Values(DType::kE4M3, DType::kE5M2)));

}  // namespace
}  // namespace testing
}  // namespace tessera
