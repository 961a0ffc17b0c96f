// GEMM against an fp64 reference over every layout, bf16 and FP8 operands,
// accumulation, and the FP8 layout rule.
#include "worker/engine/cpu/gemm.h"

#include "gtest/gtest.h"
#include "worker/engine/cpu/fp8.h"
#include "worker/engine/cpu/reference_test_util.h"

namespace tessera {
namespace cpu {
namespace {

using testing::RandomFloats;
using testing::RelativeError;
using testing::ToBf16;

// d[m][n] = sum_k A(m,k) B(k,n) for row-major a/b as stored with the flags.
std::vector<double> Reference(const std::vector<double>& a, bool ta, const std::vector<double>& b,
                              bool tb, int m, int n, int k) {
  std::vector<double> d(m * n, 0.0);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int p = 0; p < k; ++p) {
        double av = ta ? a[p * m + i] : a[i * k + p];
        double bv = tb ? b[j * k + p] : b[p * n + j];
        s += av * bv;
      }
      d[i * n + j] = s;
    }
  }
  return d;
}

class GemmBf16Test : public ::testing::TestWithParam<std::tuple<bool, bool, int, int, int>> {};

TEST_P(GemmBf16Test, MatchesFp64) {
  auto [ta, tb, m, n, k] = GetParam();
  auto a = ToBf16(RandomFloats(m * k, 1 + m));
  auto b = ToBf16(RandomFloats(k * n, 2 + n));
  std::vector<float> d(m * n, NAN);
  TensorDesc A = MakeTensor(a.data(), DType::kBFloat16, ta ? Shape{k, m} : Shape{m, k});
  TensorDesc B = MakeTensor(b.data(), DType::kBFloat16, tb ? Shape{n, k} : Shape{k, n});
  ASSERT_TRUE(Gemm(A, ta, B, tb, MakeTensor(d.data(), DType::kFloat32, Shape{m, n}), false).ok());
  auto want = Reference(testing::FromBf16(a), ta, testing::FromBf16(b), tb, m, n, k);
  EXPECT_LT(RelativeError(d, want), 1e-6);  // bf16 products are exact in fp32
  // Accumulate adds onto existing values; bf16 output rounds.
  std::vector<float> base = RandomFloats(m * n, 99);
  std::vector<float> acc = base;
  ASSERT_TRUE(Gemm(A, ta, B, tb, MakeTensor(acc.data(), DType::kFloat32, Shape{m, n}), true).ok());
  for (int i = 0; i < m * n; ++i) want[i] += base[i];
  EXPECT_LT(RelativeError(acc, want), 1e-6);
  std::vector<uint16_t> db(m * n, 0xFFFF);
  ASSERT_TRUE(Gemm(A, ta, B, tb, MakeTensor(db.data(), DType::kBFloat16, Shape{m, n}), false).ok());
  EXPECT_LT(RelativeError(testing::FromBf16(db), Reference(testing::FromBf16(a), ta,
                                                            testing::FromBf16(b), tb, m, n, k)),
            8e-3);
}

INSTANTIATE_TEST_SUITE_P(Layouts, GemmBf16Test,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool(),
                                            ::testing::Values(1, 17), ::testing::Values(5, 32),
                                            ::testing::Values(3, 64)));

TEST(GemmFp8, ScaledProductsForEveryFormatPair) {
  const int m = 9, n = 11, k = 40;
  for (auto [da, db] : {std::pair{DType::kE4M3, DType::kE4M3}, std::pair{DType::kE5M2, DType::kE4M3},
                        std::pair{DType::kE4M3, DType::kE5M2}}) {
    std::vector<float> af = RandomFloats(m * k, 5, 100.f), bf = RandomFloats(n * k, 6, 100.f);
    std::vector<uint8_t> a(m * k), b(n * k);
    for (int i = 0; i < m * k; ++i) a[i] = EncodeFp8(da, af[i]);
    for (int i = 0; i < n * k; ++i) b[i] = EncodeFp8(db, bf[i]);
    float sa = 0.25f, sb = 0.125f;
    TensorDesc A = MakeTensor(a.data(), da, Shape{m, k});
    A.scale_inv = &sa;
    TensorDesc B = MakeTensor(b.data(), db, Shape{n, k});
    B.scale_inv = &sb;
    std::vector<float> d(m * n, NAN);
    ASSERT_TRUE(Gemm(A, false, B, true, MakeTensor(d.data(), DType::kFloat32, Shape{m, n}), false).ok());
    std::vector<double> ad(m * k), bd(n * k);
    for (int i = 0; i < m * k; ++i) ad[i] = DecodeFp8(da, a[i]) * sa;
    for (int i = 0; i < n * k; ++i) bd[i] = DecodeFp8(db, b[i]) * sb;
    EXPECT_LT(RelativeError(d, Reference(ad, false, bd, true, m, n, k)), 1e-6);
  }
}

TEST(GemmFp8, RejectsLayoutsCublasLtCannotRun) {
  std::vector<uint8_t> a(16, 0x38), b(16, 0x38);
  std::vector<float> d(16);
  float s = 1.f;
  TensorDesc A = MakeTensor(a.data(), DType::kE4M3, Shape{4, 4});
  A.scale_inv = &s;
  TensorDesc B = A;
  B.data = b.data();
  TensorDesc D = MakeTensor(d.data(), DType::kFloat32, Shape{4, 4});
  EXPECT_EQ(Gemm(A, false, B, false, D, false).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Gemm(A, true, B, true, D, false).code(), absl::StatusCode::kInvalidArgument);
  TensorDesc E = A;
  E.dtype = DType::kE5M2;
  TensorDesc F = B;
  F.dtype = DType::kE5M2;
  EXPECT_EQ(Gemm(E, false, F, true, D, false).code(), absl::StatusCode::kInvalidArgument);
  std::vector<uint16_t> db(16);
  EXPECT_EQ(Gemm(A, false, B, true, MakeTensor(db.data(), DType::kBFloat16, Shape{4, 4}), true).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Gemm(A, false, B, true, MakeTensor(d.data(), DType::kFloat32, Shape{4, 3}), false).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cpu
}  // namespace tessera
