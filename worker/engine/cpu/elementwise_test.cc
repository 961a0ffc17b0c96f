// Add and Cast against fp64 references over every fp32/bf16 dtype
// combination and several sizes (including 1 and odd ones): results within
// one rounding of the output dtype, exact where the spec says so (fp32
// output of Add, bf16 -> fp32 casts, round-to-nearest-even ties), aliasing,
// determinism, and argument errors that name the argument.
#include "worker/engine/cpu/elementwise.h"

#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

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

constexpr DType kF32 = DType::kFloat32;
constexpr DType kBf16 = DType::kBFloat16;

// Relative tolerance of one rounding to `dtype` (bf16 allows for the double
// rounding fp64 -> fp32 -> bf16 that the fp64 reference skips).
double RoundingTolerance(DType dtype) { return dtype == kF32 ? 6e-8 : 1.0 / 256; }

class AddTest : public ::testing::TestWithParam<std::tuple<DType, DType, DType, int>> {};

TEST_P(AddTest, MatchesFp64SumRoundedToTheOutputDtype) {
  auto [da, db, dout, n] = GetParam();
  FloatTensor a = FloatTensor::Random(da, Shape{n}, 100 + n, 4.0f);
  FloatTensor b = FloatTensor::Random(db, Shape{n}, 200 + n, 4.0f);
  FloatTensor out = FloatTensor::Poisoned(dout, Shape{n});
  ASSERT_TRUE(Add(a.desc(), b.desc(), out.desc()).ok());
  std::vector<double> want(n);
  for (int i = 0; i < n; ++i) want[i] = a.Get(i) + b.Get(i);
  EXPECT_TRUE(AllClose(out.values(), want, RoundingTolerance(dout), 0.0));
  if (dout == kF32) {
    // The fp64 sum of two floats rounded once to fp32 is exactly fp32 addition.
    for (int i = 0; i < n; ++i) EXPECT_EQ(out.Get(i), static_cast<float>(want[i])) << i;
  }

  // Deterministic, and out may alias a or b.
  FloatTensor again = FloatTensor::Poisoned(dout, Shape{n});
  ASSERT_TRUE(Add(a.desc(), b.desc(), again.desc()).ok());
  EXPECT_TRUE(again.BitEqual(out));
  if (da == dout) {
    FloatTensor in_place = a;
    ASSERT_TRUE(Add(in_place.desc(), b.desc(), in_place.desc()).ok());
    EXPECT_TRUE(in_place.BitEqual(out));
  }
  if (db == dout) {
    FloatTensor in_place = b;
    ASSERT_TRUE(Add(a.desc(), in_place.desc(), in_place.desc()).ok());
    EXPECT_TRUE(in_place.BitEqual(out));
  }
}

std::string AddName(const ::testing::TestParamInfo<AddTest::ParamType>& info) {
  auto [da, db, dout, n] = info.param;
  return std::string(testing::Name(da)) + "_" + testing::Name(db) + "_to_" + testing::Name(dout) +
         "_n" + std::to_string(n);
}

INSTANTIATE_TEST_SUITE_P(DTypesAndSizes, AddTest,
                         ::testing::Combine(::testing::Values(kF32, kBf16),
                                            ::testing::Values(kF32, kBf16),
                                            ::testing::Values(kF32, kBf16),
                                            ::testing::Values(1, 37, 1000)),
                         AddName);

TEST(Add, ShapesMayDifferWhenElementCountsMatch) {
  FloatTensor a = FloatTensor::Random(kF32, Shape{3, 4}, 1);
  FloatTensor b = FloatTensor::Random(kBf16, Shape{12}, 2);
  FloatTensor out = FloatTensor::Poisoned(kF32, Shape{2, 6});
  ASSERT_TRUE(Add(a.desc(), b.desc(), out.desc()).ok());
  for (int i = 0; i < 12; ++i) EXPECT_EQ(out.Get(i), static_cast<float>(a.Get(i) + b.Get(i)));
}

TEST(Add, RejectsBadArgumentsNamingThem) {
  FloatTensor a = FloatTensor::Random(kF32, Shape{5}, 3);
  FloatTensor b = FloatTensor::Random(kF32, Shape{5}, 4);
  FloatTensor out = FloatTensor::Poisoned(kF32, Shape{5});
  std::vector<int32_t> ints(5, 7);
  TensorDesc int_desc = MakeTensor(ints.data(), DType::kInt32, Shape{5});
  EXPECT_TRUE(InvalidArgumentNaming(Add(int_desc, b.desc(), out.desc()), "a"));
  EXPECT_TRUE(InvalidArgumentNaming(Add(a.desc(), int_desc, out.desc()), "b"));
  std::vector<uint8_t> fp8(5);
  EXPECT_TRUE(InvalidArgumentNaming(
      Add(a.desc(), b.desc(), MakeTensor(fp8.data(), DType::kE4M3, Shape{5})), "out"));
  EXPECT_TRUE(InvalidArgumentNaming(Add(a.desc(Shape{4}), b.desc(), out.desc()), "a"));
  EXPECT_TRUE(InvalidArgumentNaming(Add(a.desc(), b.desc(Shape{6}), out.desc()), "b"));
  EXPECT_TRUE(InvalidArgumentNaming(
      Add(a.desc(), MakeTensor(nullptr, kF32, Shape{5}), out.desc()), "b"));
  // Nothing was written on any failure.
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(std::isnan(out.Get(i)));
}

class CastTest : public ::testing::TestWithParam<std::tuple<DType, DType, int>> {};

TEST_P(CastTest, RoundsToNearestEvenOrCopiesExactly) {
  auto [din, dout, n] = GetParam();
  FloatTensor in = FloatTensor::Random(din, Shape{n}, 300 + n, 50.0f);
  FloatTensor out = FloatTensor::Poisoned(dout, Shape{n});
  ASSERT_TRUE(Cast(in.desc(), out.desc()).ok());
  const std::vector<double> want = in.values();
  if (dout == kBf16 && din == kF32) {
    EXPECT_TRUE(AllClose(out.values(), want, 1.0 / 256, 0.0));
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(out.Get(i), Bf16ToFloat(FloatToBf16(static_cast<float>(want[i])))) << i;
    }
  } else {
    EXPECT_EQ(out.values(), want);  // widening or same dtype: exact
  }
  FloatTensor again = FloatTensor::Poisoned(dout, Shape{n});
  ASSERT_TRUE(Cast(in.desc(), again.desc()).ok());
  EXPECT_TRUE(again.BitEqual(out));
}

std::string CastName(const ::testing::TestParamInfo<CastTest::ParamType>& info) {
  auto [din, dout, n] = info.param;
  return std::string(testing::Name(din)) + "_to_" + testing::Name(dout) + "_n" + std::to_string(n);
}

INSTANTIATE_TEST_SUITE_P(DTypesAndSizes, CastTest,
                         ::testing::Combine(::testing::Values(kF32, kBf16),
                                            ::testing::Values(kF32, kBf16),
                                            ::testing::Values(1, 37, 1000)),
                         CastName);

TEST(Cast, TiesGoToEvenAndSpecialValuesSurvive) {
  const float one = 1.0f, ulp = 1.0f / 128;  // bf16 spacing just above 1
  std::vector<float> values = {one + ulp / 2,      // tie between 1 and 1+ulp: even is 1
                               one + 3 * ulp / 2,  // tie between 1+ulp and 1+2ulp: even is 1+2ulp
                               -(one + ulp / 2),  INFINITY, -INFINITY, -0.0f, NAN,
                               // past the midpoint above bf16's largest finite value: inf
                               std::numeric_limits<float>::max()};
  const int n = static_cast<int>(values.size());
  FloatTensor in = FloatTensor::Of(kF32, Shape{n}, values);
  FloatTensor out = FloatTensor::Poisoned(kBf16, Shape{n});
  ASSERT_TRUE(Cast(in.desc(), out.desc()).ok());
  EXPECT_EQ(out.Get(0), 1.0);
  EXPECT_EQ(out.Get(1), 1.0 + 2 * ulp);
  EXPECT_EQ(out.Get(2), -1.0);
  EXPECT_EQ(out.Get(3), INFINITY);
  EXPECT_EQ(out.Get(4), -INFINITY);
  EXPECT_EQ(out.Get(5), 0.0);
  EXPECT_TRUE(std::signbit(out.Get(5)));
  EXPECT_TRUE(std::isnan(out.Get(6)));
  EXPECT_EQ(out.Get(7), INFINITY);
}

TEST(Cast, RejectsBadArgumentsNamingThem) {
  FloatTensor in = FloatTensor::Random(kF32, Shape{6}, 5);
  FloatTensor out = FloatTensor::Poisoned(kBf16, Shape{6});
  std::vector<int32_t> ints(6, 1);
  EXPECT_TRUE(InvalidArgumentNaming(
      Cast(MakeTensor(ints.data(), DType::kInt32, Shape{6}), out.desc()), "in"));
  std::vector<uint8_t> fp8(6);
  EXPECT_TRUE(InvalidArgumentNaming(
      Cast(in.desc(), MakeTensor(fp8.data(), DType::kE5M2, Shape{6})), "out"));
  EXPECT_TRUE(InvalidArgumentNaming(Cast(in.desc(Shape{7}), out.desc()), "in"));
  EXPECT_TRUE(InvalidArgumentNaming(Cast(in.desc(), MakeTensor(nullptr, kBf16, Shape{6})), "out"));
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(std::isnan(out.Get(i)));
}

}  // namespace
}  // namespace cpu
}  // namespace tessera
