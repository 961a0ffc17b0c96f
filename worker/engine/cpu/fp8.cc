// OCP FP8 E4M3 / E5M2 codecs (see fp8.h).
#include "worker/engine/cpu/fp8.h"

#include <array>
#include <cmath>

namespace tessera {
namespace cpu {
namespace {

struct Format {
  int exponent_bits;
  int mantissa_bits;
  int bias;
  float max;
};

constexpr Format kE4M3{4, 3, 7, kE4M3Max};
constexpr Format kE5M2{5, 2, 15, kE5M2Max};

uint8_t Encode(const Format& f, float value) {
  if (std::isnan(value)) return kFp8NaN;
  const uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  float a = std::fabs(value);
  if (a == 0.0f) return sign;
  const int min_normal_exp = 1 - f.bias;
  int exp;
  std::frexp(a, &exp);  // a = m * 2^exp, m in [0.5, 1)
  int e = exp - 1;      // a in [2^e, 2^(e+1))
  if (e < min_normal_exp) e = min_normal_exp;
  // Quantum of the binade (or of the subnormal range). Scaling by a power of
  // two is exact, and nearbyint rounds half to even.
  float quantum = std::ldexp(1.0f, e - f.mantissa_bits);
  float rounded = std::nearbyint(a / quantum) * quantum;
  if (!(rounded <= f.max)) rounded = f.max;  // satfinite (inf included)
  if (rounded == 0.0f) return sign;
  std::frexp(rounded, &exp);
  e = exp - 1;
  uint32_t exponent_field, mantissa_field;
  if (e < min_normal_exp) {  // subnormal
    exponent_field = 0;
    mantissa_field = static_cast<uint32_t>(std::ldexp(rounded, f.mantissa_bits - min_normal_exp));
  } else {
    exponent_field = static_cast<uint32_t>(e + f.bias);
    float significand = std::ldexp(rounded, -e) - 1.0f;  // in [0, 1)
    mantissa_field = static_cast<uint32_t>(std::ldexp(significand, f.mantissa_bits));
  }
  return sign | static_cast<uint8_t>((exponent_field << f.mantissa_bits) | mantissa_field);
}

float Decode(const Format& f, uint8_t code) {
  const bool negative = (code & 0x80) != 0;
  const uint32_t exponent_field = (code >> f.mantissa_bits) & ((1u << f.exponent_bits) - 1);
  const uint32_t mantissa_field = code & ((1u << f.mantissa_bits) - 1);
  const uint32_t max_exponent_field = (1u << f.exponent_bits) - 1;
  float value;
  if (f.exponent_bits == 4 && exponent_field == max_exponent_field &&
      mantissa_field == (1u << f.mantissa_bits) - 1) {
    return std::nanf("");
  }
  if (f.exponent_bits == 5 && exponent_field == max_exponent_field) {
    if (mantissa_field != 0) return std::nanf("");
    return negative ? -INFINITY : INFINITY;
  }
  if (exponent_field == 0) {
    value = std::ldexp(static_cast<float>(mantissa_field), 1 - f.bias - f.mantissa_bits);
  } else {
    value = std::ldexp(1.0f + std::ldexp(static_cast<float>(mantissa_field), -f.mantissa_bits),
                       static_cast<int>(exponent_field) - f.bias);
  }
  return negative ? -value : value;
}

template <const Format& F>
const std::array<float, 256>& Table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t;
    for (int c = 0; c < 256; ++c) t[c] = Decode(F, static_cast<uint8_t>(c));
    return t;
  }();
  return table;
}

}  // namespace

uint8_t EncodeE4M3(float value) { return Encode(kE4M3, value); }
uint8_t EncodeE5M2(float value) { return Encode(kE5M2, value); }
float DecodeE4M3(uint8_t code) { return Table<kE4M3>()[code]; }
float DecodeE5M2(uint8_t code) { return Table<kE5M2>()[code]; }

uint8_t EncodeFp8(DType dtype, float value) {
  return dtype == DType::kE5M2 ? EncodeE5M2(value) : EncodeE4M3(value);
}

float DecodeFp8(DType dtype, uint8_t code) {
  return dtype == DType::kE5M2 ? DecodeE5M2(code) : DecodeE4M3(code);
}

float Fp8Max(DType dtype) { return dtype == DType::kE5M2 ? kE5M2Max : kE4M3Max; }

}  // namespace cpu
}  // namespace tessera
