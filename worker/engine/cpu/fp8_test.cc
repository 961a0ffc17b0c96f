// FP8 codecs against the OCP spec's boundary values, plus an exhaustive
// decode/encode round trip of all 256 codes of each format.
#include "worker/engine/cpu/fp8.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace tessera {
namespace cpu {
namespace {

TEST(Fp8, E4M3BoundaryValues) {
  EXPECT_EQ(EncodeE4M3(448.0f), 0x7E);          // max normal S.1111.110
  EXPECT_EQ(EncodeE4M3(-448.0f), 0xFE);
  EXPECT_EQ(EncodeE4M3(std::ldexp(1.0f, -6)), 0x08);  // min normal
  EXPECT_EQ(EncodeE4M3(std::ldexp(1.0f, -9)), 0x01);  // min subnormal
  EXPECT_EQ(EncodeE4M3(std::ldexp(0.875f, -6)), 0x07);  // max subnormal
  EXPECT_EQ(EncodeE4M3(1.0f), 0x38);
  EXPECT_EQ(EncodeE4M3(-0.0f), 0x80);
  EXPECT_EQ(EncodeE4M3(0.0f), 0x00);
  // Half of min subnormal rounds to even (0); just above rounds up.
  EXPECT_EQ(EncodeE4M3(std::ldexp(1.0f, -10)), 0x00);
  EXPECT_EQ(EncodeE4M3(std::ldexp(1.5f, -10)), 0x01);
  // 1.0625 is halfway between 1.0 (even mantissa 000) and 1.125: rounds to 1.0.
  EXPECT_EQ(EncodeE4M3(1.0625f), 0x38);
  // 1.1875 is halfway between 1.125 (001) and 1.25 (010): rounds to 1.25.
  EXPECT_EQ(EncodeE4M3(1.1875f), 0x3A);
  // Saturation: beyond max and infinity become max.
  EXPECT_EQ(EncodeE4M3(449.0f), 0x7E);
  EXPECT_EQ(EncodeE4M3(1e6f), 0x7E);
  EXPECT_EQ(EncodeE4M3(INFINITY), 0x7E);
  EXPECT_EQ(EncodeE4M3(-INFINITY), 0xFE);
  EXPECT_EQ(EncodeE4M3(NAN), kFp8NaN);
  EXPECT_TRUE(std::isnan(DecodeE4M3(0x7F)));
  EXPECT_TRUE(std::isnan(DecodeE4M3(0xFF)));
  EXPECT_EQ(DecodeE4M3(0x7E), 448.0f);
  EXPECT_EQ(DecodeE4M3(0x01), std::ldexp(1.0f, -9));
}

TEST(Fp8, E5M2BoundaryValues) {
  EXPECT_EQ(EncodeE5M2(57344.0f), 0x7B);  // max normal S.11110.11
  EXPECT_EQ(EncodeE5M2(std::ldexp(1.0f, -14)), 0x04);  // min normal
  EXPECT_EQ(EncodeE5M2(std::ldexp(1.0f, -16)), 0x01);  // min subnormal
  EXPECT_EQ(EncodeE5M2(1.0f), 0x3C);
  EXPECT_EQ(EncodeE5M2(-2.0f), 0xC0);
  EXPECT_EQ(EncodeE5M2(1.125f), 0x3C);   // halfway 1.0/1.25 -> even (1.0)
  EXPECT_EQ(EncodeE5M2(1.375f), 0x3E);   // halfway 1.25/1.5 -> even (1.5)
  EXPECT_EQ(EncodeE5M2(60000.0f), 0x7B);
  EXPECT_EQ(EncodeE5M2(INFINITY), 0x7B);
  EXPECT_EQ(EncodeE5M2(NAN), kFp8NaN);
  EXPECT_EQ(DecodeE5M2(0x7C), INFINITY);
  EXPECT_EQ(DecodeE5M2(0xFC), -INFINITY);
  EXPECT_TRUE(std::isnan(DecodeE5M2(0x7D)));
  EXPECT_EQ(DecodeE5M2(0x7B), 57344.0f);
}

TEST(Fp8, E4M3RoundingAtTheEdgesOfTheRange) {
  // Subnormal halfway cases go to the even code: 3 * 2^-10 lies between
  // 0x01 (odd) and 0x02 (even), 5 * 2^-10 between 0x02 (even) and 0x03.
  EXPECT_EQ(EncodeE4M3(std::ldexp(3.0f, -10)), 0x02);
  EXPECT_EQ(EncodeE4M3(std::ldexp(5.0f, -10)), 0x02);
  EXPECT_EQ(EncodeE4M3(-std::ldexp(3.0f, -10)), 0x82);
  // Halfway between the largest subnormal (0x07, 7/8 * 2^-6) and the
  // smallest normal (0x08, 2^-6) rounds up into the normal range (even).
  EXPECT_EQ(EncodeE4M3(std::ldexp(15.0f, -10)), 0x08);
  // Tiny values (below half the smallest subnormal) flush to signed zero.
  EXPECT_EQ(EncodeE4M3(std::ldexp(1.0f, -11)), 0x00);
  EXPECT_EQ(EncodeE4M3(-std::ldexp(1.0f, -11)), 0x80);
  EXPECT_EQ(EncodeE4M3(std::numeric_limits<float>::denorm_min()), 0x00);
  // Rounding up carries into the next binade: 1.9375 -> 2.0.
  EXPECT_EQ(EncodeE4M3(1.9375f), 0x40);
  // Between max (448) and the NaN pattern's value (480): always max.
  EXPECT_EQ(EncodeE4M3(464.0f), 0x7E);
  EXPECT_EQ(EncodeE4M3(479.0f), 0x7E);
  EXPECT_EQ(EncodeE4M3(-464.0f), 0xFE);
  EXPECT_EQ(EncodeE4M3(std::numeric_limits<float>::max()), 0x7E);
  EXPECT_EQ(EncodeE4M3(-std::numeric_limits<float>::max()), 0xFE);
  // Just below max stays below it.
  EXPECT_EQ(EncodeE4M3(420.0f), 0x7D);  // 416 < 420 < 432 (halfway) -> 416
  // NaN of either sign encodes as 0x7F.
  EXPECT_EQ(EncodeE4M3(-NAN), kFp8NaN);
  EXPECT_EQ(DecodeE4M3(0x80), 0.0f);
  EXPECT_TRUE(std::signbit(DecodeE4M3(0x80)));
  EXPECT_EQ(DecodeE4M3(0xFE), -448.0f);
  EXPECT_EQ(DecodeE4M3(0x08), std::ldexp(1.0f, -6));
}

TEST(Fp8, E5M2RoundingAtTheEdgesOfTheRange) {
  EXPECT_EQ(EncodeE5M2(-0.0f), 0x80);
  EXPECT_TRUE(std::signbit(DecodeE5M2(0x80)));
  EXPECT_EQ(EncodeE5M2(std::ldexp(1.0f, -17)), 0x00);  // half min subnormal -> even 0
  EXPECT_EQ(EncodeE5M2(std::ldexp(3.0f, -17)), 0x02);  // between 0x01 and 0x02 -> even
  EXPECT_EQ(EncodeE5M2(std::ldexp(7.0f, -17)), 0x04);  // max subnormal/min normal tie -> 0x04
  EXPECT_EQ(EncodeE5M2(std::ldexp(3.0f, -16)), 0x03);  // max subnormal exactly
  EXPECT_EQ(EncodeE5M2(61440.0f), 0x7B);               // halfway to 65536 (inf): saturates
  EXPECT_EQ(EncodeE5M2(65536.0f), 0x7B);
  EXPECT_EQ(EncodeE5M2(-1e30f), 0xFB);
  EXPECT_EQ(EncodeE5M2(-INFINITY), 0xFB);
  EXPECT_EQ(EncodeE5M2(-NAN), kFp8NaN);
  EXPECT_EQ(EncodeE5M2(1.75f), 0x3F);
  EXPECT_EQ(EncodeE5M2(1.875f), 0x40);  // tie between 1.75 (odd) and 2.0 (even)
  EXPECT_EQ(DecodeE5M2(0x04), std::ldexp(1.0f, -14));
  EXPECT_EQ(DecodeE5M2(0x01), std::ldexp(1.0f, -16));
  EXPECT_EQ(DecodeE5M2(0xFB), -57344.0f);
  for (int c : {0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF}) EXPECT_TRUE(std::isnan(DecodeE5M2(c))) << c;
}

TEST(Fp8, DispatchAndMaxima) {
  EXPECT_EQ(Fp8Max(DType::kE4M3), 448.0f);
  EXPECT_EQ(Fp8Max(DType::kE5M2), 57344.0f);
  EXPECT_EQ(DecodeFp8(DType::kE4M3, 0x7E), Fp8Max(DType::kE4M3));
  EXPECT_EQ(DecodeFp8(DType::kE5M2, 0x7B), Fp8Max(DType::kE5M2));
  EXPECT_EQ(EncodeFp8(DType::kE4M3, 1.0f), EncodeE4M3(1.0f));
  EXPECT_EQ(EncodeFp8(DType::kE5M2, 1.0f), EncodeE5M2(1.0f));
}

TEST(Fp8, EveryCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    uint8_t code = static_cast<uint8_t>(c);
    float v4 = DecodeE4M3(code);
    if (!std::isnan(v4)) {
      EXPECT_EQ(EncodeE4M3(v4), code) << "e4m3 code " << c;
    }
    float v5 = DecodeE5M2(code);
    if (!std::isnan(v5) && !std::isinf(v5)) {
      EXPECT_EQ(EncodeE5M2(v5), code) << "e5m2 code " << c;
    }
  }
}

TEST(Fp8, EncodingIsNearestOnRandomValues) {
  uint32_t state = 12345;
  for (int i = 0; i < 20000; ++i) {
    state = state * 1664525u + 1013904223u;
    float v = std::ldexp(static_cast<float>(state >> 8) / (1 << 24) - 0.5f, (state % 30) - 14);
    for (DType d : {DType::kE4M3, DType::kE5M2}) {
      float got = DecodeFp8(d, EncodeFp8(d, v));
      // No representable value is strictly closer than the one chosen.
      for (int c = 0; c < 256; ++c) {
        float other = DecodeFp8(d, static_cast<uint8_t>(c));
        if (std::isnan(other) || std::isinf(other)) continue;
        ASSERT_LE(std::fabs(got - v), std::fabs(other - v) + 1e-30f)
            << DTypeName(d) << " value " << v << " got " << got << " but " << other << " is closer";
      }
    }
  }
}

}  // namespace
}  // namespace cpu
}  // namespace tessera
