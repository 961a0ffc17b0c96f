// GEMM against an fp64 reference over every layout, bf16 and FP8 operands,
// accumulation, the FP8 layout rule, and GemmAdd (an out-of-place addend).
#include "worker/engine/cpu/gemm.h"

#include <cmath>
#include <cstring>
#include <vector>

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

TEST(GemmFp8, AccumulatesIntoFp32AndRoundsBf16Output) {
  const int m = 6, n = 10, k = 48;
  std::vector<float> af = RandomFloats(m * k, 15, 300.f), bf = RandomFloats(n * k, 16, 20.f);
  std::vector<uint8_t> a(m * k), b(n * k);
  for (int i = 0; i < m * k; ++i) a[i] = EncodeE4M3(af[i]);
  for (int i = 0; i < n * k; ++i) b[i] = EncodeE5M2(bf[i]);
  float sa = 1.0f / 256, sb = 3.0f;
  TensorDesc A = MakeTensor(a.data(), DType::kE4M3, Shape{m, k});
  A.scale_inv = &sa;
  TensorDesc B = MakeTensor(b.data(), DType::kE5M2, Shape{n, k});
  B.scale_inv = &sb;
  std::vector<double> ad(m * k), bd(n * k);
  for (int i = 0; i < m * k; ++i) ad[i] = DecodeE4M3(a[i]) * static_cast<double>(sa);
  for (int i = 0; i < n * k; ++i) bd[i] = DecodeE5M2(b[i]) * static_cast<double>(sb);
  const std::vector<double> product = Reference(ad, false, bd, true, m, n, k);
  std::vector<float> base = RandomFloats(m * n, 17, 50.f), acc = base;
  ASSERT_TRUE(
      Gemm(A, false, B, true, MakeTensor(acc.data(), DType::kFloat32, Shape{m, n}), true).ok());
  std::vector<double> want(m * n);
  for (int i = 0; i < m * n; ++i) want[i] = product[i] + base[i];
  EXPECT_LT(RelativeError(acc, want), 1e-6);
  std::vector<uint16_t> d16(m * n);
  testing::Poison(d16);
  ASSERT_TRUE(
      Gemm(A, false, B, true, MakeTensor(d16.data(), DType::kBFloat16, Shape{m, n}), false).ok());
  // Each output is the fp32 result rounded once to bf16: within half a bf16
  // ulp (at most 2^-8 relative) of the exact value, plus fp32 summation error.
  for (int i = 0; i < m * n; ++i) {
    EXPECT_NEAR(Bf16ToFloat(d16[i]), product[i], std::fabs(product[i]) * (1.0 / 256 + 1e-5) + 1e-3)
        << i;
  }
}

TEST(GemmAdd, IsGemmAccumulatingOntoACopyOfTheAddend) {
  // d = a·b + c with c elsewhere equals accumulating into d preloaded with c,
  // bit for bit; c may be d itself; the addend is left as it was.
  const int m = 7, n = 12, k = 40;
  auto a = testing::RandomBf16(m * k, 31), b = testing::RandomBf16(n * k, 32);
  TensorDesc A = MakeTensor(a.data(), DType::kBFloat16, Shape{m, k});
  TensorDesc B = MakeTensor(b.data(), DType::kBFloat16, Shape{n, k});
  const std::vector<float> c = RandomFloats(m * n, 33, 10.f);
  std::vector<float> addend = c, d(m * n), in_place = c, want = c;
  testing::Poison(d);
  ASSERT_TRUE(GemmAdd(A, false, B, true, MakeTensor(addend.data(), DType::kFloat32, Shape{m, n}),
                      MakeTensor(d.data(), DType::kFloat32, Shape{m, n}))
                  .ok());
  ASSERT_TRUE(
      Gemm(A, false, B, true, MakeTensor(want.data(), DType::kFloat32, Shape{m, n}), true).ok());
  EXPECT_EQ(std::memcmp(d.data(), want.data(), d.size() * sizeof(float)), 0);
  EXPECT_EQ(addend, c);
  TensorDesc self = MakeTensor(in_place.data(), DType::kFloat32, Shape{m, n});
  ASSERT_TRUE(GemmAdd(A, false, B, true, self, self).ok());
  EXPECT_EQ(std::memcmp(in_place.data(), want.data(), d.size() * sizeof(float)), 0);
}

TEST(GemmAdd, RefusesAnAddendItCannotUseAndLeavesTheOutputAlone) {
  const int m = 4, n = 8, k = 16;
  auto a = testing::RandomBf16(m * k, 34), b = testing::RandomBf16(n * k, 35);
  TensorDesc A = MakeTensor(a.data(), DType::kBFloat16, Shape{m, k});
  TensorDesc B = MakeTensor(b.data(), DType::kBFloat16, Shape{n, k});
  std::vector<float> c(m * n, 1.f), d(2 * m * n, 5.f);
  std::vector<uint16_t> c16(m * n);
  const TensorDesc D = MakeTensor(d.data(), DType::kFloat32, Shape{m, n});
  auto refused = [&](const TensorDesc& addend, const TensorDesc& out, const char* says) {
    absl::Status s = GemmAdd(A, false, B, true, addend, out);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << says;
    EXPECT_NE(s.message().find(says), std::string::npos) << s;
  };
  refused(MakeTensor(c16.data(), DType::kBFloat16, Shape{m, n}), D, "c");
  refused(MakeTensor(c.data(), DType::kFloat32, Shape{m, n / 2}), D, "c");
  refused(MakeTensor(d.data() + 1, DType::kFloat32, Shape{m, n}), D, "overlaps");
  refused(MakeTensor(c.data(), DType::kFloat32, Shape{m, n}),
          MakeTensor(c16.data(), DType::kBFloat16, Shape{m, n}), "d");
  // A bad operand is found before the addend is copied into d.
  refused(MakeTensor(c.data(), DType::kFloat32, Shape{m, n}),
          MakeTensor(d.data(), DType::kFloat32, Shape{m + 1, n}), "d");
  for (float v : d) EXPECT_EQ(v, 5.f);
}

TEST(Gemm, RepeatedCallsAreBitIdentical) {
  // Large enough for OpenBLAS to block the product; same inputs must give
  // the same bits every time (the CPU engine is the deterministic reference).
  const int m = 96, n = 80, k = 300;
  auto a = testing::RandomBf16(m * k, 21), b = testing::RandomBf16(n * k, 22);
  TensorDesc A = MakeTensor(a.data(), DType::kBFloat16, Shape{m, k});
  TensorDesc B = MakeTensor(b.data(), DType::kBFloat16, Shape{n, k});
  std::vector<float> first(m * n), again(m * n);
  testing::Poison(first);
  ASSERT_TRUE(
      Gemm(A, false, B, true, MakeTensor(first.data(), DType::kFloat32, Shape{m, n}), false).ok());
  for (int rep = 0; rep < 3; ++rep) {
    testing::Poison(again);
    ASSERT_TRUE(
        Gemm(A, false, B, true, MakeTensor(again.data(), DType::kFloat32, Shape{m, n}), false)
            .ok());
    ASSERT_EQ(std::memcmp(first.data(), again.data(), first.size() * sizeof(float)), 0) << rep;
  }
}

TEST(Gemm, EmptyInnerDimensionWritesZerosOrKeepsD) {
  std::vector<uint16_t> a(1), b(1);
  std::vector<float> d = RandomFloats(12, 23);
  const std::vector<float> before = d;
  TensorDesc A = MakeTensor(a.data(), DType::kBFloat16, Shape{3, 0});
  TensorDesc B = MakeTensor(b.data(), DType::kBFloat16, Shape{0, 4});
  ASSERT_TRUE(
      Gemm(A, false, B, false, MakeTensor(d.data(), DType::kFloat32, Shape{3, 4}), true).ok());
  EXPECT_EQ(d, before);
  ASSERT_TRUE(
      Gemm(A, false, B, false, MakeTensor(d.data(), DType::kFloat32, Shape{3, 4}), false).ok());
  for (float v : d) EXPECT_EQ(v, 0.0f);
}

TEST(Gemm, RejectsMixedOperandsAndBadShapes) {
  std::vector<uint16_t> a16(12, 0x3f80), b16(12, 0x3f80);
  std::vector<uint8_t> b8(12, 0x38);
  std::vector<float> d(9);
  float s = 1.f;
  TensorDesc A = MakeTensor(a16.data(), DType::kBFloat16, Shape{3, 4});
  TensorDesc B8 = MakeTensor(b8.data(), DType::kE4M3, Shape{3, 4});
  B8.scale_inv = &s;
  TensorDesc D = MakeTensor(d.data(), DType::kFloat32, Shape{3, 3});
  EXPECT_EQ(Gemm(A, false, B8, true, D, false).code(), absl::StatusCode::kInvalidArgument);
  // Inner dimensions 4 vs 3.
  TensorDesc B = MakeTensor(b16.data(), DType::kBFloat16, Shape{3, 4});
  EXPECT_EQ(Gemm(A, false, B, false, D, false).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Gemm(A, false, B, true, D, false).ok());
  // fp32 operands are not a GEMM input dtype.
  std::vector<float> af(12, 1.f);
  EXPECT_EQ(
      Gemm(MakeTensor(af.data(), DType::kFloat32, Shape{3, 4}), false, B, true, D, false).code(),
      absl::StatusCode::kInvalidArgument);
  // FP8 without scale_inv.
  TensorDesc A8 = MakeTensor(b8.data(), DType::kE4M3, Shape{3, 4});
  EXPECT_EQ(Gemm(A8, false, B8, true, D, false).code(), absl::StatusCode::kInvalidArgument);
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
