// Tensor-core causal attention on the GPU against the CPU reference (needs a
// GPU, tag "gpu"), on fresh random inputs, outputs poisoned before the run.
// Tolerances (relative L2):
//  * lse 1e-5: fp32 online softmax, exp2 with a folded scale, another
//    summation order.
//  * out 1e-2: bf16 result; P enters the P V product rounded to bf16, as in
//    every flash kernel (seen: a few 1e-3).
//  * grad_qkv 2e-2: bf16 result of a longer fp32 chain whose P and dS enter
//    the products as bf16.
// Shapes cover head dims 64 and 128, sequence lengths that are not multiples
// of the 64/128-row tiles (1, 7, 65, 200, 1000), grouped-query groups of 1,
// 2, 4 and 8, and an empty batch. The backward must be bit-identical when
// run twice (no atomics), and unsupported shapes are INVALID_ARGUMENT.
// Document masking is checked the same way on random documents (single
// tokens, documents ending mid-tile, documents spanning tiles), and also:
// starts that mask nothing give the whole-sequence bits, the masked
// backward repeats its bits, and starts that break the rule cannot make a
// kernel leave the sequence.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/cuda/attention_test_inputs.h"
#include "worker/engine/cuda/engine_harness_for_test.h"

namespace tessera {
namespace testing {
namespace {

using Param = std::tuple<int, int, int, int, int>;  // B, S, nh, nkv, hd

class AttentionTest : public CpuVsCudaTest, public ::testing::WithParamInterface<Param> {};

TEST_P(AttentionTest, ForwardAndBackwardMatchCpu) {
  const auto [b, s, nh, nkv, hd] = GetParam();
  const uint32_t seed = static_cast<uint32_t>(s * 131 + nh * 7 + nkv + hd);
  auto [c, g] = Both(AttentionTensors(b, s, nh, nkv, hd, seed), ForwardBackward(nkv));
  EXPECT_LT(Error(g[1], c[1]), 1e-2) << "out";
  EXPECT_LT(Error(g[2], c[2]), 1e-5) << "lse";
  EXPECT_LT(Error(g[4], c[4]), 2e-2) << "grad_qkv";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionTest,
    ::testing::Values(Param{1, 1, 1, 1, 64}, Param{2, 7, 2, 1, 64}, Param{1, 65, 4, 4, 64},
                      Param{2, 200, 4, 2, 64}, Param{1, 1000, 8, 1, 64},
                      Param{1, 1, 2, 2, 128}, Param{2, 129, 2, 2, 128}, Param{1, 200, 8, 2, 128},
                      Param{1, 1000, 4, 4, 128}, Param{1, 333, 8, 8, 128},
                      Param{1, 2048, 8, 2, 128}, Param{0, 8, 2, 1, 64}));

TEST_F(CpuVsCudaTest, AttentionBackwardIsBitIdenticalRunToRun) {
  const std::vector<HostTensor> t = AttentionTensors(2, 700, 8, 2, 128, 99);
  auto first = RunOn(gpu(), t, ForwardBackward(2));
  auto second = RunOn(gpu(), t, ForwardBackward(2));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(BitDifferences((*first)[1], (*second)[1]), 0) << "out";
  EXPECT_EQ(BitDifferences((*first)[4], (*second)[4]), 0) << "grad_qkv";
}

TEST_F(CpuVsCudaTest, AttentionRejectsUnsupportedShapes) {
  struct Case {
    int nh, nkv, hd, kv_arg;
  };
  // Head dim 96 has no kernel; nkv 3 does not divide 4 heads; nkv 0.
  for (const Case& k : {Case{2, 2, 96, 2}, Case{4, 2, 64, 3}, Case{2, 2, 64, 0}}) {
    std::vector<HostTensor> t = {RandomTensor(DType::kBFloat16, Shape{1, 4, k.nh + 2 * k.nkv, k.hd}, 1),
                                 Poisoned(DType::kBFloat16, Shape{1, 4, k.nh, k.hd}),
                                 Poisoned(DType::kFloat32, Shape{1, k.nh, 4})};
    auto g = RunOn(gpu(), t, [&](Ops& ops, std::vector<TensorDesc>& d) {
      return ops.AttentionForward(d[0], k.kv_arg, Ops::WholeSequences(), d[1], d[2], nullptr);
    });
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument)
        << "nh " << k.nh << " nkv " << k.kv_arg << " hd " << k.hd << ": " << g.status();
  }
}

// Document starts [B, S] for documents of random lengths, drawn so that
// some are a single token, some end mid-tile and some span several tiles:
// each document's length is 1 with probability 1/8, else uniform in
// [1, max_length].
HostTensor RandomDocStarts(int b, int s, int max_length, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> starts(static_cast<size_t>(b) * s);
  for (int row = 0; row < b; ++row) {
    int start = 0;
    while (start < s) {
      const int length = rng() % 8 == 0 ? 1 : 1 + static_cast<int>(rng() % max_length);
      for (int i = start; i < std::min(s, start + length); ++i) starts[row * s + i] = start;
      start += length;
    }
  }
  return HostTensor::FromVector(DType::kInt32, Shape{b, s}, starts);
}

// Tensors 0-4 as AttentionTensors, 5 the document starts.
Body DocumentForwardBackward(int nkv) {
  return [nkv](Ops& ops, std::vector<TensorDesc>& d) {
    absl::Status st = ops.AttentionForward(d[0], nkv, d[5], d[1], d[2], nullptr);
    if (st.ok()) st = ops.AttentionBackward(d[3], d[0], nkv, d[5], d[1], d[2], d[4], nullptr);
    return st;
  };
}

using DocParam = std::tuple<int, int, int, int, int, int>;  // B, S, nh, nkv, hd, longest document

class AttentionDocumentTest : public CpuVsCudaTest, public ::testing::WithParamInterface<DocParam> {};

// Document masking against the CPU engine (the specification), same
// tolerances as whole sequences: fresh random inputs and documents.
TEST_P(AttentionDocumentTest, DocumentMaskedForwardAndBackwardMatchCpu) {
  const auto [b, s, nh, nkv, hd, longest] = GetParam();
  const uint32_t seed = static_cast<uint32_t>(std::random_device()());
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::vector<HostTensor> t = AttentionTensors(b, s, nh, nkv, hd, seed);
  t.push_back(RandomDocStarts(b, s, longest, seed + 7));
  auto [c, g] = Both(t, DocumentForwardBackward(nkv));
  EXPECT_LT(Error(g[1], c[1]), 1e-2) << "out";
  EXPECT_LT(Error(g[2], c[2]), 1e-5) << "lse";
  EXPECT_LT(Error(g[4], c[4]), 2e-2) << "grad_qkv";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionDocumentTest,
    ::testing::Values(DocParam{2, 7, 2, 1, 64, 3}, DocParam{1, 200, 4, 2, 64, 40},
                      DocParam{2, 1000, 8, 1, 64, 300}, DocParam{1, 2048, 4, 4, 64, 1024},
                      DocParam{1, 129, 2, 2, 128, 64}, DocParam{2, 333, 8, 2, 128, 100},
                      DocParam{1, 2048, 8, 2, 128, 512}, DocParam{1, 1000, 4, 4, 128, 5}));

// One document per sequence, given as starts that are all 0, takes the
// whole-sequence path's bits: masking adds nothing where it masks nothing.
TEST_F(CpuVsCudaTest, OneDocumentPerSequenceGivesTheBitsOfWholeSequences) {
  std::vector<HostTensor> t = AttentionTensors(2, 700, 8, 2, 128, 41);
  t.push_back(HostTensor::Of(DType::kInt32, Shape{2, 700}));
  auto whole = RunOn(gpu(), t, ForwardBackward(2));
  auto documents = RunOn(gpu(), t, DocumentForwardBackward(2));
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_TRUE(documents.ok()) << documents.status();
  for (int i : {1, 2, 4}) EXPECT_EQ(BitDifferences((*documents)[i], (*whole)[i]), 0) << "tensor " << i;
}

TEST_F(CpuVsCudaTest, DocumentMaskedBackwardIsBitIdenticalRunToRun) {
  std::vector<HostTensor> t = AttentionTensors(2, 700, 8, 2, 128, 99);
  t.push_back(RandomDocStarts(2, 700, 150, 5));
  auto first = RunOn(gpu(), t, DocumentForwardBackward(2));
  auto second = RunOn(gpu(), t, DocumentForwardBackward(2));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(BitDifferences((*first)[1], (*second)[1]), 0) << "out";
  EXPECT_EQ(BitDifferences((*first)[4], (*second)[4]), 0) << "grad_qkv";
}

// The engine does not read document starts on the host, so starts that
// break the rule (negative, past their position, decreasing) must still
// stay inside the sequence: the kernels clamp them, every row keeps its own
// key, and every output is finite.
TEST_F(CpuVsCudaTest, DocumentStartsOfAnyContentStayInsideTheSequence) {
  std::vector<HostTensor> t = AttentionTensors(2, 300, 4, 2, 64, 13);
  std::mt19937 rng(17);
  std::vector<int32_t> junk(2 * 300);
  for (int32_t& v : junk) v = static_cast<int32_t>(rng());  // any int32, negative included
  t.push_back(HostTensor::FromVector(DType::kInt32, Shape{2, 300}, junk));
  auto g = RunOn(gpu(), t, DocumentForwardBackward(2));
  ASSERT_TRUE(g.ok()) << g.status();
  for (int i : {1, 2, 4}) {
    for (double v : AsDoubles((*g)[i])) ASSERT_TRUE(std::isfinite(v)) << "tensor " << i;
  }
}

// The document starts are checked like every other argument.
TEST_F(CpuVsCudaTest, DocumentStartsOfTheWrongShapeAreInvalidArgument) {
  std::vector<HostTensor> t = AttentionTensors(1, 64, 2, 1, 64, 3);
  t.push_back(HostTensor::Of(DType::kInt32, Shape{1, 63}));
  auto g = RunOn(gpu(), t, [](Ops& ops, std::vector<TensorDesc>& d) {
    return ops.AttentionForward(d[0], 1, d[5], d[1], d[2], nullptr);
  });
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << g.status();
  EXPECT_NE(std::string(g.status().message()).find("doc_starts"), std::string::npos) << g.status();
}

}  // namespace
}  // namespace testing
}  // namespace tessera
