// Embedding gather and scatter-add against fp64 references for every
// table / output / gradient dtype and several shapes (T = 1, odd sizes,
// repeated ids): the gather is exact up to the output's rounding, the
// scatter-add matches the fp64 sum and is bit-deterministic, the reference
// backward matches finite differences, and bad ids are rejected with their
// position before anything is written.
#include "worker/engine/cpu/embedding.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/engine/cpu/bf16.h"
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
using ::tessera::testing::RandomInts;

constexpr DType kF32 = DType::kFloat32;
constexpr DType kBf16 = DType::kBFloat16;

struct Dims {
  int tokens, vocab, hidden;
};

// out[t, j] = table[ids[t], j].
std::vector<double> RefForward(const std::vector<int32_t>& ids, const std::vector<double>& table,
                               int hidden) {
  std::vector<double> out(ids.size() * hidden);
  for (size_t t = 0; t < ids.size(); ++t) {
    for (int j = 0; j < hidden; ++j) out[t * hidden + j] = table[ids[t] * hidden + j];
  }
  return out;
}

// d(sum_tj out[t, j] g[t, j]) / d table: each row of g added to row ids[t].
std::vector<double> RefBackward(const std::vector<int32_t>& ids, const std::vector<double>& g,
                                int vocab, int hidden) {
  std::vector<double> grad(static_cast<size_t>(vocab) * hidden, 0.0);
  for (size_t t = 0; t < ids.size(); ++t) {
    for (int j = 0; j < hidden; ++j) grad[ids[t] * hidden + j] += g[t * hidden + j];
  }
  return grad;
}

class EmbeddingTest : public ::testing::TestWithParam<std::tuple<DType, DType, Dims>> {};

TEST_P(EmbeddingTest, GatherAndScatterAddMatchFp64) {
  auto [table_dtype, out_dtype, d] = GetParam();
  // Ids from a small range so that rows repeat and the scatter-add accumulates.
  std::vector<int32_t> ids = RandomInts(d.tokens, 7 + d.tokens, 0, d.vocab);
  ids.back() = d.vocab - 1;  // the last row is reachable
  TensorDesc ids_desc = MakeTensor(ids.data(), DType::kInt32, Shape{d.tokens});
  FloatTensor table = FloatTensor::Random(table_dtype, Shape{d.vocab, d.hidden}, 11 + d.vocab);
  FloatTensor out = FloatTensor::Poisoned(out_dtype, Shape{d.tokens, d.hidden});
  ASSERT_TRUE(EmbeddingForward(ids_desc, table.desc(), out.desc()).ok());
  const std::vector<double> want = RefForward(ids, table.values(), d.hidden);
  if (out_dtype == kF32 || table_dtype == kBf16) {
    EXPECT_EQ(out.values(), want);  // exact: no narrowing
  } else {
    EXPECT_TRUE(AllClose(out.values(), want, 1.0 / 256, 0.0));
    for (int64_t i = 0; i < out.size(); ++i) {
      EXPECT_EQ(out.Get(i), Bf16ToFloat(FloatToBf16(static_cast<float>(want[i])))) << i;
    }
  }
  FloatTensor out_again = FloatTensor::Poisoned(out_dtype, Shape{d.tokens, d.hidden});
  ASSERT_TRUE(EmbeddingForward(ids_desc, table.desc(), out_again.desc()).ok());
  EXPECT_TRUE(out_again.BitEqual(out));

  // Backward: grad_out has out's dtype; grad_table starts from random values.
  FloatTensor grad_out = FloatTensor::Random(out_dtype, Shape{d.tokens, d.hidden}, 13 + d.tokens);
  const FloatTensor initial = FloatTensor::Random(kF32, Shape{d.vocab, d.hidden}, 17 + d.hidden);
  FloatTensor grad_table = initial;
  ASSERT_TRUE(EmbeddingBackward(ids_desc, grad_out.desc(), grad_table.desc(), 0, d.vocab).ok());
  std::vector<double> want_grad = RefBackward(ids, grad_out.values(), d.vocab, d.hidden);
  const std::vector<double> start = initial.values();
  for (size_t i = 0; i < want_grad.size(); ++i) want_grad[i] += start[i];
  // fp32 adds of O(1) values, at most `tokens` per element.
  EXPECT_TRUE(AllClose(grad_table.values(), want_grad, 1e-6, 1e-6 * d.tokens * MaxAbs(want_grad)));
  FloatTensor grad_again = initial;
  ASSERT_TRUE(EmbeddingBackward(ids_desc, grad_out.desc(), grad_again.desc(), 0, d.vocab).ok());
  EXPECT_TRUE(grad_again.BitEqual(grad_table));
}

std::string EmbeddingName(const ::testing::TestParamInfo<EmbeddingTest::ParamType>& info) {
  auto [table_dtype, out_dtype, d] = info.param;
  return std::string("table_") + testing::Name(table_dtype) + "_out_" + testing::Name(out_dtype) +
         "_T" + std::to_string(d.tokens) + "_V" + std::to_string(d.vocab) + "_H" +
         std::to_string(d.hidden);
}

INSTANTIATE_TEST_SUITE_P(DTypesAndShapes, EmbeddingTest,
                         ::testing::Combine(::testing::Values(kF32, kBf16),
                                            ::testing::Values(kF32, kBf16),
                                            ::testing::Values(Dims{1, 1, 1}, Dims{1, 5, 8},
                                                              Dims{9, 11, 6}, Dims{33, 7, 17},
                                                              Dims{64, 50, 32})),
                         EmbeddingName);

TEST(Embedding, ReferenceBackwardMatchesFiniteDifferences) {
  const int tokens = 6, vocab = 4, hidden = 3;
  const std::vector<int32_t> ids = {2, 0, 2, 3, 2, 1};
  const std::vector<double> g = FloatTensor::Random(kF32, Shape{tokens, hidden}, 3).values();
  const std::vector<double> table = FloatTensor::Random(kF32, Shape{vocab, hidden}, 4).values();
  auto loss = [&](const std::vector<double>& tab) {
    const std::vector<double> out = RefForward(ids, tab, hidden);
    double acc = 0.0;
    for (size_t i = 0; i < out.size(); ++i) acc += out[i] * g[i];
    return acc;
  };
  EXPECT_TRUE(AllClose(RefBackward(ids, g, vocab, hidden), NumericGradient(loss, table), 1e-8, 1e-9));
}

TEST(Embedding, OutOfRangeIdIsRejectedWithItsPositionAndNothingIsWritten) {
  const int tokens = 5, vocab = 6, hidden = 4;
  FloatTensor table = FloatTensor::Random(kBf16, Shape{vocab, hidden}, 21);
  FloatTensor grad_out = FloatTensor::Random(kBf16, Shape{tokens, hidden}, 22);
  for (int32_t bad : {vocab, -1, 1 << 30}) {
    std::vector<int32_t> ids = {0, 1, 2, bad, 3};
    TensorDesc ids_desc = MakeTensor(ids.data(), DType::kInt32, Shape{tokens});
    FloatTensor out = FloatTensor::Poisoned(kF32, Shape{tokens, hidden});
    absl::Status s = EmbeddingForward(ids_desc, table.desc(), out.desc());
    EXPECT_TRUE(InvalidArgumentNaming(s, "ids"));
    EXPECT_NE(s.message().find("position 3"), std::string::npos) << s;
    EXPECT_NE(s.message().find(std::to_string(bad)), std::string::npos) << s;
    for (int64_t i = 0; i < out.size(); ++i) EXPECT_TRUE(std::isnan(out.Get(i)));

    const FloatTensor initial = FloatTensor::Random(kF32, Shape{vocab, hidden}, 23);
    FloatTensor grad_table = initial;
    s = EmbeddingBackward(ids_desc, grad_out.desc(), grad_table.desc(), 0, vocab);
    EXPECT_TRUE(InvalidArgumentNaming(s, "ids"));
    EXPECT_NE(s.message().find("position 3"), std::string::npos) << s;
    EXPECT_TRUE(grad_table.BitEqual(initial));
  }
}

TEST(Embedding, RejectsBadDtypesAndShapesNamingTheArgument) {
  const int tokens = 3, vocab = 5, hidden = 4;
  std::vector<int32_t> ids = {1, 4, 0};
  TensorDesc ids_desc = MakeTensor(ids.data(), DType::kInt32, Shape{tokens});
  FloatTensor table = FloatTensor::Random(kF32, Shape{vocab, hidden}, 31);
  FloatTensor out = FloatTensor::Poisoned(kBf16, Shape{tokens, hidden});
  FloatTensor grad_out = FloatTensor::Random(kBf16, Shape{tokens, hidden}, 32);
  FloatTensor grad_table = FloatTensor::Random(kF32, Shape{vocab, hidden}, 33);
  std::vector<float> float_ids = {1.f, 4.f, 0.f};
  TensorDesc float_ids_desc = MakeTensor(float_ids.data(), kF32, Shape{tokens});
  std::vector<uint8_t> fp8(vocab * hidden);

  EXPECT_TRUE(InvalidArgumentNaming(EmbeddingForward(float_ids_desc, table.desc(), out.desc()), "ids"));
  EXPECT_TRUE(InvalidArgumentNaming(
      EmbeddingForward(MakeTensor(ids.data(), DType::kInt32, Shape{1, tokens}), table.desc(),
                       out.desc()),
      "ids"));
  EXPECT_TRUE(InvalidArgumentNaming(
      EmbeddingForward(ids_desc, MakeTensor(fp8.data(), DType::kE4M3, Shape{vocab, hidden}),
                       out.desc()),
      "table"));
  EXPECT_TRUE(InvalidArgumentNaming(
      EmbeddingForward(ids_desc, table.desc(Shape{vocab * hidden}), out.desc()), "table"));
  EXPECT_TRUE(InvalidArgumentNaming(
      EmbeddingForward(ids_desc, table.desc(), out.desc(Shape{tokens - 1, hidden})), "out"));
  EXPECT_TRUE(InvalidArgumentNaming(
      EmbeddingForward(ids_desc, table.desc(),
                       MakeTensor(fp8.data(), DType::kE5M2, Shape{tokens, hidden})),
      "out"));
  EXPECT_TRUE(InvalidArgumentNaming(
      EmbeddingForward(MakeTensor(nullptr, DType::kInt32, Shape{tokens}), table.desc(), out.desc()),
      "ids"));

  EXPECT_TRUE(InvalidArgumentNaming(
      EmbeddingBackward(ids_desc, grad_out.desc(), out.desc(Shape{vocab, hidden}), 0, vocab), "grad_table"));
  EXPECT_TRUE(InvalidArgumentNaming(
      EmbeddingBackward(ids_desc, grad_out.desc(Shape{tokens, hidden + 1}), grad_table.desc(), 0,
                        vocab),
      "grad_out"));
  EXPECT_TRUE(InvalidArgumentNaming(
      EmbeddingBackward(float_ids_desc, grad_out.desc(), grad_table.desc(), 0, vocab), "ids"));
  // Rows that do not fit the table they are said to be of.
  EXPECT_TRUE(InvalidArgumentNaming(
      EmbeddingBackward(ids_desc, grad_out.desc(), grad_table.desc(), 1, vocab),
      "first_row, vocab"));
  EXPECT_TRUE(InvalidArgumentNaming(
      EmbeddingBackward(ids_desc, grad_out.desc(), grad_table.desc(), -1, vocab),
      "first_row, vocab"));
}

// An FSDP rank's gradient holds its shard's rows and sees every rank's
// tokens: each shard adds exactly its rows' tokens, in token order, so the
// shards side by side are the whole table's gradient bit for bit. Uneven
// and empty shards included (11 rows over 3 and over 4 ranks; 3 over 4).
TEST(Embedding, ShardRowsAddTheirTokensAndTogetherMakeTheWholeGradient) {
  const int hidden = 5;
  for (const auto& [vocab, world] : {std::pair{11, 3}, std::pair{11, 4}, std::pair{3, 4}}) {
    SCOPED_TRACE(absl::StrCat("vocab ", vocab, ", world ", world));
    const int tokens = 40;
    std::vector<int32_t> ids = RandomInts(tokens, 61 + vocab, 0, vocab);
    TensorDesc ids_desc = MakeTensor(ids.data(), DType::kInt32, Shape{tokens});
    FloatTensor grad_out = FloatTensor::Random(kBf16, Shape{tokens, hidden}, 62);
    const FloatTensor initial = FloatTensor::Random(kF32, Shape{vocab, hidden}, 63);
    FloatTensor whole = initial;
    ASSERT_TRUE(EmbeddingBackward(ids_desc, grad_out.desc(), whole.desc(), 0, vocab).ok());
    const int per_rank = (vocab + world - 1) / world;
    for (int rank = 0; rank < world; ++rank) {
      const int first = std::min(vocab, rank * per_rank);
      const int rows = std::min(vocab, (rank + 1) * per_rank) - first;
      std::vector<float> shard(static_cast<size_t>(rows) * hidden);
      for (int i = 0; i < rows * hidden; ++i) shard[i] = initial.Get(first * hidden + i);
      ASSERT_TRUE(EmbeddingBackward(ids_desc, grad_out.desc(),
                                    MakeTensor(shard.data(), kF32, Shape{rows, hidden}), first,
                                    vocab)
                      .ok());
      for (int i = 0; i < rows * hidden; ++i) {
        EXPECT_EQ(shard[i], static_cast<float>(whole.Get(first * hidden + i)))
            << "rank " << rank << " element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace cpu
}  // namespace tessera
