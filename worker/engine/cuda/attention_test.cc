// Tensor-core causal attention on the GPU against the CPU reference (needs a
// GPU, tag "gpu"), on fresh random inputs, outputs poisoned before the run.
// Tolerances (relative L2):
//  * lse 1e-5: fp32 online softmax, exp2 with a folded scale, another
//    summation order.
//  * out 1e-2: bf16 result; P enters the P V product rounded to bf16, as in
//    every flash kernel (seen: a few 1e-3).
//  * grad_qkv 2e-2: bf16 result of a longer fp32 chain whose P and dS enter
//    the products as bf16.
// Shapes cover head dims 64 and 128 (whose forward is the warp-specialised
// kernel: TMA copies past a sequence's end, a stage ring that wraps many
// times at 4100 tokens), sequence lengths that are not multiples of the
// 64/128-row tiles (1, 7, 65, 129, 200, 1000), grouped-query groups of 1,
// 2, 4 and 8, and an empty batch. The backward must be bit-identical when
// run twice, and unsupported shapes are INVALID_ARGUMENT. Both deterministic
// forms of the backward are held to all of it, documents included: two
// passes, and one pass with dQ summed in key-block order (CudaEngineOptions::
// attention_backward_passes), at head dims 64 and 128. The one pass that
// adds dQ out of order (attention_atomic_backward) is held to the same
// tolerances and the same junk-start checks, not to repeating its bits.
// The default engine's rule runs one pass.
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

// The backward's forms (FlashBackwardForm, as the engine's options choose
// them).
enum class Form { kTwoPass, kOnePass, kOnePassAtomic };

// An engine whose own backward always takes one form, created once per form.
Ops* CudaOpsWithForm(Form form) {
  static Ops* engines[3] = {};
  Ops*& ops = engines[static_cast<int>(form)];
  if (ops == nullptr) {
    using Passes = CudaEngineOptions::BackwardPasses;
    CudaEngineOptions options;
    options.attention_backward_passes = form == Form::kTwoPass ? Passes::kTwoPass : Passes::kOnePass;
    options.attention_atomic_backward = form == Form::kOnePassAtomic;
    auto created = CreateCudaOps(0, options);
    if (!created.ok()) {
      ADD_FAILURE() << "CreateCudaOps(0): " << created.status();
      return nullptr;
    }
    ops = created->release();
  }
  return ops;
}

// The fixture for tests that run any form: engine(form). The default
// engine's rule (one pass wherever it exists) is held
// to the same tests by the rest of this file and the trainer's GPU tests.
class AttentionFormTest : public CpuVsCudaTest {
 protected:
  Ops& engine(Form form) { return *CudaOpsWithForm(form); }
  // {cpu, engine(form)} results, as Both.
  std::pair<std::vector<HostTensor>, std::vector<HostTensor>> BothForm(
      Form form, const std::vector<HostTensor>& tensors, const Body& body) {
    auto c = RunOn(cpu(), tensors, body);
    auto g = RunOn(engine(form), tensors, body);
    EXPECT_TRUE(c.ok()) << "cpu: " << c.status();
    EXPECT_TRUE(g.ok()) << "cuda: " << g.status();
    if (!c.ok() || !g.ok()) return {tensors, tensors};
    return {*std::move(c), *std::move(g)};
  }
  // Runs body twice on engine(form); the number of differing elements of
  // tensor i between the runs, or -1 if a run failed.
  int64_t RepeatDifferences(Form form, const std::vector<HostTensor>& t, const Body& body,
                            int i) {
    auto first = RunOn(engine(form), t, body);
    auto second = RunOn(engine(form), t, body);
    EXPECT_TRUE(first.ok()) << first.status();
    EXPECT_TRUE(second.ok()) << second.status();
    if (!first.ok() || !second.ok()) return -1;
    return BitDifferences((*first)[i], (*second)[i]);
  }
};

using Shape5 = std::tuple<int, int, int, int, int>;  // B, S, nh, nkv, hd
using Param = std::tuple<Shape5, Form>;

class AttentionTest : public AttentionFormTest, public ::testing::WithParamInterface<Param> {};

TEST_P(AttentionTest, ForwardAndBackwardMatchCpu) {
  const auto [shape, form] = GetParam();
  const auto [b, s, nh, nkv, hd] = shape;
  const uint32_t seed = static_cast<uint32_t>(s * 131 + nh * 7 + nkv + hd);
  auto [c, g] = BothForm(form, AttentionTensors(b, s, nh, nkv, hd, seed), ForwardBackward(nkv));
  EXPECT_LT(Error(g[1], c[1]), 1e-2) << "out";
  EXPECT_LT(Error(g[2], c[2]), 1e-5) << "lse";
  EXPECT_LT(Error(g[4], c[4]), 2e-2) << "grad_qkv";
}

// 4100 tokens: 33 key blocks per K/V head, so up to 33 blocks add to one dQ
// tile in the one-pass form (the repeat test below runs more blocks than an
// H100 holds at once).
INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionTest,
    ::testing::Combine(
        ::testing::Values(Shape5{1, 1, 1, 1, 64}, Shape5{2, 7, 2, 1, 64}, Shape5{1, 65, 4, 4, 64},
                          Shape5{2, 200, 4, 2, 64}, Shape5{1, 1000, 8, 1, 64},
                          Shape5{1, 1, 2, 2, 128}, Shape5{2, 129, 2, 2, 128},
                          Shape5{1, 200, 8, 2, 128}, Shape5{1, 1000, 4, 4, 128},
                          Shape5{1, 333, 8, 8, 128}, Shape5{1, 2048, 8, 2, 128},
                          Shape5{1, 4100, 8, 2, 128}, Shape5{0, 8, 2, 1, 64}),
        ::testing::Values(Form::kTwoPass, Form::kOnePass)));
// The atomic form on fewer shapes (its kernel is the one pass's, the order
// of the additions aside): the CPU reference dominates the time.
INSTANTIATE_TEST_SUITE_P(
    AtomicShapes, AttentionTest,
    ::testing::Combine(::testing::Values(Shape5{1, 1, 2, 2, 128}, Shape5{2, 129, 2, 2, 128},
                                         Shape5{1, 1000, 4, 4, 128}, Shape5{1, 2048, 8, 2, 128},
                                         Shape5{2, 200, 4, 2, 64}),
                       ::testing::Values(Form::kOnePassAtomic)));

// The deterministic forms.
class AttentionRepeatTest : public AttentionFormTest, public ::testing::WithParamInterface<Form> {};
// Every form.
class AttentionAnyFormTest : public AttentionFormTest, public ::testing::WithParamInterface<Form> {};

TEST_P(AttentionRepeatTest, AttentionBackwardIsBitIdenticalRunToRun) {
  const std::vector<HostTensor> t = AttentionTensors(2, 700, 8, 2, 128, 99);
  EXPECT_EQ(RepeatDifferences(GetParam(), t, ForwardBackward(2), 1), 0) << "out";
  EXPECT_EQ(RepeatDifferences(GetParam(), t, ForwardBackward(2), 4), 0) << "grad_qkv";
  // Many blocks adding to each dQ tile at once.
  const std::vector<HostTensor> large = AttentionTensors(2, 4096, 16, 4, 128, 5);
  EXPECT_EQ(RepeatDifferences(GetParam(), large, ForwardBackward(4), 4), 0) << "grad_qkv, 4096";
}

// Head dim 64 repeats its bits too, in both deterministic forms (its
// one-pass product of dQ is 64 x 32 per warpgroup).
TEST_P(AttentionRepeatTest, HeadDim64BackwardIsBitIdenticalRunToRun) {
  const std::vector<HostTensor> t = AttentionTensors(2, 1300, 8, 2, 64, 23);
  EXPECT_EQ(RepeatDifferences(GetParam(), t, ForwardBackward(2), 4), 0) << "grad_qkv";
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

using DocShape = std::tuple<int, int, int, int, int, int>;  // B, S, nh, nkv, hd, longest document
using DocParam = std::tuple<DocShape, Form>;

class AttentionDocumentTest : public AttentionFormTest,
                              public ::testing::WithParamInterface<DocParam> {};

// Document masking against the CPU engine (the specification), same
// tolerances as whole sequences: fresh random inputs and documents.
TEST_P(AttentionDocumentTest, DocumentMaskedForwardAndBackwardMatchCpu) {
  const auto [shape, form] = GetParam();
  const auto [b, s, nh, nkv, hd, longest] = shape;
  const uint32_t seed = static_cast<uint32_t>(std::random_device()());
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::vector<HostTensor> t = AttentionTensors(b, s, nh, nkv, hd, seed);
  t.push_back(RandomDocStarts(b, s, longest, seed + 7));
  auto [c, g] = BothForm(form, t, DocumentForwardBackward(nkv));
  EXPECT_LT(Error(g[1], c[1]), 1e-2) << "out";
  EXPECT_LT(Error(g[2], c[2]), 1e-5) << "lse";
  EXPECT_LT(Error(g[4], c[4]), 2e-2) << "grad_qkv";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionDocumentTest,
    ::testing::Combine(
        ::testing::Values(DocShape{2, 7, 2, 1, 64, 3}, DocShape{1, 200, 4, 2, 64, 40},
                          DocShape{2, 1000, 8, 1, 64, 300}, DocShape{1, 2048, 4, 4, 64, 1024},
                          DocShape{1, 129, 2, 2, 128, 64}, DocShape{2, 333, 8, 2, 128, 100},
                          DocShape{1, 2048, 8, 2, 128, 512}, DocShape{1, 1000, 4, 4, 128, 5},
                          DocShape{1, 4100, 8, 2, 128, 2000}),
        ::testing::Values(Form::kTwoPass, Form::kOnePass)));
INSTANTIATE_TEST_SUITE_P(
    AtomicShapes, AttentionDocumentTest,
    ::testing::Combine(::testing::Values(DocShape{1, 129, 2, 2, 128, 64},
                                         DocShape{2, 333, 8, 2, 128, 100},
                                         DocShape{1, 2048, 8, 2, 128, 512}),
                       ::testing::Values(Form::kOnePassAtomic)));

// One document per sequence, given as starts that are all 0, takes the
// whole-sequence path's bits: masking adds nothing where it masks nothing.
TEST_P(AttentionRepeatTest, OneDocumentPerSequenceGivesTheBitsOfWholeSequences) {
  std::vector<HostTensor> t = AttentionTensors(2, 700, 8, 2, 128, 41);
  t.push_back(HostTensor::Of(DType::kInt32, Shape{2, 700}));
  auto whole = RunOn(engine(GetParam()), t, ForwardBackward(2));
  auto documents = RunOn(engine(GetParam()), t, DocumentForwardBackward(2));
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_TRUE(documents.ok()) << documents.status();
  for (int i : {1, 2, 4}) EXPECT_EQ(BitDifferences((*documents)[i], (*whole)[i]), 0) << "tensor " << i;
}

TEST_P(AttentionRepeatTest, DocumentMaskedBackwardIsBitIdenticalRunToRun) {
  std::vector<HostTensor> t = AttentionTensors(2, 700, 8, 2, 128, 99);
  t.push_back(RandomDocStarts(2, 700, 150, 5));
  EXPECT_EQ(RepeatDifferences(GetParam(), t, DocumentForwardBackward(2), 1), 0) << "out";
  EXPECT_EQ(RepeatDifferences(GetParam(), t, DocumentForwardBackward(2), 4), 0) << "grad_qkv";
  // More key blocks than the GPU holds at once (4 x 32 x 8 = 1024):
  // documents that start mid-block chain blocks that wait for each other
  // across waves of the grid, and every wait must end.
  std::vector<HostTensor> large = AttentionTensors(4, 4096, 16, 8, 128, 8);
  large.push_back(RandomDocStarts(4, 4096, 1500, 9));
  EXPECT_EQ(RepeatDifferences(GetParam(), large, DocumentForwardBackward(8), 4), 0)
      << "grad_qkv, 4 x 4096";
}

// The default engine's rule: whole sequences and documents alike take the
// one-pass bits (and the two forms' bits differ, so the comparison can tell
// them apart).
TEST_F(AttentionFormTest, TheDefaultEngineRunsOnePassForWholeSequencesAndDocuments) {
  std::vector<HostTensor> t = AttentionTensors(1, 700, 8, 2, 128, 61);
  auto whole = RunOn(gpu(), t, ForwardBackward(2));
  auto whole_one = RunOn(engine(Form::kOnePass), t, ForwardBackward(2));
  auto whole_two = RunOn(engine(Form::kTwoPass), t, ForwardBackward(2));
  t.push_back(RandomDocStarts(1, 700, 150, 3));
  auto documents = RunOn(gpu(), t, DocumentForwardBackward(2));
  auto documents_one = RunOn(engine(Form::kOnePass), t, DocumentForwardBackward(2));
  auto documents_two = RunOn(engine(Form::kTwoPass), t, DocumentForwardBackward(2));
  for (const auto* r :
       {&whole, &whole_one, &whole_two, &documents, &documents_one, &documents_two}) {
    ASSERT_TRUE(r->ok()) << r->status();
  }
  EXPECT_EQ(BitDifferences((*whole)[4], (*whole_one)[4]), 0);
  EXPECT_GT(BitDifferences((*whole_one)[4], (*whole_two)[4]), 0);
  EXPECT_EQ(BitDifferences((*documents)[4], (*documents_one)[4]), 0);
  EXPECT_GT(BitDifferences((*documents_one)[4], (*documents_two)[4]), 0);
}

// The engine does not read document starts on the host, so starts that
// break the rule (negative, past their position, decreasing) must still
// stay inside the sequence: the kernels clamp them, every row keeps its own
// key, and every output is finite.
// Under the one-pass forms this also checks that no key block waits forever
// for a turn: junk starts give tiles whose first blocks are out of order.
TEST_P(AttentionAnyFormTest, DocumentStartsOfAnyContentStayInsideTheSequence) {
  std::mt19937 rng(17);
  for (int hd : {64, 128}) {
    std::vector<HostTensor> t = AttentionTensors(2, 1300, 4, 2, hd, 13);
    std::vector<int32_t> junk(2 * 1300);
    for (int32_t& v : junk) v = static_cast<int32_t>(rng());  // any int32, negative included
    // Half of the rows small non-negative values, so that clamped starts
    // vary instead of being 0 or the row itself.
    for (size_t i = 0; i < junk.size(); i += 2) junk[i] = static_cast<int32_t>(rng() % 1300);
    t.push_back(HostTensor::FromVector(DType::kInt32, Shape{2, 1300}, junk));
    auto g = RunOn(engine(GetParam()), t, DocumentForwardBackward(2));
    ASSERT_TRUE(g.ok()) << g.status();
    for (int i : {1, 2, 4}) {
      for (double v : AsDoubles((*g)[i])) ASSERT_TRUE(std::isfinite(v)) << "tensor " << i << ", hd " << hd;
    }
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

INSTANTIATE_TEST_SUITE_P(Forms, AttentionRepeatTest,
                         ::testing::Values(Form::kTwoPass, Form::kOnePass));
INSTANTIATE_TEST_SUITE_P(Forms, AttentionAnyFormTest,
                         ::testing::Values(Form::kTwoPass, Form::kOnePass, Form::kOnePassAtomic));

}  // namespace
}  // namespace testing
}  // namespace tessera
