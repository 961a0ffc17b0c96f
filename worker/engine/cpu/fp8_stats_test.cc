// Fp8Stats on values placed at the edges of each format: what saturates
// (encoded at the largest magnitude, by rounding, beyond it, or infinite),
// what underflows (nonzero but encoded as zero, the round-half-to-even tie
// at half the smallest subnormal included), and what is neither (zero, NaN,
// the smallest subnormal); the scale applied first; fp32 and bf16 inputs;
// counts added to what they held; and bad arguments.
#include "worker/engine/cpu/fp8_stats.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/cpu/fp8.h"
#include "worker/engine/cpu/reference_test_util.h"

namespace tessera {
namespace cpu {
namespace {

using testing::ToBf16;

struct Counts {
  int64_t saturated = 0, underflowed = 0;
};

Counts CountStats(const std::vector<float>& values, DType format, float scale, DType in_dtype) {
  std::vector<float> x = values;
  std::vector<uint16_t> xb = ToBf16(x);
  const Shape shape{static_cast<int64_t>(x.size())};
  TensorDesc in = in_dtype == DType::kFloat32 ? MakeTensor(x.data(), in_dtype, shape)
                                               : MakeTensor(xb.data(), in_dtype, shape);
  int64_t counts[2] = {100, 200};  // added to, not overwritten
  EXPECT_TRUE(Fp8Stats(in, format, &scale, counts).ok());
  return {counts[0] - 100, counts[1] - 200};
}

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(Fp8Stats, E4M3EdgesCountExactly) {
  const float smallest = std::ldexp(1.f, -9);  // e4m3's smallest subnormal
  const std::vector<float> values = {
      448.f, -448.f, 500.f, 440.f,  // saturate: at, beyond, rounds up to 448 (spacing 32)
      -kInf,                        // saturates (satfinite)
      400.f, 416.f,                 // neither: below the top code
      smallest / 2,                 // the tie rounds to even: 0, underflows
      -smallest / 4, 1e-30f,        // underflow
      smallest, smallest * 0.51f,   // neither: the smallest subnormal, and rounding up to it
      0.f, -0.f, kNaN};             // neither
  for (DType in : {DType::kFloat32, DType::kBFloat16}) {
    const Counts c = CountStats(values, DType::kE4M3, 1.f, in);
    EXPECT_EQ(c.saturated, 5) << DTypeName(in);
    EXPECT_EQ(c.underflowed, 3) << DTypeName(in);
  }
}

TEST(Fp8Stats, E5M2EdgesCountExactly) {
  const float smallest = std::ldexp(1.f, -16);  // e5m2's smallest subnormal
  const std::vector<float> values = {57344.f, 70000.f, kInf, -1e30f,  // saturate
                                     49152.f,                        // neither: next below
                                     smallest / 2, 1e-9f,            // underflow
                                     smallest, 0.f, kNaN};           // neither
  const Counts c = CountStats(values, DType::kE5M2, 1.f, DType::kFloat32);
  EXPECT_EQ(c.saturated, 4);
  EXPECT_EQ(c.underflowed, 2);
}

// The counts are of in * scale, as Quantize encodes it.
TEST(Fp8Stats, TheScaleIsAppliedFirst) {
  const std::vector<float> values = {1.f, 0.5f, 1e-3f, 2e-6f};
  Counts c = CountStats(values, DType::kE4M3, 1000.f, DType::kFloat32);  // 1000, 500, 1, 0.002
  EXPECT_EQ(c.saturated, 2);
  EXPECT_EQ(c.underflowed, 0);
  c = CountStats(values, DType::kE4M3, 1e-3f, DType::kFloat32);  // 1e-3, 5e-4, 1e-6, 2e-9
  EXPECT_EQ(c.saturated, 0);
  // 1e-3 is 0.51 of the smallest subnormal (2^-9) and rounds up to it; the
  // other three round to 0.
  EXPECT_EQ(c.underflowed, 3);
}

// Every element agrees with its own encoding, on random values spread over
// many octaves.
TEST(Fp8Stats, AgreesWithTheEncoderOnRandomValues) {
  std::vector<float> x(20000);
  uint32_t state = 12345;
  for (float& v : x) {
    state = state * 1664525u + 1013904223u;
    const float mantissa = 1.f + (state >> 9) / float(1 << 23);
    state = state * 1664525u + 1013904223u;
    v = std::ldexp(mantissa, static_cast<int>(state >> 26) - 30) * ((state & 1) ? -1.f : 1.f);
  }
  for (DType format : {DType::kE4M3, DType::kE5M2}) {
    const float scale = 3.f;
    int64_t want_saturated = 0, want_underflowed = 0;
    const uint8_t max_code = EncodeFp8(format, Fp8Max(format));
    for (float v : x) {
      const uint8_t m = EncodeFp8(format, v * scale) & 0x7F;
      want_saturated += m == max_code;
      want_underflowed += m == 0;
    }
    const Counts c = CountStats(x, format, scale, DType::kFloat32);
    EXPECT_EQ(c.saturated, want_saturated) << DTypeName(format);
    EXPECT_EQ(c.underflowed, want_underflowed) << DTypeName(format);
    EXPECT_GT(want_saturated, 0);
    EXPECT_GT(want_underflowed, 0);
  }
}

TEST(Fp8Stats, BadArgumentsAreInvalidArgumentNamingThem) {
  float x[2] = {1.f, 2.f}, scale = 1.f;
  int64_t counts[2] = {0, 0};
  const TensorDesc in = MakeTensor(x, DType::kFloat32, Shape{2});
  EXPECT_NE(Fp8Stats(in, DType::kBFloat16, &scale, counts).message().find("format"),
            std::string::npos);
  EXPECT_NE(Fp8Stats(in, DType::kE4M3, nullptr, counts).message().find("scale"),
            std::string::npos);
  EXPECT_NE(Fp8Stats(in, DType::kE4M3, &scale, nullptr).message().find("counts"),
            std::string::npos);
  uint8_t codes[2] = {0, 0};
  EXPECT_NE(Fp8Stats(MakeTensor(codes, DType::kE4M3, Shape{2}), DType::kE4M3, &scale, counts)
                .message()
                .find("in"),
            std::string::npos);
  EXPECT_EQ(Fp8Stats(in, DType::kE4M3, &scale, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(counts[0] + counts[1], 0);  // nothing counted by a refused call
}

}  // namespace
}  // namespace cpu
}  // namespace tessera
