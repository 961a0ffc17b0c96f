// Token embedding on the GPU against the CPU reference (needs a GPU, tag
// "gpu"). Tolerances: forward bit-exact (a gather and at most one rounding);
// backward 1e-6 relative (an id's tokens longer than one sorted chunk are
// summed per chunk first), and bit-exact when every id occurs once.
// Determinism: the backward gives the same bits on two engines, on inputs
// with a dozen ids repeated over 16k tokens (a synthetic task's batch), ids
// spread over a large vocabulary, a width that is not a multiple of the
// tile, and one id for every token. Also: an out-of-range id writes a zero
// row and makes the next Synchronize INVALID_ARGUMENT, once, and the
// backward skips it.
#include <algorithm>
#include <cstdint>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/engine/cuda/engine_harness_for_test.h"

namespace tessera {
namespace testing {
namespace {

using Param = std::tuple<DType /*table*/, DType /*out*/, std::tuple<int, int, int> /*T, V, H*/>;

class EmbeddingTest : public CpuVsCudaTest, public ::testing::WithParamInterface<Param> {};

TEST_P(EmbeddingTest, ForwardAndBackwardMatchCpu) {
  const auto [table_dtype, out_dtype, dims] = GetParam();
  const auto [tokens, vocab, h] = dims;
  std::vector<HostTensor> t = {
      HostTensor::FromVector(DType::kInt32, Shape{tokens}, RandomInts(tokens, 7, 0, vocab)),
      RandomTensor(table_dtype, Shape{vocab, h}, 1), Poisoned(out_dtype, Shape{tokens, h}),
      RandomTensor(out_dtype, Shape{tokens, h}, 2),       // grad_out
      RandomTensor(DType::kFloat32, Shape{vocab, h}, 3)};  // grad_table, accumulated into
  auto [c, g] = Both(t, [](Ops& ops, std::vector<TensorDesc>& d) {
    absl::Status s = ops.EmbeddingForward(d[0], d[1], d[2], nullptr);
    if (s.ok()) s = ops.EmbeddingBackward(d[0], d[3], d[4], 0, d[4].shape[0], nullptr);
    return s;
  });
  EXPECT_EQ(BitDifferences(g[2], c[2]), 0) << "forward";
  EXPECT_LT(Error(g[4], c[4]), 1e-6) << "backward";
}

INSTANTIATE_TEST_SUITE_P(
    DtypesAndShapes, EmbeddingTest,
    ::testing::Combine(::testing::Values(DType::kFloat32, DType::kBFloat16),
                       ::testing::Values(DType::kFloat32, DType::kBFloat16),
                       ::testing::Values(std::tuple{1, 1, 8}, std::tuple{300, 7, 96},
                                         std::tuple{64, 1000, 130}, std::tuple{0, 5, 16})));

// Backward determinism and accuracy on step-sized inputs.
struct BackwardCase {
  int tokens, vocab, h;
  int distinct;  // ids drawn from this many values spread over the vocabulary
};

using BackwardParam = std::tuple<DType /*grad_out*/, BackwardCase>;

class EmbeddingBackwardTest : public CpuVsCudaTest,
                              public ::testing::WithParamInterface<BackwardParam> {};

TEST_P(EmbeddingBackwardTest, SameBitsEveryRunAndMatchesCpu) {
  const auto [grad_dtype, c] = GetParam();
  const std::vector<int32_t> values = RandomInts(c.distinct, 31, 0, c.vocab);
  std::vector<int32_t> ids = RandomInts(c.tokens, 32, 0, c.distinct);
  for (int32_t& id : ids) id = values[id];
  std::vector<HostTensor> t = {HostTensor::FromVector(DType::kInt32, Shape{c.tokens}, ids),
                               RandomTensor(grad_dtype, Shape{c.tokens, c.h}, 33),
                               RandomTensor(DType::kFloat32, Shape{c.vocab, c.h}, 34)};
  const Body backward = [](Ops& ops, std::vector<TensorDesc>& d) {
    return ops.EmbeddingBackward(d[0], d[1], d[2], 0, d[2].shape[0], nullptr);
  };
  auto first = RunOn(gpu(), t, backward);
  ASSERT_TRUE(first.ok()) << first.status();
  // A second engine: its own scratch and launches, as a rerun of the job.
  auto engine = CreateCudaOps(0);
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto second = RunOn(**engine, t, backward);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ((*first)[2].bytes, (*second)[2].bytes) << "the backward differs between runs";
  auto cpu_out = RunOn(cpu(), t, backward);
  ASSERT_TRUE(cpu_out.ok()) << cpu_out.status();
  EXPECT_LT(Error((*first)[2], (*cpu_out)[2]), 1e-6);
  EXPECT_NE((*first)[2].bytes, t[2].bytes) << "nothing was added";
}

INSTANTIATE_TEST_SUITE_P(
    StepShapes, EmbeddingBackwardTest,
    ::testing::Combine(::testing::Values(DType::kBFloat16, DType::kFloat32),
                       ::testing::Values(BackwardCase{16384, 32768, 512, 13},
                                         BackwardCase{4096, 128256, 256, 4096},
                                         BackwardCase{1000, 50, 130, 50},
                                         BackwardCase{300, 9, 96, 1},
                                         BackwardCase{65, 70, 520, 65})));

// Every id once: each row gets one add, as on the CPU, bit for bit.
TEST_F(CpuVsCudaTest, EmbeddingBackwardOfDistinctIdsIsBitExact) {
  const int tokens = 2000, vocab = 5000, h = 200;
  std::vector<int32_t> ids(tokens);
  for (int i = 0; i < tokens; ++i) ids[i] = (i * 7919) % vocab;  // distinct: 7919 is prime
  std::vector<HostTensor> t = {HostTensor::FromVector(DType::kInt32, Shape{tokens}, ids),
                               RandomTensor(DType::kBFloat16, Shape{tokens, h}, 41),
                               RandomTensor(DType::kFloat32, Shape{vocab, h}, 42)};
  auto [c, g] = Both(t, [](Ops& ops, std::vector<TensorDesc>& d) {
    return ops.EmbeddingBackward(d[0], d[1], d[2], 0, d[2].shape[0], nullptr);
  });
  EXPECT_EQ(BitDifferences(g[2], c[2]), 0);
}

// An FSDP rank's rows of the gradient from every rank's tokens (the 8B
// model's vocabulary over 4 ranks, the last one short, and an empty fifth
// of 5): the same bits on every run, the CPU engine's values, and rows
// other than the shard's untouched.
TEST_F(CpuVsCudaTest, EmbeddingBackwardOfAShardsRowsMatchesCpu) {
  const int tokens = 4 * 2048, vocab = 128256, h = 256;
  std::vector<int32_t> ids = RandomInts(tokens, 71, 0, vocab);
  for (int i = 0; i < tokens; i += 3) ids[i] = ids[i / 3];  // repeated ids too
  for (const auto& [world, rank] : {std::pair{4, 0}, std::pair{4, 3}, std::pair{5, 4}}) {
    SCOPED_TRACE(absl::StrCat("rank ", rank, " of ", world));
    const int64_t per_rank = (vocab + world - 1) / world;
    const int64_t first = std::min<int64_t>(vocab, rank * per_rank);
    const int64_t rows = std::min<int64_t>(vocab, (rank + 1) * per_rank) - first;
    std::vector<HostTensor> t = {HostTensor::FromVector(DType::kInt32, Shape{tokens}, ids),
                                 RandomTensor(DType::kFloat32, Shape{tokens, h}, 72),
                                 RandomTensor(DType::kFloat32, Shape{std::max<int64_t>(rows, 1), h}, 73)};
    const Body backward = [first, rows, vocab, h](Ops& ops, std::vector<TensorDesc>& d) {
      return ops.EmbeddingBackward(d[0], d[1], MakeTensor(d[2].data, DType::kFloat32, Shape{rows, h}), first, vocab, nullptr);
    };
    auto gpu_out = RunOn(gpu(), t, backward);
    ASSERT_TRUE(gpu_out.ok()) << gpu_out.status();
    auto again = RunOn(gpu(), t, backward);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ((*gpu_out)[2].bytes, (*again)[2].bytes);
    auto cpu_out = RunOn(cpu(), t, backward);
    ASSERT_TRUE(cpu_out.ok()) << cpu_out.status();
    EXPECT_LT(Error((*gpu_out)[2], (*cpu_out)[2]), 1e-6);
    if (rows > 0) {
      EXPECT_NE((*gpu_out)[2].bytes, t[2].bytes) << "nothing was added";
    } else {
      EXPECT_EQ((*gpu_out)[2].bytes, t[2].bytes) << "an empty shard's buffer was written";
    }
  }
}

// A bad id raises the flag and adds nothing; the good ones are still added.
TEST_F(CpuVsCudaTest, EmbeddingBackwardSkipsAnOutOfRangeId) {
  const int tokens = 5, vocab = 4, h = 8;
  std::vector<HostTensor> t = {
      HostTensor::FromVector(DType::kInt32, Shape{tokens}, std::vector<int32_t>{1, 9, 1, -3, 2}),
      RandomTensor(DType::kFloat32, Shape{tokens, h}, 51),
      RandomTensor(DType::kFloat32, Shape{vocab, h}, 52)};
  auto g = RunOn(gpu(), t, [](Ops& ops, std::vector<TensorDesc>& d) {
    return ops.EmbeddingBackward(d[0], d[1], d[2], 0, d[2].shape[0], nullptr);
  });
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << g.status();
  // The flag was cleared by that report; read the table the backward left.
  Ops& ops = gpu();
  auto ids = ops.Allocate(t[0].bytes.size());
  auto grad = ops.Allocate(t[1].bytes.size());
  auto table = ops.Allocate(t[2].bytes.size());
  ASSERT_TRUE(ids.ok() && grad.ok() && table.ok());
  ASSERT_TRUE(ops.CopyToDevice((*ids)->data(), t[0].bytes.data(), t[0].bytes.size(), nullptr).ok());
  ASSERT_TRUE(ops.CopyToDevice((*grad)->data(), t[1].bytes.data(), t[1].bytes.size(), nullptr).ok());
  ASSERT_TRUE(ops.CopyToDevice((*table)->data(), t[2].bytes.data(), t[2].bytes.size(), nullptr).ok());
  ASSERT_TRUE(ops.EmbeddingBackward(MakeTensor((*ids)->data(), DType::kInt32, Shape{tokens}),
                                    MakeTensor((*grad)->data(), DType::kFloat32, Shape{tokens, h}),
                                    MakeTensor((*table)->data(), DType::kFloat32, Shape{vocab, h}),
                                    0, vocab, nullptr)
                  .ok());
  EXPECT_EQ(ops.Synchronize(nullptr).code(), absl::StatusCode::kInvalidArgument);
  std::vector<float> got(vocab * h);
  ASSERT_TRUE(ops.CopyToHost(got.data(), (*table)->data(), got.size() * 4, nullptr).ok());
  const std::vector<float> g_rows = t[1].As<float>(), start = t[2].As<float>();
  for (int j = 0; j < h; ++j) {
    EXPECT_EQ(got[j], start[j]) << "row 0 has no token";
    EXPECT_EQ(got[h + j], (start[h + j] + g_rows[j]) + g_rows[2 * h + j]) << "row 1, in token order";
    EXPECT_EQ(got[2 * h + j], start[2 * h + j] + g_rows[4 * h + j]);
    EXPECT_EQ(got[3 * h + j], start[3 * h + j]) << "row 3 has no token";
  }
}

TEST_F(CpuVsCudaTest, OutOfRangeIdRaisesTheFlagOnce) {
  const int tokens = 4, vocab = 6, h = 40;
  std::vector<HostTensor> t = {
      HostTensor::FromVector(DType::kInt32, Shape{tokens}, std::vector<int32_t>{1, vocab, 2, -1}),
      RandomTensor(DType::kFloat32, Shape{vocab, h}, 1), Poisoned(DType::kFloat32, Shape{tokens, h})};
  auto g = RunOn(gpu(), t, [](Ops& ops, std::vector<TensorDesc>& d) {
    return ops.EmbeddingForward(d[0], d[1], d[2], nullptr);
  });
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << g.status();
  // The flag was cleared by the report: a clean run succeeds and writes
  // zeros for nothing.
  t[0] = HostTensor::FromVector(DType::kInt32, Shape{tokens}, std::vector<int32_t>{1, 5, 2, 0});
  auto clean = RunOn(gpu(), t, [](Ops& ops, std::vector<TensorDesc>& d) {
    return ops.EmbeddingForward(d[0], d[1], d[2], nullptr);
  });
  ASSERT_TRUE(clean.ok()) << clean.status();
  EXPECT_EQ((*clean)[2].As<float>()[h * 3], t[1].As<float>()[0]);
}

TEST_F(CpuVsCudaTest, OutOfRangeIdWritesAZeroRow) {
  const int tokens = 3, vocab = 4, h = 8;
  std::vector<HostTensor> t = {
      HostTensor::FromVector(DType::kInt32, Shape{tokens}, std::vector<int32_t>{0, 9, 3}),
      RandomTensor(DType::kFloat32, Shape{vocab, h}, 1), Poisoned(DType::kFloat32, Shape{tokens, h}),
      Poisoned(DType::kFloat32, Shape{tokens, h})};
  Ops& ops = gpu();
  auto out = ops.Allocate(t[2].bytes.size());
  auto ids = ops.Allocate(t[0].bytes.size());
  auto table = ops.Allocate(t[1].bytes.size());
  ASSERT_TRUE(out.ok() && ids.ok() && table.ok());
  ASSERT_TRUE(ops.CopyToDevice((*ids)->data(), t[0].bytes.data(), t[0].bytes.size(), nullptr).ok());
  ASSERT_TRUE(ops.CopyToDevice((*table)->data(), t[1].bytes.data(), t[1].bytes.size(), nullptr).ok());
  ASSERT_TRUE(ops.CopyToDevice((*out)->data(), t[2].bytes.data(), t[2].bytes.size(), nullptr).ok());
  ASSERT_TRUE(ops.EmbeddingForward(MakeTensor((*ids)->data(), DType::kInt32, Shape{tokens}),
                                   MakeTensor((*table)->data(), DType::kFloat32, Shape{vocab, h}),
                                   MakeTensor((*out)->data(), DType::kFloat32, Shape{tokens, h}),
                                   nullptr)
                  .ok());
  EXPECT_EQ(ops.Synchronize(nullptr).code(), absl::StatusCode::kInvalidArgument);
  std::vector<float> got(tokens * h);
  ASSERT_TRUE(ops.CopyToHost(got.data(), (*out)->data(), got.size() * 4, nullptr).ok());
  const std::vector<float> table_values = t[1].As<float>();
  for (int j = 0; j < h; ++j) {
    EXPECT_EQ(got[j], table_values[j]);
    EXPECT_EQ(got[h + j], 0.f) << "bad id row";
    EXPECT_EQ(got[2 * h + j], table_values[3 * h + j]);
  }
}

}  // namespace
}  // namespace testing
}  // namespace tessera
