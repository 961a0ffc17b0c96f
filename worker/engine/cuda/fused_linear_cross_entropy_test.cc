// The chunked fused LM head + cross-entropy on the GPU against the CPU
// reference (needs a GPU, tag "gpu"). The GPU rounds each chunk's logits to
// bf16 (the reference keeps fp32), which sets the tolerances (relative):
// loss sum 2e-3 (each row's lse and target logit carry a bf16 rounding of
// the logits, unbiased across rows); valid-token count exact; grad_x 2e-2
// (softmax of bf16 logits, bf16 dlogits and bf16 output); grad_weight 3e-3
// (fp32: written by a first call over NaN poison, then added to by a second).
// Shapes cover chunk sizes that do and do not divide T, a chunk larger than
// T, ignored tokens, a chunk of only ignored tokens, and every path of the
// row kernel: rows in registers (V a multiple of 8: up to 8192 with 256
// threads, up to 32768 with 1024), rows in registers and shared memory
// (32776, one staged vector, to 147456: 100008 and 131072), the streaming
// pass for wider V (262144, 270000), and the general kernel (V not a
// multiple of 8). The loss-only mode (no gradient outputs) gives the full
// call's loss bits and writes no gradient.
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/cuda/engine_harness_for_test.h"

namespace tessera {
namespace testing {
namespace {

using Param = std::tuple<int, int, int, int>;  // T, H, V, chunk_tokens
constexpr int kIgnore = -100;

class FusedLinearCrossEntropyTest : public CpuVsCudaTest,
                                    public ::testing::WithParamInterface<Param> {};

TEST_P(FusedLinearCrossEntropyTest, MatchesCpu) {
  const auto [tokens, h, vocab, chunk] = GetParam();
  std::vector<int32_t> targets = RandomInts(tokens, 9, 0, vocab);
  for (int i = 0; i < tokens; ++i) {
    if (i % 5 == 4 || (i >= 8 && i < 16)) targets[i] = kIgnore;  // rows 8..15: a whole chunk of 8
  }
  std::vector<HostTensor> t = {RandomTensor(DType::kBFloat16, Shape{tokens, h}, 1),
                               RandomTensor(DType::kBFloat16, Shape{vocab, h}, 2, 0.3f),
                               HostTensor::FromVector(DType::kInt32, Shape{tokens}, targets),
                               Scalar(0.5f), Scalar(3.0f),
                               Poisoned(DType::kBFloat16, Shape{tokens, h}),
                               Poisoned(DType::kFloat32, Shape{vocab, h})};
  auto [c, g] = Both(t, [chunk = chunk](Ops& ops, std::vector<TensorDesc>& d) {
    // The first call writes grad_weight over its NaN poison; the second
    // (reusing the chunk workspace) adds to it.
    absl::Status s = ops.FusedLinearCrossEntropy(d[0], d[1], d[2], kIgnore, chunk,
                                                 d[3].As<float>(), d[4].As<float>(), d[5], d[6],
                                                 /*accumulate_grad_weight=*/false, nullptr);
    if (s.ok()) {
      s = ops.FusedLinearCrossEntropy(d[0], d[1], d[2], kIgnore, chunk, d[3].As<float>(),
                                      d[4].As<float>(), d[5], d[6],
                                      /*accumulate_grad_weight=*/true, nullptr);
    }
    return s;
  });
  EXPECT_LT(Error(g[3], c[3]), 2e-3) << "loss_sum";
  EXPECT_EQ(g[4].As<float>(), c[4].As<float>()) << "valid_tokens";
  EXPECT_LT(Error(g[5], c[5]), 2e-2) << "grad_x";
  EXPECT_LT(Error(g[6], c[6]), 3e-3) << "grad_weight";
}

INSTANTIATE_TEST_SUITE_P(Shapes, FusedLinearCrossEntropyTest,
                         ::testing::Values(Param{64, 64, 512, 8}, Param{100, 128, 1000, 48},
                                           Param{24, 32, 50, 256}, Param{1, 16, 7, 1},
                                           Param{257, 96, 4099, 64}, Param{40, 32, 8192, 16},
                                           Param{64, 64, 32768, 32}, Param{24, 32, 32776, 16},
                                           Param{20, 32, 32772, 8}, Param{24, 32, 131072, 16},
                                           Param{17, 16, 100008, 8}, Param{12, 16, 262144, 8},
                                           Param{12, 16, 270000, 8}));

// Each vocab size takes another path of the row kernel (general, rows in
// registers, rows staged in shared memory, streaming).
// The loss sum is the same bits on every run: the row losses are added in
// a fixed order, not by atomics in whatever order the rows finish. Checked
// for each row-kernel path, with ignored rows mixed in.
TEST_F(CpuVsCudaTest, LossIsTheSameBitsOnEveryRun) {
  for (int vocab : {4096, 32768, 65536, 200000, 1003}) {
    SCOPED_TRACE(vocab);
    const int tokens = 2048, h = 16;
    std::vector<int32_t> targets = RandomInts(tokens, 11, 0, vocab);
    for (int i = 0; i < tokens; i += 7) targets[i] = kIgnore;
    std::vector<HostTensor> t = {RandomTensor(DType::kBFloat16, Shape{tokens, h}, 1),
                                 RandomTensor(DType::kBFloat16, Shape{vocab, h}, 2, 0.3f),
                                 HostTensor::FromVector(DType::kInt32, Shape{tokens}, targets)};
    for (int run = 0; run < 4; ++run) {
      t.push_back(Scalar(0.f));
      t.push_back(Scalar(0.f));
      t.push_back(Poisoned(DType::kBFloat16, Shape{tokens, h}));
      t.push_back(Poisoned(DType::kFloat32, Shape{vocab, h}));
    }
    auto g = RunOn(gpu(), t, [](Ops& ops, std::vector<TensorDesc>& d) -> absl::Status {
      for (int run = 0; run < 4; ++run) {
        const int o = 3 + 4 * run;
        absl::Status st = ops.FusedLinearCrossEntropy(
            d[0], d[1], d[2], kIgnore, 512, d[o].As<float>(), d[o + 1].As<float>(), d[o + 2],
            d[o + 3], /*accumulate_grad_weight=*/false, nullptr);
        if (!st.ok()) return st;
      }
      return ops.Synchronize(nullptr);
    });
    ASSERT_TRUE(g.ok()) << g.status();
    for (int run = 1; run < 4; ++run) {
      EXPECT_EQ((*g)[3 + 4 * run].bytes, (*g)[3].bytes) << "loss sum, run " << run;
      EXPECT_EQ((*g)[4 + 4 * run].bytes, (*g)[4].bytes) << "valid tokens, run " << run;
      EXPECT_EQ((*g)[5 + 4 * run].bytes, (*g)[5].bytes) << "grad_x, run " << run;
    }
    EXPECT_EQ((*g)[4].As<float>()[0], static_cast<float>(tokens - (tokens + 6) / 7));
  }
}

// Loss only (null gradient outputs, as evaluation calls it): the loss sum
// and valid count are the same bits as the full call's (the same logits
// GEMM and row kernel; only the two gradient GEMMs are skipped), for each
// row-kernel path, and gradient buffers that exist but are not passed stay
// as poisoned as they started. Both engines, so the CPU's loss-only path is
// held to the same contract.
TEST_F(CpuVsCudaTest, LossOnlyGivesTheFullCallsLossAndWritesNoGradient) {
  for (int vocab : {1003, 4096, 32768, 65536, 200000}) {
    SCOPED_TRACE(vocab);
    const int tokens = 300, h = 32, chunk = 64;
    std::vector<int32_t> targets = RandomInts(tokens, 13, 0, vocab);
    for (int i = 0; i < tokens; i += 9) targets[i] = kIgnore;
    // 0 x, 1 weight, 2 targets; 3..6 the full call; 7, 8 loss only (default
    // descriptors); 9, 10 loss only (sized descriptors without data); 11, 12
    // gradient buffers no loss-only call is given.
    std::vector<HostTensor> t = {RandomTensor(DType::kBFloat16, Shape{tokens, h}, 1),
                                 RandomTensor(DType::kBFloat16, Shape{vocab, h}, 2, 0.3f),
                                 HostTensor::FromVector(DType::kInt32, Shape{tokens}, targets),
                                 Scalar(0.5f), Scalar(2.0f),
                                 Poisoned(DType::kBFloat16, Shape{tokens, h}),
                                 Poisoned(DType::kFloat32, Shape{vocab, h}),
                                 Scalar(0.5f), Scalar(2.0f), Scalar(0.5f), Scalar(2.0f),
                                 Poisoned(DType::kBFloat16, Shape{tokens, h}),
                                 Poisoned(DType::kFloat32, Shape{vocab, h})};
    for (Ops* ops : {&cpu(), &gpu()}) {
      SCOPED_TRACE(ops == &cpu() ? "cpu" : "cuda");
      auto r = RunOn(*ops, t, [&](Ops& ops, std::vector<TensorDesc>& d) -> absl::Status {
        absl::Status s = ops.FusedLinearCrossEntropy(d[0], d[1], d[2], kIgnore, chunk,
                                                     d[3].As<float>(), d[4].As<float>(), d[5],
                                                     d[6], /*accumulate_grad_weight=*/false,
                                                     nullptr);
        if (!s.ok()) return s;
        s = ops.FusedLinearCrossEntropy(d[0], d[1], d[2], kIgnore, chunk, d[7].As<float>(),
                                        d[8].As<float>(), TensorDesc{}, TensorDesc{},
                                        /*accumulate_grad_weight=*/false, nullptr);
        if (!s.ok()) return s;
        TensorDesc gx = d[11], gw = d[12];
        gx.data = nullptr;
        gw.data = nullptr;
        s = ops.FusedLinearCrossEntropy(d[0], d[1], d[2], kIgnore, chunk, d[9].As<float>(),
                                        d[10].As<float>(), gx, gw,
                                        /*accumulate_grad_weight=*/true, nullptr);
        if (!s.ok()) return s;
        return ops.Synchronize(nullptr);
      });
      ASSERT_TRUE(r.ok()) << r.status();
      for (int first : {7, 9}) {
        EXPECT_EQ((*r)[first].bytes, (*r)[3].bytes) << "loss sum, loss only at " << first;
        EXPECT_EQ((*r)[first + 1].bytes, (*r)[4].bytes) << "valid tokens, loss only at " << first;
      }
      EXPECT_EQ((*r)[11].bytes, t[11].bytes) << "grad_x buffer written";
      EXPECT_EQ((*r)[12].bytes, t[12].bytes) << "grad_weight buffer written";
      EXPECT_NE((*r)[5].bytes, t[5].bytes) << "the full call wrote grad_x";
    }
  }
}

TEST_F(CpuVsCudaTest, TargetOutOfRangeRaisesTheFlag) {
  for (int vocab : {10, 4096, 40000, 300000}) {
    SCOPED_TRACE(vocab);
    const int tokens = 4, h = 16;
    std::vector<HostTensor> t = {
        RandomTensor(DType::kBFloat16, Shape{tokens, h}, 1),
        RandomTensor(DType::kBFloat16, Shape{vocab, h}, 2),
        HostTensor::FromVector(DType::kInt32, Shape{tokens}, std::vector<int32_t>{1, vocab, 2, 3}),
        Scalar(0.f), Scalar(0.f), Poisoned(DType::kBFloat16, Shape{tokens, h}),
        RandomTensor(DType::kFloat32, Shape{vocab, h}, 3)};
    auto g = RunOn(gpu(), t, [](Ops& ops, std::vector<TensorDesc>& d) {
      return ops.FusedLinearCrossEntropy(d[0], d[1], d[2], kIgnore, 2, d[3].As<float>(),
                                         d[4].As<float>(), d[5], d[6], true, nullptr);
    });
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << g.status();
  }
}

}  // namespace
}  // namespace testing
}  // namespace tessera
