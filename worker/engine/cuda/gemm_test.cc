// The cuBLASLt GEMM against the CPU reference (needs a GPU, tag "gpu").
// Tolerances (relative L2 error):
//   bf16 operands, fp32 out: 1e-5 (both accumulate exact bf16 products in
//     fp32, in different orders).
//   FP8 operands, fp32 out: 1e-3 on the same FP8 bytes (Hopper's FP8 tensor
//     cores keep fewer accumulator bits between promotions; ~1e-4 is typical);
//     e4m3 x e4m3 runs with fast accumulation (no promotions): 4e-3.
//   bf16 out: 1e-2 (one bf16 rounding).
// GemmAdd (an fp32 addend other than the output) with the fp32-out
// tolerances. Also: the plan cache (one heuristic query per key, none in steady state),
// timing an accumulating plan without changing its output (timed
// selection), FP8 scale pointers set per run, the INVALID_ARGUMENT cases the
// API documents, and determinism: two fresh runners with deterministic
// selection choose the same algorithm for every shape of a training step
// and give the same output bits.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/cuda/device_context.h"
#include "worker/engine/cuda/engine_harness_for_test.h"
#include "worker/engine/cuda/gemm.h"

namespace tessera {
namespace testing {
namespace {

using Bf16Param = std::tuple<bool, bool, int, int, int>;  // trans_a, trans_b, m, n, k

class Bf16GemmTest : public CpuVsCudaTest, public ::testing::WithParamInterface<Bf16Param> {};

TEST_P(Bf16GemmTest, MatchesCpu) {
  const auto [ta, tb, m, n, k] = GetParam();
  std::vector<HostTensor> t = {RandomTensor(DType::kBFloat16, ta ? Shape{k, m} : Shape{m, k}, 5),
                               RandomTensor(DType::kBFloat16, tb ? Shape{n, k} : Shape{k, n}, 6),
                               RandomTensor(DType::kFloat32, Shape{m, n}, 7),  // accumulated into
                               Poisoned(DType::kBFloat16, Shape{m, n}),
                               Poisoned(DType::kFloat32, Shape{m, n}),
                               RandomTensor(DType::kFloat32, Shape{m, n}, 8),  // addend
                               Poisoned(DType::kFloat32, Shape{m, n})};
  auto [c, g] = Both(t, [ta = ta, tb = tb](Ops& ops, std::vector<TensorDesc>& d) {
    absl::Status s = ops.Gemm(d[0], ta, d[1], tb, d[2], /*accumulate=*/true, nullptr);
    if (s.ok()) s = ops.Gemm(d[0], ta, d[1], tb, d[3], false, nullptr);
    if (s.ok()) s = ops.Gemm(d[0], ta, d[1], tb, d[4], false, nullptr);
    if (s.ok()) s = ops.GemmAdd(d[0], ta, d[1], tb, d[5], d[6], nullptr);
    return s;
  });
  EXPECT_LT(Error(g[2], c[2]), 1e-5) << "fp32 accumulate";
  EXPECT_LT(Error(g[3], c[3]), 1e-2) << "bf16 out";
  EXPECT_LT(Error(g[4], c[4]), 1e-5) << "fp32 out";
  EXPECT_LT(Error(g[6], c[6]), 1e-5) << "fp32 addend";
}

INSTANTIATE_TEST_SUITE_P(Layouts, Bf16GemmTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool(),
                                            ::testing::Values(1, 96), ::testing::Values(32, 200),
                                            ::testing::Values(8, 136)));

using Fp8Param = std::tuple<std::pair<DType, DType>, std::tuple<int, int, int>>;

class Fp8GemmTest : public CpuVsCudaTest, public ::testing::WithParamInterface<Fp8Param> {};

TEST_P(Fp8GemmTest, MatchesCpuOnTheSameFp8Bytes) {
  const auto [dtypes, mnk] = GetParam();
  const auto [da, db] = dtypes;
  const auto [m, n, k] = mnk;
  std::vector<HostTensor> t = {RandomTensor(DType::kFloat32, Shape{m, k}, 8, 50.f),
                               RandomTensor(DType::kFloat32, Shape{n, k}, 9, 50.f),
                               Poisoned(da, Shape{m, k}), Poisoned(db, Shape{n, k}),
                               Scalar(2.0f), Scalar(0.f), Scalar(4.0f), Scalar(0.f),
                               Poisoned(DType::kFloat32, Shape{m, n}),
                               Poisoned(DType::kBFloat16, Shape{m, n}),
                               RandomTensor(DType::kFloat32, Shape{m, n}, 10),
                               RandomTensor(DType::kFloat32, Shape{m, n}, 11),  // addend
                               Poisoned(DType::kFloat32, Shape{m, n})};
  auto [c, g] = Both(t, [](Ops& ops, std::vector<TensorDesc>& d) {
    TensorDesc a8 = d[2], b8 = d[3];
    a8.scale = d[4].As<float>();
    a8.scale_inv = d[5].As<float>();
    b8.scale = d[6].As<float>();
    b8.scale_inv = d[7].As<float>();
    absl::Status s = ops.Quantize(d[0], a8, nullptr);
    if (s.ok()) s = ops.Quantize(d[1], b8, nullptr);
    if (s.ok()) s = ops.Gemm(a8, false, b8, true, d[8], false, nullptr);
    if (s.ok()) s = ops.Gemm(a8, false, b8, true, d[9], false, nullptr);
    if (s.ok()) s = ops.Gemm(a8, false, b8, true, d[10], true, nullptr);
    if (s.ok()) s = ops.GemmAdd(a8, false, b8, true, d[11], d[12], nullptr);
    return s;
  });
  ASSERT_EQ(g[2].bytes, c[2].bytes) << "operands differ: compare GEMMs on equal bytes only";
  ASSERT_EQ(g[3].bytes, c[3].bytes);
  const double tolerance = da == DType::kE4M3 && db == DType::kE4M3 ? 4e-3 : 1e-3;
  EXPECT_LT(Error(g[8], c[8]), tolerance) << DTypeName(da) << " x " << DTypeName(db);
  EXPECT_LT(Error(g[9], c[9]), 1e-2) << "bf16 out";
  EXPECT_LT(Error(g[10], c[10]), tolerance) << "fp32 accumulate";
  EXPECT_LT(Error(g[12], c[12]), tolerance) << "fp32 addend";
  EXPECT_EQ(g[11].bytes, t[11].bytes) << "the addend is only read";
}

INSTANTIATE_TEST_SUITE_P(
    DtypesAndShapes, Fp8GemmTest,
    ::testing::Combine(::testing::Values(std::pair{DType::kE4M3, DType::kE4M3},
                                         std::pair{DType::kE5M2, DType::kE4M3},
                                         std::pair{DType::kE4M3, DType::kE5M2}),
                       ::testing::Values(std::tuple{128, 96, 256}, std::tuple{16, 16, 16},
                                         std::tuple{48, 272, 528}, std::tuple{128, 512, 2816})));

class GemmArgumentsTest : public CpuVsCudaTest {};

TEST_F(GemmArgumentsTest, RejectsWhatTheApiForbids) {
  std::vector<HostTensor> t = {Poisoned(DType::kE4M3, Shape{32, 32}), Poisoned(DType::kE4M3, Shape{32, 32}),
                               Scalar(1.f), Poisoned(DType::kFloat32, Shape{32, 32}),
                               Poisoned(DType::kBFloat16, Shape{32, 32}),
                               Poisoned(DType::kE5M2, Shape{32, 32})};
  auto g = RunOn(gpu(), t, [](Ops& ops, std::vector<TensorDesc>& d) {
    TensorDesc a = d[0], b = d[1], b5 = d[5];
    a.scale_inv = b.scale_inv = b5.scale_inv = d[2].As<float>();
    TensorDesc a5 = b5;
    // FP8 must be K-contiguous: trans_a = false, trans_b = true.
    EXPECT_EQ(ops.Gemm(a, true, b, true, d[3], false, nullptr).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(ops.Gemm(a, false, b, false, d[3], false, nullptr).code(),
              absl::StatusCode::kInvalidArgument);
    // Mixed bf16 x FP8, and e5m2 x e5m2.
    EXPECT_EQ(ops.Gemm(a, false, d[4], true, d[3], false, nullptr).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(ops.Gemm(a5, false, b5, true, d[3], false, nullptr).code(),
              absl::StatusCode::kInvalidArgument);
    // Accumulation needs fp32 d.
    EXPECT_EQ(ops.Gemm(d[4], false, d[4], true, d[4], true, nullptr).code(),
              absl::StatusCode::kInvalidArgument);
    // Shapes that do not chain.
    TensorDesc wide = d[4];
    wide.shape = Shape{16, 64};
    EXPECT_EQ(ops.Gemm(wide, false, d[4], false, d[3], false, nullptr).code(),
              absl::StatusCode::kInvalidArgument);
    return absl::OkStatus();
  });
  ASSERT_TRUE(g.ok()) << g.status();
}

// Steady state: after the first call per key, no heuristic query and no
// descriptor creation; every further call is a cache hit.
TEST(GemmPlanCacheTest, BuildsOnePlanPerKey) {
  auto ctx = cuda::DeviceContext::Create(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  cuda::GemmRunner runner(ctx->get());
  ASSERT_TRUE(runner.Init().ok());
  const int64_t m = 64, n = 48, k = 32;
  std::vector<uint16_t> a_host = ToBf16(RandomFloats(m * k, 1)), b_host = ToBf16(RandomFloats(k * n, 2));
  void *a = nullptr, *b = nullptr, *d = nullptr;
  ASSERT_EQ(cudaMalloc(&a, a_host.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&b, b_host.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d, m * n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(a, a_host.data(), a_host.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(b, b_host.data(), b_host.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  const TensorDesc ta = MakeTensor(a, DType::kBFloat16, Shape{m, k});
  const TensorDesc tb = MakeTensor(b, DType::kBFloat16, Shape{k, n});
  const TensorDesc td = MakeTensor(d, DType::kFloat32, Shape{m, n});
  const TensorDesc td16 = MakeTensor(d, DType::kBFloat16, Shape{m, n});
  for (int step = 0; step < 5; ++step) {
    ASSERT_TRUE(runner.Run(ta, false, tb, false, td, false, nullptr).ok());
    ASSERT_TRUE(runner.Run(ta, false, tb, false, td, true, nullptr).ok());
    ASSERT_TRUE(runner.Run(ta, false, tb, false, td16, false, nullptr).ok());
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(runner.plans_built(), 3);  // three keys: accumulate and the output dtype differ
  EXPECT_EQ(runner.plan_hits(), 12);
  cudaFree(a);
  cudaFree(b);
  cudaFree(d);
}

// A plan that accumulates is timed on its first run without changing its
// output: the first call (timing, then the product) and a second call on a
// copy of the same D (the chosen candidate only) leave the same bits. At
// this size the heuristic offers several candidates, so timing launches run.
TEST(GemmPlanCacheTest, TimingAnAccumulatingPlanLeavesItsOutputAlone) {
  auto ctx = cuda::DeviceContext::Create(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  cuda::GemmRunner runner(ctx->get(), cuda::GemmAlgoSelection::kTimed);
  ASSERT_TRUE(runner.Init().ok());
  const int64_t m = 1024, n = 768, k = 512;  // d [m, n] += a [k, m]ᵀ · b [k, n], as the loss's wgrad
  std::vector<uint16_t> a_host = ToBf16(RandomFloats(k * m, 11)), b_host = ToBf16(RandomFloats(k * n, 12));
  std::vector<float> d_host = RandomFloats(m * n, 13);
  void *a = nullptr, *b = nullptr, *d1 = nullptr, *d2 = nullptr;
  ASSERT_EQ(cudaMalloc(&a, a_host.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&b, b_host.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d1, d_host.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d2, d_host.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(a, a_host.data(), a_host.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(b, b_host.data(), b_host.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  for (void* d : {d1, d2}) {
    ASSERT_EQ(cudaMemcpy(d, d_host.data(), d_host.size() * sizeof(float), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  const TensorDesc ta = MakeTensor(a, DType::kBFloat16, Shape{k, m});
  const TensorDesc tb = MakeTensor(b, DType::kBFloat16, Shape{k, n});
  ASSERT_TRUE(runner.Run(ta, true, tb, false, MakeTensor(d1, DType::kFloat32, Shape{m, n}), true,
                         nullptr).ok());
  ASSERT_TRUE(runner.Run(ta, true, tb, false, MakeTensor(d2, DType::kFloat32, Shape{m, n}), true,
                         nullptr).ok());
  std::vector<float> out1(d_host.size()), out2(d_host.size());
  ASSERT_EQ(cudaMemcpy(out1.data(), d1, out1.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(out2.data(), d2, out2.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(runner.plans_built(), 1);
  EXPECT_EQ(out1, out2) << "the timed first run added more than one product";
  EXPECT_NE(out1, d_host) << "the product was not added at all";
  for (void* p : {a, b, d1, d2}) cudaFree(p);
}

// FP8 scales reach cuBLASLt as pointers set per run: consecutive runs of one
// plan with other scale_inv pointers each read their own (no stale pointer
// in the cached descriptor), and an unaligned scale_inv goes through the
// copied slots. Power-of-two scales make the expected outputs exact.
TEST(GemmPlanCacheTest, Fp8RunsReadTheirOwnScalePointers) {
  auto ctx = cuda::DeviceContext::Create(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  cuda::GemmRunner runner(ctx->get());
  ASSERT_TRUE(runner.Init().ok());
  const int64_t m = 128, n = 96, k = 256;
  std::vector<uint8_t> a_host(m * k), b_host(n * k);
  const std::vector<float> noise = RandomFloats(m * k + n * k, 21);
  for (size_t i = 0; i < noise.size(); ++i) {
    // Any e4m3 code but NaN (S.1111.111): the low 7 bits of a random byte.
    uint8_t code = static_cast<uint8_t>(static_cast<uint32_t>(std::fabs(noise[i]) * 1e6f));
    if ((code & 0x7f) == 0x7f) code = 0;
    (i < a_host.size() ? a_host[i] : b_host[i - a_host.size()]) = code;
  }
  // scale_inv values: [0] 1, [1] 0.5 (4-byte aligned only), [4] 1, [8] 4.
  std::vector<float> scales_host(16, 0.f);
  scales_host[0] = 1.f, scales_host[1] = 0.5f, scales_host[4] = 1.f, scales_host[8] = 4.f;
  void *a = nullptr, *b = nullptr, *d = nullptr;
  float* scales = nullptr;
  ASSERT_EQ(cudaMalloc(&a, a_host.size()), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&b, b_host.size()), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d, m * n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&scales, scales_host.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(a, a_host.data(), a_host.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(b, b_host.data(), b_host.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(scales, scales_host.data(), scales_host.size() * sizeof(float),
                       cudaMemcpyHostToDevice),
            cudaSuccess);
  TensorDesc ta = MakeTensor(a, DType::kE4M3, Shape{m, k});
  TensorDesc tb = MakeTensor(b, DType::kE4M3, Shape{n, k});
  tb.scale_inv = scales + 4;
  const TensorDesc td = MakeTensor(d, DType::kFloat32, Shape{m, n});
  const auto run = [&](float* a_scale_inv) {
    ta.scale_inv = a_scale_inv;
    std::vector<float> out(m * n);
    EXPECT_TRUE(runner.Run(ta, false, tb, true, td, false, nullptr).ok());
    EXPECT_EQ(cudaMemcpy(out.data(), d, out.size() * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return out;
  };
  const std::vector<float> base = run(scales);
  EXPECT_EQ(runner.scale_copies(), 0) << "aligned scale_inv needs no copy";
  const std::vector<float> times4 = run(scales + 8);
  const std::vector<float> half = run(scales + 1);
  EXPECT_EQ(runner.scale_copies(), 1) << "an unaligned scale_inv is copied to the slots";
  const std::vector<float> again = run(scales);
  EXPECT_EQ(runner.scale_copies(), 1);
  EXPECT_EQ(runner.plans_built(), 1);
  double magnitude = 0;
  for (int64_t i = 0; i < m * n; ++i) {
    ASSERT_EQ(times4[i], 4.f * base[i]) << i;
    ASSERT_EQ(half[i], 0.5f * base[i]) << i;
    ASSERT_EQ(again[i], base[i]) << i;
    magnitude += std::fabs(base[i]);
  }
  EXPECT_GT(magnitude, 0.0) << "an all-zero product would prove nothing";
  for (void* p : {a, b, d, static_cast<void*>(scales)}) cudaFree(p);
}

// One GEMM of a training step: d = op(a) · op(b) (+ d), with a's and b's
// pointers moved by `offset_bytes` from their allocation (a sub-tensor of a
// larger buffer).
struct StepGemm {
  DType a, b, d;
  bool trans_a, trans_b, accumulate;
  int64_t m, n, k;
  int64_t offset_bytes = 0;
};

// The shapes of one 221M-sized block's GEMMs (T = 2048 tokens, d_model
// 1024, ffn 2816): forward, input gradient and weight gradient, in bf16 and
// FP8, one of them on operands only 16-byte aligned.
std::vector<StepGemm> StepGemms() {
  const DType e4 = DType::kE4M3, e5 = DType::kE5M2, bf = DType::kBFloat16, f32 = DType::kFloat32;
  return {
      {bf, bf, bf, false, true, false, 2048, 3072, 1024},       // qkv forward
      {bf, bf, bf, false, false, false, 2048, 1024, 3072},      // its input gradient
      {bf, bf, f32, true, false, true, 3072, 1024, 2048},       // its weight gradient
      {e4, e4, bf, false, true, false, 2048, 5632, 1024},       // gate/up forward
      {e5, e4, bf, false, true, false, 2048, 1024, 2816},       // down's input gradient
      {e5, e4, f32, false, true, true, 1024, 2816, 2048},       // down's weight gradient
      {bf, bf, f32, false, true, false, 2048, 1024, 1024, 16},  // 16-byte aligned operands
  };
}

struct StepGemmResult {
  std::vector<std::vector<uint8_t>> outputs;  // every d, in StepGemms() order
  std::vector<std::string> algorithms;        // GemmRunner::ChosenAlgorithms
};

// Runs StepGemms() twice each (the second call served by the cached plan)
// on a fresh device context and runner, from inputs fixed by their seeds.
StepGemmResult RunStepGemms(cuda::GemmAlgoSelection selection) {
  StepGemmResult result;
  auto ctx = cuda::DeviceContext::Create(0);
  EXPECT_TRUE(ctx.ok()) << ctx.status();
  if (!ctx.ok()) return result;
  cuda::GemmRunner runner(ctx->get(), selection);
  EXPECT_TRUE(runner.Init().ok());
  std::vector<void*> allocations;
  const auto upload = [&allocations](const std::vector<uint8_t>& bytes) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, bytes.size()), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, bytes.data(), bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
    allocations.push_back(p);
    return static_cast<uint8_t*>(p);
  };
  // Operand bytes: bf16 values in [-1, 1), or finite FP8 codes (below
  // 0x7c in magnitude: e5m2 has inf and NaN above, e4m3 NaN at 0x7f).
  const auto operand = [](DType dtype, int64_t elements, uint32_t seed) {
    const std::vector<float> v = RandomFloats(elements, seed);
    if (dtype == DType::kBFloat16) {
      const std::vector<uint16_t> bf = ToBf16(v);
      return std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(bf.data()),
                                  reinterpret_cast<const uint8_t*>(bf.data() + bf.size()));
    }
    std::vector<uint8_t> codes(elements);
    for (int64_t i = 0; i < elements; ++i) {
      codes[i] = static_cast<uint8_t>(static_cast<uint32_t>(std::fabs(v[i]) * 1e6f) % 0x7c);
      if (v[i] < 0) codes[i] |= 0x80;
    }
    return codes;
  };
  std::vector<uint8_t> scale_bytes(16, 0);
  const float quarter = 0.25f;
  std::memcpy(scale_bytes.data(), &quarter, sizeof(quarter));
  float* scale_inv = reinterpret_cast<float*>(upload(scale_bytes));
  uint32_t seed = 100;
  for (const StepGemm& g : StepGemms()) {
    const Shape a_shape = g.trans_a ? Shape{g.k, g.m} : Shape{g.m, g.k};
    const Shape b_shape = g.trans_b ? Shape{g.n, g.k} : Shape{g.k, g.n};
    std::vector<uint8_t> a_bytes(g.offset_bytes, 0), b_bytes(g.offset_bytes, 0);
    const std::vector<uint8_t> a_values = operand(g.a, a_shape.NumElements(), ++seed);
    const std::vector<uint8_t> b_values = operand(g.b, b_shape.NumElements(), ++seed);
    a_bytes.insert(a_bytes.end(), a_values.begin(), a_values.end());
    b_bytes.insert(b_bytes.end(), b_values.begin(), b_values.end());
    const std::vector<float> d_start = RandomFloats(g.m * g.n, ++seed);
    std::vector<uint8_t> d_bytes(g.m * g.n * DTypeSize(g.d));
    if (g.d == DType::kFloat32) std::memcpy(d_bytes.data(), d_start.data(), d_bytes.size());
    TensorDesc a = MakeTensor(upload(a_bytes) + g.offset_bytes, g.a, a_shape);
    TensorDesc b = MakeTensor(upload(b_bytes) + g.offset_bytes, g.b, b_shape);
    const TensorDesc d = MakeTensor(upload(d_bytes), g.d, Shape{g.m, g.n});
    a.scale_inv = b.scale_inv = scale_inv;
    for (int run = 0; run < 2; ++run) {
      const absl::Status s = runner.Run(a, g.trans_a, b, g.trans_b, d, g.accumulate, nullptr);
      EXPECT_TRUE(s.ok()) << s;
    }
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    result.outputs.emplace_back(d_bytes.size());
    EXPECT_EQ(cudaMemcpy(result.outputs.back().data(), d.data, d_bytes.size(),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
  }
  result.algorithms = runner.ChosenAlgorithms();
  for (void* p : allocations) cudaFree(p);
  return result;
}

// Deterministic selection: a second fresh runner (a second run of a job, or
// its resume) picks the same algorithm for every shape and writes the same
// bits. Timed selection still computes the same products (within the
// tolerances above), whichever algorithms it keeps.
TEST(GemmDeterminismTest, FreshRunnersChooseTheSameAlgorithmsAndBits) {
  const StepGemmResult first = RunStepGemms(cuda::GemmAlgoSelection::kDeterministic);
  const StepGemmResult second = RunStepGemms(cuda::GemmAlgoSelection::kDeterministic);
  ASSERT_EQ(first.outputs.size(), StepGemms().size());
  ASSERT_EQ(second.outputs.size(), first.outputs.size());
  EXPECT_EQ(first.algorithms.size(), StepGemms().size()) << "one plan per shape";
  EXPECT_EQ(first.algorithms, second.algorithms);
  for (const std::string& line : first.algorithms) printf("%s\n", line.c_str());
  for (size_t i = 0; i < first.outputs.size(); ++i) {
    EXPECT_EQ(first.outputs[i], second.outputs[i]) << "GEMM " << i << " differs between runs";
  }
  const StepGemmResult timed = RunStepGemms(cuda::GemmAlgoSelection::kTimed);
  ASSERT_EQ(timed.outputs.size(), first.outputs.size());
  const std::vector<StepGemm> gemms = StepGemms();
  for (size_t i = 0; i < gemms.size(); ++i) {
    HostTensor want = HostTensor::Of(gemms[i].d, Shape{gemms[i].m, gemms[i].n});
    HostTensor got = want;
    want.bytes = first.outputs[i];
    got.bytes = timed.outputs[i];
    EXPECT_LT(Error(got, want), 1e-2) << "GEMM " << i << ": timed and deterministic disagree";
  }
}

}  // namespace
}  // namespace testing
}  // namespace tessera
