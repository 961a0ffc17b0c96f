// cuDNN's fused attention (CudaEngineOptions::attention kCudnn, both
// backward forms, cudnn_attention.h) against the CPU reference on
// fresh random inputs, outputs poisoned before the run (needs a GPU, tag
// "gpu"). Tolerances (relative L2), as for our kernels (attention_test.cc):
//  * lse 1e-4: fp32 softmax statistics, another summation order.
//  * out 1e-2: bf16 result; P enters the P V product rounded to bf16.
//  * grad_qkv 2e-2: bf16 result; P and dS enter the products as bf16.
// Shapes: head dims 64 and 128, grouped-query groups of 1, 2 and 4,
// sequence lengths that are and are not multiples of 64, and the shapes
// the benchmarks time. Also: the deterministic backward repeats its bits,
// cuDNN's and our kernels agree with each other as closely as each agrees
// with the reference, and document-masked calls still run our kernels.
#include <cuda_runtime.h>

#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "worker/engine/cpu/bf16.h"

#include "common/cudnn_attention_workspace.h"
#include "gtest/gtest.h"
#include "worker/engine/cuda/cudnn_attention.h"
#include "worker/engine/cuda/attention_test_inputs.h"
#include "worker/engine/cuda/engine_harness_for_test.h"

namespace tessera {
namespace testing {
namespace {

using Param = std::tuple<int, int, int, int, int>;  // B, S, nh, nkv, hd

// One engine with cuDNN attention per backward form, created once per
// binary.
Ops* CudnnOps(bool deterministic) {
  static Ops* engines[2] = {nullptr, nullptr};
  const int i = deterministic ? 1 : 0;
  if (engines[i] == nullptr) {
    CudaEngineOptions options;
    options.attention = CudaEngineOptions::Attention::kCudnn;
    options.attention_atomic_backward = !deterministic;
    auto created = CreateCudaOps(0, options);
    if (!created.ok()) {
      ADD_FAILURE() << "CreateCudaOps with cuDNN attention: " << created.status();
      return nullptr;
    }
    engines[i] = created->release();
  }
  return engines[i];
}

class CudnnAttentionTest : public CpuVsCudaTest,
                           public ::testing::WithParamInterface<std::tuple<Param, bool>> {};

TEST_P(CudnnAttentionTest, ForwardAndBackwardMatchCpu) {
  const auto [shape, deterministic] = GetParam();
  const auto [b, s, nh, nkv, hd] = shape;
  Ops* cudnn = CudnnOps(deterministic);
  ASSERT_NE(cudnn, nullptr);
  const uint32_t seed = static_cast<uint32_t>(s * 131 + nh * 7 + nkv + hd);
  const std::vector<HostTensor> t = AttentionTensors(b, s, nh, nkv, hd, seed);
  auto c = RunOn(cpu(), t, ForwardBackward(nkv));
  auto g = RunOn(*cudnn, t, ForwardBackward(nkv));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_LT(Error((*g)[1], (*c)[1]), 1e-2) << "out";
  EXPECT_LT(Error((*g)[2], (*c)[2]), 1e-4) << "lse";
  EXPECT_LT(Error((*g)[4], (*c)[4]), 2e-2) << "grad_qkv";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudnnAttentionTest,
    ::testing::Combine(::testing::Values(Param{2, 256, 4, 4, 64}, Param{1, 200, 8, 2, 128},
                                         Param{2, 1000, 4, 4, 128}, Param{1, 333, 8, 8, 128},
                                         Param{1, 2048, 8, 2, 128}, Param{2, 512, 8, 4, 64},
                                         Param{1, 4096, 4, 1, 128}),
                       ::testing::Bool()));

TEST_F(CpuVsCudaTest, CudnnDeterministicBackwardIsBitIdenticalRunToRun) {
  Ops* cudnn = CudnnOps(/*deterministic=*/true);
  ASSERT_NE(cudnn, nullptr);
  const std::vector<HostTensor> t = AttentionTensors(2, 700, 8, 2, 128, 99);
  auto first = RunOn(*cudnn, t, ForwardBackward(2));
  auto second = RunOn(*cudnn, t, ForwardBackward(2));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(BitDifferences((*first)[1], (*second)[1]), 0) << "out";
  EXPECT_EQ(BitDifferences((*first)[2], (*second)[2]), 0) << "lse";
  EXPECT_EQ(BitDifferences((*first)[4], (*second)[4]), 0) << "grad_qkv";
}

TEST_F(CpuVsCudaTest, CudnnAndTesseraKernelsAgree) {
  Ops* cudnn = CudnnOps(/*deterministic=*/true);
  ASSERT_NE(cudnn, nullptr);
  const std::vector<HostTensor> t = AttentionTensors(1, 1024, 8, 2, 128, 7);
  auto ours = RunOn(gpu(), t, ForwardBackward(2));
  auto theirs = RunOn(*cudnn, t, ForwardBackward(2));
  ASSERT_TRUE(ours.ok()) << ours.status();
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  EXPECT_LT(Error((*theirs)[1], (*ours)[1]), 1e-2) << "out";
  EXPECT_LT(Error((*theirs)[2], (*ours)[2]), 1e-4) << "lse";
  EXPECT_LT(Error((*theirs)[4], (*ours)[4]), 2e-2) << "grad_qkv";
}

// Document starts are not something the cuDNN graphs take: such calls run
// Tessera's kernels, bit for bit what the default engine gives.
TEST_F(CpuVsCudaTest, DocumentMaskedCallsRunTesseraKernels) {
  Ops* cudnn = CudnnOps(/*deterministic=*/true);
  ASSERT_NE(cudnn, nullptr);
  const int b = 1, s = 300, nh = 4, nkv = 2, hd = 128;
  std::vector<HostTensor> t = AttentionTensors(b, s, nh, nkv, hd, 5);
  std::vector<int32_t> starts(s);
  for (int i = 0; i < s; ++i) starts[i] = i < 120 ? 0 : 120;
  t.push_back(HostTensor::FromVector(DType::kInt32, Shape{b, s}, starts));
  const Body body = [nkv](Ops& ops, std::vector<TensorDesc>& d) {
    absl::Status st = ops.AttentionForward(d[0], nkv, d[5], d[1], d[2], nullptr);
    if (st.ok()) st = ops.AttentionBackward(d[3], d[0], nkv, d[5], d[1], d[2], d[4], nullptr);
    return st;
  };
  auto ours = RunOn(gpu(), t, body);
  auto other = RunOn(*cudnn, t, body);
  ASSERT_TRUE(ours.ok()) << ours.status();
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(BitDifferences((*other)[1], (*ours)[1]), 0) << "out";
  EXPECT_EQ(BitDifferences((*other)[4], (*ours)[4]), 0) << "grad_qkv";
}

// The memory estimate's bound (common/cudnn_attention_workspace.h) against
// what cuDNN asks for, at the shapes the benchmarks time and the models
// train (cudnn_attention_workspace_test keeps the figures seen here).
TEST(CudnnAttentionWorkspace, StaysWithinTheMemoryEstimatesBound) {
  auto cudnn = cuda::CudnnAttention::Create();
  ASSERT_TRUE(cudnn.ok()) << cudnn.status();
  printf("cuDNN %lld\n", static_cast<long long>(cuda::CudnnAttention::Version()));
  const cuda::AttentionShape shapes[] = {
      {8, 2048, 16, 16, 64}, {4, 4096, 16, 16, 128}, {1, 8192, 32, 8, 128}, {1, 8192, 16, 4, 128},
      {1, 16384, 32, 8, 128}, {2, 1000, 4, 4, 128}};
  for (const cuda::AttentionShape& s : shapes) {
    auto forward = (*cudnn)->ForwardWorkspaceBytes(s);
    ASSERT_TRUE(forward.ok()) << forward.status();
    for (const bool deterministic : {true, false}) {
      auto backward = (*cudnn)->BackwardWorkspaceBytes(s, deterministic);
      ASSERT_TRUE(backward.ok()) << backward.status();
      const int64_t bound = CudnnAttentionWorkspaceBound(
          {s.batch, s.heads, s.kv_heads, s.seq, s.head_dim}, deterministic);
      printf("B %lld S %lld H %d KV %d hd %d: forward %zu bytes, %s backward %zu bytes, bound %lld\n",
             static_cast<long long>(s.batch), static_cast<long long>(s.seq), s.heads, s.kv_heads,
             s.head_dim, *forward, deterministic ? "deterministic" : "atomic", *backward,
             static_cast<long long>(bound));
      EXPECT_LE(static_cast<int64_t>(*forward), bound);
      EXPECT_LE(static_cast<int64_t>(*backward), bound);
    }
  }
}

// One device buffer for the plan tests, freed at scope end.
struct DeviceBuffer {
  void* p = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n) : bytes(n) { EXPECT_EQ(cudaMalloc(&p, n), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(p); }
  std::vector<uint8_t> Download() const {
    std::vector<uint8_t> host(bytes);
    EXPECT_EQ(cudaMemcpy(host.data(), p, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }
};

// The tuning API (bench/cudnn_attention_plans): the first candidate listed
// is the plan the engine runs by default, pinning it gives the default's
// bits, and a bad index or kind is refused without touching the cached plan.
TEST(CudnnAttentionPlans, TheFirstCandidateIsTheDefaultPlan) {
  auto cudnn = cuda::CudnnAttention::Create();
  ASSERT_TRUE(cudnn.ok()) << cudnn.status();
  cuda::CudnnAttention& a = **cudnn;
  const cuda::AttentionShape shape{1, 512, 8, 2, 128};
  const int64_t tokens = shape.batch * shape.seq;
  const size_t qkv_bytes = tokens * (shape.heads + 2 * shape.kv_heads) * shape.head_dim * 2;
  const size_t out_bytes = tokens * shape.heads * shape.head_dim * 2;
  DeviceBuffer qkv(qkv_bytes), out(out_bytes), lse(tokens * shape.heads * 4),
      grad_out(out_bytes), grad_qkv(qkv_bytes);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (DeviceBuffer* d : {&qkv, &grad_out}) {
    std::vector<uint16_t> host(d->bytes / 2);
    for (uint16_t& x : host) x = cpu::FloatToBf16(normal(rng));
    ASSERT_EQ(cudaMemcpy(d->p, host.data(), d->bytes, cudaMemcpyHostToDevice), cudaSuccess);
  }
  for (const int kind : {cuda::CudnnAttention::kForward,
                         cuda::CudnnAttention::kBackwardDeterministic}) {
    SCOPED_TRACE(kind);
    const bool forward = kind == cuda::CudnnAttention::kForward;
    const auto run = [&]() -> std::vector<uint8_t> {
      auto bytes = forward ? a.ForwardWorkspaceBytes(shape) : a.BackwardWorkspaceBytes(shape, true);
      EXPECT_TRUE(bytes.ok()) << bytes.status();
      DeviceBuffer workspace(bytes.ok() ? *bytes : 256);
      const absl::Status s =
          forward ? a.Forward(shape, qkv.p, out.p, static_cast<float*>(lse.p), workspace.p, nullptr)
                  : a.Backward(shape, true, grad_out.p, qkv.p, out.p,
                               static_cast<const float*>(lse.p), grad_qkv.p, workspace.p, nullptr);
      EXPECT_TRUE(s.ok()) << s;
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      return forward ? out.Download() : grad_qkv.Download();
    };
    const std::vector<uint8_t> by_default = run();
    auto described = a.PlanDescription(shape, kind);
    ASSERT_TRUE(described.ok()) << described.status();
    auto listed = a.ListPlanCandidates(shape, kind);
    ASSERT_TRUE(listed.ok()) << listed.status();
    ASSERT_FALSE(listed->empty());
    EXPECT_TRUE(absl::StartsWith((*listed)[0], *described)) << (*listed)[0] << " / " << *described;

    auto pinned = a.UsePlanCandidate(shape, kind, 0);
    ASSERT_TRUE(pinned.ok()) << pinned.status();
    EXPECT_EQ(run(), by_default);

    auto beyond = a.UsePlanCandidate(shape, kind, static_cast<int>(listed->size()) + 1000);
    EXPECT_EQ(beyond.status().code(), absl::StatusCode::kOutOfRange) << beyond.status();
    auto still = a.PlanDescription(shape, kind);
    ASSERT_TRUE(still.ok()) << still.status();
    EXPECT_EQ(*still, *pinned);
    EXPECT_EQ(run(), by_default);
  }
  EXPECT_EQ(a.ListPlanCandidates(shape, 7).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a.UsePlanCandidate(shape, 0, -1).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace testing
}  // namespace tessera
