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
// with the reference, the deterministic backward in key bands matches
// the reference, repeats its bits and refuses counts that do not split the
// sequence, and document-masked calls run cuDNN's ragged batches
// where the host counted the documents (the same tolerances against the
// CPU reference, random documents of any length, bits repeated), and our
// kernels where it did not, or where the ragged plan would need more
// workspace than whole sequences.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <map>
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

// One engine with cuDNN attention per backward form and key-band count
// (CudaEngineOptions::attention_key_bands; 0: the engine's rule), created
// once per binary.
Ops* CudnnOps(bool deterministic, int key_bands = 0) {
  static std::map<std::pair<bool, int>, Ops*> engines;
  Ops*& engine = engines[{deterministic, key_bands}];
  if (engine == nullptr) {
    CudaEngineOptions options;
    options.attention = CudaEngineOptions::Attention::kCudnn;
    options.attention_atomic_backward = !deterministic;
    options.attention_key_bands = key_bands;
    auto created = CreateCudaOps(0, options);
    if (!created.ok()) {
      ADD_FAILURE() << "CreateCudaOps with cuDNN attention, " << key_bands
                    << " key bands: " << created.status();
      return nullptr;
    }
    engine = created->release();
  }
  return engine;
}

// Forward then backward of fresh random inputs on `engine` against the CPU
// reference: out, lse and grad_qkv at the tolerances above.
void ExpectMatchesCpu(Ops* engine, Ops& cpu, const Param& shape, uint32_t seed) {
  ASSERT_NE(engine, nullptr);
  const auto [b, s, nh, nkv, hd] = shape;
  const std::vector<HostTensor> t = AttentionTensors(b, s, nh, nkv, hd, seed);
  auto c = RunOn(cpu, t, ForwardBackward(nkv));
  auto g = RunOn(*engine, t, ForwardBackward(nkv));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_LT(Error((*g)[1], (*c)[1]), 1e-2) << "out";
  EXPECT_LT(Error((*g)[2], (*c)[2]), 1e-4) << "lse";
  EXPECT_LT(Error((*g)[4], (*c)[4]), 2e-2) << "grad_qkv";
}

class CudnnAttentionTest : public CpuVsCudaTest,
                           public ::testing::WithParamInterface<std::tuple<Param, bool>> {};

TEST_P(CudnnAttentionTest, ForwardAndBackwardMatchCpu) {
  const auto [shape, deterministic] = GetParam();
  const auto [b, s, nh, nkv, hd] = shape;
  ExpectMatchesCpu(CudnnOps(deterministic), cpu(), shape,
                   static_cast<uint32_t>(s * 131 + nh * 7 + nkv + hd));
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

// Random documents for each of `b` sequences of `s` tokens: about
// `per_sequence` documents of random lengths (any length from 1 token),
// some sequences left whole. Appended to `t` as doc_starts [b, s]; returns
// the host's count of them.
DocumentCounts AddRandomDocuments(std::vector<HostTensor>& t, int b, int s, int per_sequence,
                                  uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> starts(static_cast<size_t>(b) * s);
  for (int row = 0; row < b; ++row) {
    const bool whole = row % 3 == 2;
    int32_t start = 0;
    for (int i = 0; i < s; ++i) {
      if (i > 0 && !whole && rng() % static_cast<uint32_t>(s) < static_cast<uint32_t>(per_sequence)) {
        start = i;
      }
      starts[static_cast<size_t>(row) * s + i] = start;
    }
  }
  t.push_back(HostTensor::FromVector(DType::kInt32, Shape{b, s}, starts));
  return CountDocuments(starts, s);
}

// `n` documents of s / n tokens in each of `b` sequences, appended to `t`
// as doc_starts [b, s]; returns the host's count of them.
DocumentCounts AddEqualDocuments(std::vector<HostTensor>& t, int b, int s, int n) {
  std::vector<int32_t> starts(static_cast<size_t>(b) * s);
  for (int i = 0; i < b * s; ++i) starts[i] = (i % s) / (s / n) * (s / n);
  t.push_back(HostTensor::FromVector(DType::kInt32, Shape{b, s}, starts));
  return CountDocuments(starts, s);
}

// Forward then backward over AttentionTensors + doc_starts (d[5]), with
// the host's count of the documents.
Body CountedDocumentsForwardBackward(int nkv, DocumentCounts counts) {
  return [nkv, counts](Ops& ops, std::vector<TensorDesc>& d) {
    const AttentionDocuments documents(d[5], counts);
    absl::Status st = ops.AttentionForward(d[0], nkv, documents, d[1], d[2], nullptr);
    if (st.ok()) st = ops.AttentionBackward(d[3], d[0], nkv, documents, d[1], d[2], d[4], nullptr);
    return st;
  };
}

// One device buffer, freed at scope end.
struct DeviceBuffer {
  void* p = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n) : bytes(n) { EXPECT_EQ(cudaMalloc(&p, n), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(p); }
  void Upload(const HostTensor& t) {
    ASSERT_EQ(t.bytes.size(), bytes);
    ASSERT_EQ(cudaMemcpy(p, t.bytes.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<uint8_t> Download() const {
    std::vector<uint8_t> host(bytes);
    EXPECT_EQ(cudaMemcpy(host.data(), p, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }
  HostTensor As(DType dtype, Shape shape) const {
    HostTensor t = HostTensor::Of(dtype, shape);
    t.bytes = Download();
    return t;
  }
};

// The deterministic backward in key bands (cudnn_attention.h), the count
// fixed through the engine's options, against the CPU reference at the
// whole call's tolerances: every band's dK and dV, and dQ summed over the
// bands whose keys each query sees.
class CudnnKeyBandsTest : public CpuVsCudaTest,
                          public ::testing::WithParamInterface<std::tuple<Param, int>> {};

TEST_P(CudnnKeyBandsTest, BackwardMatchesCpu) {
  const auto [shape, bands] = GetParam();
  const auto [b, s, nh, nkv, hd] = shape;
  ExpectMatchesCpu(CudnnOps(/*deterministic=*/true, bands), cpu(), shape,
                   static_cast<uint32_t>(s * 29 + nh * 3 + nkv + hd + bands));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudnnKeyBandsTest,
    ::testing::Values(std::make_tuple(Param{1, 1024, 8, 2, 128}, 2),
                      std::make_tuple(Param{1, 1024, 8, 2, 128}, 4),
                      std::make_tuple(Param{1, 1024, 8, 2, 128}, 8),
                      std::make_tuple(Param{2, 512, 4, 4, 64}, 2),
                      std::make_tuple(Param{2, 512, 4, 4, 64}, 8),
                      std::make_tuple(Param{1, 2048, 16, 4, 128}, 4),
                      std::make_tuple(Param{1, 4096, 4, 1, 128}, 8)));

// In bands the backward still repeats its bits; the forward is the one
// call's, bit for bit; grad_qkv differs from the one call's by the
// rounding of the bands' partial sums only.
TEST_F(CpuVsCudaTest, CudnnKeyBandsRepeatTheirBitsAndAgreeWithOneCall) {
  Ops* four = CudnnOps(/*deterministic=*/true, 4);
  Ops* one = CudnnOps(/*deterministic=*/true, 1);
  ASSERT_NE(four, nullptr);
  ASSERT_NE(one, nullptr);
  const std::vector<HostTensor> t = AttentionTensors(2, 1024, 8, 2, 128, 5);
  auto first = RunOn(*four, t, ForwardBackward(2));
  auto second = RunOn(*four, t, ForwardBackward(2));
  auto whole = RunOn(*one, t, ForwardBackward(2));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_TRUE(whole.ok()) << whole.status();
  for (int i : {1, 2, 4}) EXPECT_EQ(BitDifferences((*first)[i], (*second)[i]), 0) << i;
  EXPECT_EQ(BitDifferences((*first)[1], (*whole)[1]), 0) << "out";
  EXPECT_EQ(BitDifferences((*first)[2], (*whole)[2]), 0) << "lse";
  EXPECT_LT(Error((*first)[4], (*whole)[4]), 1e-2) << "grad_qkv";
}

// A band count that does not split the sequence into whole multiples of
// 64 queries is refused by name, not run.
TEST_F(CpuVsCudaTest, CudnnKeyBandsThatDoNotSplitTheSequenceAreRefused) {
  Ops* three = CudnnOps(/*deterministic=*/true, 3);
  ASSERT_NE(three, nullptr);
  const std::vector<HostTensor> t = AttentionTensors(1, 1024, 4, 4, 64, 3);
  auto g = RunOn(*three, t, ForwardBackward(4));
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << g.status();
  EXPECT_TRUE(absl::StrContains(g.status().message(), "key bands")) << g.status();
}

// The bands' partial dQ summed by key_band_sums.cu: each query row's dQ
// the fp32 sum, in band order, of the bands whose keys it sees, rounded
// once; the key and value columns untouched.
TEST(CudnnKeyBandSums, AddTheBandsEachQuerySeesInBandOrder) {
  const cuda::AttentionShape shape{2, 256, 4, 2, 64};
  const int bands = 4;
  const int64_t band = shape.seq / bands, width = shape.heads * shape.head_dim;
  const int64_t row_width = (shape.heads + 2 * shape.kv_heads) * shape.head_dim;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<uint8_t> partials(
      static_cast<size_t>(cuda::KeyBandPartialOffset(shape, bands, bands)), 0);
  std::vector<uint16_t> grad(static_cast<size_t>(shape.batch * shape.seq * row_width));
  for (uint16_t& x : grad) x = cpu::FloatToBf16(normal(rng));
  std::vector<uint16_t> expected = grad;
  std::vector<float> sums(static_cast<size_t>(shape.batch * shape.seq * width), 0.f);
  for (int c = 0; c < bands; ++c) {
    const int64_t rows = shape.seq - c * band;
    auto* part = reinterpret_cast<uint16_t*>(partials.data() +
                                             cuda::KeyBandPartialOffset(shape, bands, c));
    for (int64_t b = 0; b < shape.batch; ++b) {
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < width; ++j) {
          const uint16_t x = cpu::FloatToBf16(normal(rng));
          part[(b * rows + i) * width + j] = x;
          sums[(b * shape.seq + c * band + i) * width + j] += cpu::Bf16ToFloat(x);
        }
      }
    }
  }
  for (int64_t token = 0; token < shape.batch * shape.seq; ++token) {
    for (int64_t j = 0; j < width; ++j) {
      expected[token * row_width + j] = cpu::FloatToBf16(sums[token * width + j]);
    }
  }
  DeviceBuffer d_partials(partials.size()), d_grad(grad.size() * 2);
  ASSERT_EQ(cudaMemcpy(d_partials.p, partials.data(), partials.size(), cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_grad.p, grad.data(), grad.size() * 2, cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_TRUE(cuda::LaunchSumKeyBands(shape, bands, d_partials.p, d_grad.p, nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint16_t> got(grad.size());
  ASSERT_EQ(cudaMemcpy(got.data(), d_grad.p, grad.size() * 2, cudaMemcpyDeviceToHost),
            cudaSuccess);
  int64_t differing = 0;
  for (size_t i = 0; i < got.size(); ++i) differing += got[i] != expected[i] ? 1 : 0;
  EXPECT_EQ(differing, 0);
}

// Random documents of any length (one-token ones, documents cut by the
// sequence's end, sequences left whole) through cuDNN's ragged plans
// themselves, whatever the engine's rule for choosing them would say:
// out, lse and grad_qkv against the CPU reference, outputs poisoned first.
class CudnnRaggedPlanTest : public CpuVsCudaTest,
                            public ::testing::WithParamInterface<std::tuple<Param, bool>> {};

TEST_P(CudnnRaggedPlanTest, RandomDocumentsMatchCpu) {
  const auto [shape_param, deterministic] = GetParam();
  const auto [b, s, nh, nkv, hd] = shape_param;
  const uint32_t seed = static_cast<uint32_t>(s * 17 + nh * 5 + nkv + hd + b);
  std::vector<HostTensor> t = AttentionTensors(b, s, nh, nkv, hd, seed);
  const DocumentCounts counts = AddRandomDocuments(t, b, s, 6, seed + 9);
  SCOPED_TRACE(::testing::Message() << counts.count << " documents, longest " << counts.longest);
  auto c = RunOn(cpu(), t, CountedDocumentsForwardBackward(nkv, counts));
  ASSERT_TRUE(c.ok()) << c.status();

  auto cudnn = cuda::CudnnAttention::Create();
  ASSERT_TRUE(cudnn.ok()) << cudnn.status();
  const cuda::AttentionShape shape{b, s, nh, nkv, hd};
  DeviceBuffer qkv(t[0].bytes.size()), out(t[1].bytes.size()), lse(t[2].bytes.size()),
      grad_out(t[3].bytes.size()), grad_qkv(t[4].bytes.size()), starts(t[5].bytes.size());
  qkv.Upload(t[0]);
  grad_out.Upload(t[3]);
  starts.Upload(t[5]);
  // All documents in one call (GroupDocuments with no limit), then one call
  // per length class (each call writes only its own documents' rows).
  for (const bool split : {false, true}) {
    SCOPED_TRACE(split ? "one call per length class" : "one call");
    std::vector<cuda::CudnnAttention::DocumentGroup> groups;
    if (!split) {
      const cuda::CudnnAttention::DocumentGroups one = cuda::CudnnAttention::GroupDocuments(
          counts, [](const cuda::CudnnAttention::PlannedDocuments&) { return true; });
      ASSERT_EQ(one.count, 1);
      groups.push_back(one.group[0]);
    } else {
      for (int c = 0; c < kDocumentLengthClasses; ++c) {
        if (counts.per_length_class[c] == 0) continue;
        cuda::CudnnAttention::DocumentGroup g;
        g.plan = {counts.per_length_class[c], std::max<int64_t>(64, int64_t{1} << c)};
        g.above = c == 0 ? 0 : int64_t{1} << (c - 1);
        g.up_to = int64_t{1} << c;
        groups.push_back(g);
      }
      EXPECT_GT(groups.size(), 1u);
    }
    out.Upload(t[1]);  // poisoned
    lse.Upload(t[2]);
    grad_qkv.Upload(t[4]);
    for (const cuda::CudnnAttention::DocumentGroup& group : groups) {
      const cuda::CudnnAttention::Documents docs{static_cast<const int32_t*>(starts.p), group};
      auto forward_bytes = (*cudnn)->ForwardWorkspaceBytes(shape, &docs);
      ASSERT_TRUE(forward_bytes.ok()) << forward_bytes.status();
      DeviceBuffer workspace(*forward_bytes);
      ASSERT_TRUE((*cudnn)->Forward(shape, qkv.p, out.p, static_cast<float*>(lse.p),
                                    workspace.p, nullptr, &docs)
                      .ok());
    }
    for (const cuda::CudnnAttention::DocumentGroup& group : groups) {
      const cuda::CudnnAttention::Documents docs{static_cast<const int32_t*>(starts.p), group};
      auto backward_bytes = (*cudnn)->BackwardWorkspaceBytes(shape, deterministic, &docs);
      ASSERT_TRUE(backward_bytes.ok()) << backward_bytes.status();
      DeviceBuffer workspace(*backward_bytes);
      ASSERT_TRUE((*cudnn)->Backward(shape, deterministic, grad_out.p, qkv.p, out.p,
                                     static_cast<const float*>(lse.p), grad_qkv.p, workspace.p,
                                     nullptr, &docs)
                      .ok());
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_LT(Error(out.As(t[1].dtype, t[1].shape), (*c)[1]), 1e-2) << "out";
    EXPECT_LT(Error(lse.As(t[2].dtype, t[2].shape), (*c)[2]), 1e-4) << "lse";
    EXPECT_LT(Error(grad_qkv.As(t[4].dtype, t[4].shape), (*c)[4]), 2e-2) << "grad_qkv";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudnnRaggedPlanTest,
    ::testing::Combine(::testing::Values(Param{3, 256, 4, 4, 64}, Param{2, 1000, 8, 2, 128},
                                         Param{1, 2048, 8, 4, 128}, Param{4, 512, 8, 8, 64}),
                       ::testing::Bool()));

// Through the engine: 2 x 8 documents of 512 tokens with head dim 128 run
// as cuDNN's ragged batch (the engine's rule picks it: documents of 512
// tokens on average, a plan within the whole sequences' workspace), both
// backward forms, against the CPU reference; their bits differ from our
// kernels'.
TEST_F(CpuVsCudaTest, CudnnRunsCountedDocumentsThroughTheEngine) {
  const int b = 2, s = 4096, n = 8, nh = 8, nkv = 2, hd = 128;
  std::vector<HostTensor> t = AttentionTensors(b, s, nh, nkv, hd, 23);
  const DocumentCounts counts = AddEqualDocuments(t, b, s, n);
  const Body body = CountedDocumentsForwardBackward(nkv, counts);
  auto c = RunOn(cpu(), t, body);
  auto ours = RunOn(gpu(), t, body);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(ours.ok()) << ours.status();
  for (const bool deterministic : {true, false}) {
    SCOPED_TRACE(deterministic);
    Ops* cudnn = CudnnOps(deterministic);
    ASSERT_NE(cudnn, nullptr);
    auto g = RunOn(*cudnn, t, body);
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_LT(Error((*g)[1], (*c)[1]), 1e-2) << "out";
    EXPECT_LT(Error((*g)[2], (*c)[2]), 1e-4) << "lse";
    EXPECT_LT(Error((*g)[4], (*c)[4]), 2e-2) << "grad_qkv";
    EXPECT_GT(BitDifferences((*g)[4], (*ours)[4]), 0) << "ran our kernels";
  }
}

TEST_F(CpuVsCudaTest, CudnnDocumentsRepeatTheirBitsAndEqualDocumentsAsSequences) {
  Ops* cudnn = CudnnOps(/*deterministic=*/true);
  ASSERT_NE(cudnn, nullptr);
  // 2 sequences of 4 documents of 1024 tokens, against the same 8
  // documents as whole sequences of 1024 (the same memory, shape [8, 1024]).
  const int b = 2, s = 4096, n = 4, nh = 8, nkv = 2, hd = 128;
  std::vector<HostTensor> t = AttentionTensors(b, s, nh, nkv, hd, 41);
  const DocumentCounts counts = AddEqualDocuments(t, b, s, n);
  ASSERT_EQ(counts.count, b * n);
  ASSERT_EQ(counts.longest, s / n);
  const Body body = CountedDocumentsForwardBackward(nkv, counts);
  auto first = RunOn(*cudnn, t, body);
  auto second = RunOn(*cudnn, t, body);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(BitDifferences((*first)[1], (*second)[1]), 0) << "out";
  EXPECT_EQ(BitDifferences((*first)[2], (*second)[2]), 0) << "lse";
  EXPECT_EQ(BitDifferences((*first)[4], (*second)[4]), 0) << "grad_qkv";

  std::vector<HostTensor> apart = AttentionTensors(b * n, s / n, nh, nkv, hd, 41);
  apart[0] = t[0];
  apart[0].shape = Shape{b * n, s / n, nh + 2 * nkv, hd};
  apart[3] = t[3];
  apart[3].shape = Shape{b * n, s / n, nh, hd};
  auto separate = RunOn(*cudnn, apart, ForwardBackward(nkv));
  ASSERT_TRUE(separate.ok()) << separate.status();
  EXPECT_LT(Error((*first)[1], (*separate)[1]), 1e-2) << "out";
  EXPECT_LT(Error((*first)[4], (*separate)[4]), 2e-2) << "grad_qkv";
}

// Calls the engine's rule sends to Tessera's kernels run them bit for bit
// as the default engine does: document starts without the host's count;
// counted documents shorter than the rule takes to cuDNN (120 and 180
// tokens); and one document of 512 tokens beside 512 of one token (2
// tokens a document on average).
TEST_F(CpuVsCudaTest, DocumentMaskedCallsRunTesseraKernels) {
  Ops* cudnn = CudnnOps(/*deterministic=*/true);
  ASSERT_NE(cudnn, nullptr);
  const int b = 1, nh = 4, nkv = 2, hd = 128;
  for (const int s : {300, 1024}) {
    SCOPED_TRACE(s);
    std::vector<HostTensor> t = AttentionTensors(b, s, nh, nkv, hd, 5);
    std::vector<int32_t> starts(s);
    for (int i = 0; i < s; ++i) starts[i] = s == 300 ? (i < 120 ? 0 : 120) : (i < 512 ? 0 : i);
    t.push_back(HostTensor::FromVector(DType::kInt32, Shape{b, s}, starts));
    const Body uncounted = [nkv](Ops& ops, std::vector<TensorDesc>& d) {
      absl::Status st = ops.AttentionForward(d[0], nkv, d[5], d[1], d[2], nullptr);
      if (st.ok()) st = ops.AttentionBackward(d[3], d[0], nkv, d[5], d[1], d[2], d[4], nullptr);
      return st;
    };
    auto ours = RunOn(gpu(), t, uncounted);
    ASSERT_TRUE(ours.ok()) << ours.status();
    for (const Body& call :
         {uncounted, CountedDocumentsForwardBackward(nkv, CountDocuments(starts, s))}) {
      auto other = RunOn(*cudnn, t, call);
      ASSERT_TRUE(other.ok()) << other.status();
      EXPECT_EQ(BitDifferences((*other)[1], (*ours)[1]), 0) << "out";
      EXPECT_EQ(BitDifferences((*other)[4], (*ours)[4]), 0) << "grad_qkv";
    }
  }
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
    // The deterministic backward in the engine's key bands.
    const CudnnAttentionShape whole{s.batch, s.heads, s.kv_heads, s.seq, s.head_dim};
    const int bands = CudnnKeyBands(whole);
    if (bands == 1) continue;
    auto banded = (*cudnn)->BackwardWorkspaceBytes(s, true, nullptr, bands);
    ASSERT_TRUE(banded.ok()) << banded.status();
    const int64_t bound = CudnnAttentionWorkspaceBound(whole, true, bands);
    printf("B %lld S %lld H %d KV %d hd %d: deterministic backward in %d key bands %zu bytes, "
           "bound %lld\n",
           static_cast<long long>(s.batch), static_cast<long long>(s.seq), s.heads, s.kv_heads,
           s.head_dim, bands, *banded, static_cast<long long>(bound));
    EXPECT_LE(static_cast<int64_t>(*banded), bound);
  }
  // Ragged plans for documents: capacity x longest, held to the bound of
  // `capacity` sequences of `longest` tokens.
  struct Ragged {
    cuda::AttentionShape shape;
    int64_t capacity, longest;
  };
  for (const Ragged& r : {Ragged{{1, 8192, 32, 8, 128}, 8, 1024}, Ragged{{1, 8192, 32, 8, 128}, 16, 4096},
                          Ragged{{8, 2048, 16, 16, 64}, 64, 256}, Ragged{{4, 4096, 16, 16, 128}, 32, 512}}) {
    cuda::CudnnAttention::Documents docs;
    docs.group.plan = {r.capacity, r.longest};
    docs.group.up_to = r.longest;
    auto forward = (*cudnn)->ForwardWorkspaceBytes(r.shape, &docs);
    ASSERT_TRUE(forward.ok()) << forward.status();
    for (const bool deterministic : {true, false}) {
      auto backward = (*cudnn)->BackwardWorkspaceBytes(r.shape, deterministic, &docs);
      ASSERT_TRUE(backward.ok()) << backward.status();
      const int64_t bound = CudnnAttentionWorkspaceBound(
          {r.capacity, r.shape.heads, r.shape.kv_heads, r.longest, r.shape.head_dim},
          deterministic);
      printf("documents planned %lld x %lld, H %d KV %d hd %d: forward %zu bytes, %s backward "
             "%zu bytes, bound %lld\n",
             static_cast<long long>(r.capacity), static_cast<long long>(r.longest), r.shape.heads,
             r.shape.kv_heads, r.shape.head_dim, *forward,
             deterministic ? "deterministic" : "atomic", *backward, static_cast<long long>(bound));
      EXPECT_LE(static_cast<int64_t>(*forward), bound);
      EXPECT_LE(static_cast<int64_t>(*backward), bound);
    }
  }
}

// One group's plan and length range.
void ExpectGroup(const cuda::CudnnAttention::DocumentGroup& g, int64_t capacity, int64_t longest,
                 int64_t above, int64_t up_to) {
  EXPECT_EQ(g.plan.capacity, capacity);
  EXPECT_EQ(g.plan.longest, longest);
  EXPECT_EQ(g.above, above);
  EXPECT_EQ(g.up_to, up_to);
}

// GroupDocuments: one group while one plan fits every length class; split
// into whole classes, shortest first, where it does not; none where a
// single class does not fit or more than kMaxDocumentGroups would be needed.
TEST(CudnnAttentionDocuments, GroupsWholeLengthClassesShortestFirst) {
  using CA = cuda::CudnnAttention;
  const auto any = [](const CA::PlannedDocuments&) { return true; };
  DocumentCounts counts;
  counts.per_length_class[9] = 10;   // 10 documents of 257..512 tokens
  counts.per_length_class[13] = 1;   // one of 4097..8192
  counts.count = 11;
  counts.longest = 5000;
  const CA::DocumentGroups one = CA::GroupDocuments(counts, any);
  ASSERT_EQ(one.count, 1);
  ExpectGroup(one.group[0], 16, 8192, 256, 8192);
  // A limit of 16 x 1024 tokens of plan: the long document goes alone.
  const CA::DocumentGroups two = CA::GroupDocuments(
      counts, [](const CA::PlannedDocuments& p) { return p.capacity * p.longest <= 16 * 1024; });
  ASSERT_EQ(two.count, 2);
  ExpectGroup(two.group[0], 16, 512, 256, 512);
  ExpectGroup(two.group[1], 1, 8192, 4096, 8192);
  // 24 one-token documents plan as 32 x 64.
  DocumentCounts singles;
  singles.per_length_class[0] = 24;
  singles.count = 24;
  singles.longest = 1;
  const CA::DocumentGroups tiny = CA::GroupDocuments(singles, any);
  ASSERT_EQ(tiny.count, 1);
  ExpectGroup(tiny.group[0], 32, 64, 0, 1);
  // Nothing fits: no groups. Five classes that each need their own: none.
  EXPECT_EQ(CA::GroupDocuments(counts, [](const CA::PlannedDocuments&) { return false; }).count, 0);
  DocumentCounts spread;
  for (const int c : {7, 8, 9, 10, 11}) spread.per_length_class[c] = 1;
  spread.count = 5;
  spread.longest = 2048;
  const auto alone = [](const CA::PlannedDocuments& p) { return p.capacity == 1; };
  EXPECT_EQ(CA::GroupDocuments(spread, alone).count, 0);
  spread.per_length_class[11] = 0;
  EXPECT_EQ(CA::GroupDocuments(spread, alone).count, 4);
}

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
