// FP8 encode/decode on the device, bit-identical to the CPU reference
// (worker/engine/cpu/fp8.h): round to nearest even into subnormals, satfinite
// for out-of-range and infinite values, NaN -> 0x7F, for E4M3 and E5M2.
// Encoding uses Hopper's converter (cvt.rn.satfinite.{e4m3,e5m2}x2.f32, two
// values per instruction), which rounds and saturates exactly as the
// reference; only NaN is mapped explicitly, so that it is 0x7F whatever its
// sign. The portable software encoder remains for other targets and as the
// written-out definition.
#ifndef TESSERA_WORKER_ENGINE_CUDA_FP8_DEVICE_CUH_
#define TESSERA_WORKER_ENGINE_CUDA_FP8_DEVICE_CUH_

#include <cstdint>

namespace tessera {
namespace cuda {

template <int kMantissaBits, int kBias>
__device__ __forceinline__ uint8_t EncodeFp8Device(float value, float max_value) {
  if (isnan(value)) return 0x7F;
  const uint8_t sign = signbit(value) ? 0x80 : 0x00;
  float a = fabsf(value);
  if (a == 0.0f) return sign;
  const int min_normal_exp = 1 - kBias;
  int exp;
  frexpf(a, &exp);
  int e = max(exp - 1, min_normal_exp);
  const float quantum = ldexpf(1.0f, e - kMantissaBits);
  float rounded = rintf(a / quantum) * quantum;
  if (!(rounded <= max_value)) rounded = max_value;
  if (rounded == 0.0f) return sign;
  frexpf(rounded, &exp);
  e = exp - 1;
  uint32_t exponent_field, mantissa_field;
  if (e < min_normal_exp) {
    exponent_field = 0;
    mantissa_field = static_cast<uint32_t>(ldexpf(rounded, kMantissaBits - min_normal_exp));
  } else {
    exponent_field = static_cast<uint32_t>(e + kBias);
    mantissa_field = static_cast<uint32_t>(ldexpf(ldexpf(rounded, -e) - 1.0f, kMantissaBits));
  }
  return sign | static_cast<uint8_t>((exponent_field << kMantissaBits) | mantissa_field);
}

// Two values in one converter instruction: `lo` lands in the low byte.
template <bool kE5M2>
__device__ __forceinline__ uint16_t EncodeFp8x2(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint16_t codes;
  if constexpr (kE5M2) {
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(codes) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(codes) : "f"(hi), "f"(lo));
  }
  if (isnan(lo)) codes = (codes & 0xFF00u) | 0x7Fu;
  if (isnan(hi)) codes = (codes & 0x00FFu) | 0x7F00u;
  return codes;
#else
  const uint8_t l = kE5M2 ? EncodeFp8Device<2, 15>(lo, 57344.0f) : EncodeFp8Device<3, 7>(lo, 448.0f);
  const uint8_t h = kE5M2 ? EncodeFp8Device<2, 15>(hi, 57344.0f) : EncodeFp8Device<3, 7>(hi, 448.0f);
  return static_cast<uint16_t>(l | (h << 8));
#endif
}

__device__ __forceinline__ uint8_t EncodeE4M3(float v) {
  return static_cast<uint8_t>(EncodeFp8x2<false>(v, 0.0f));
}
__device__ __forceinline__ uint8_t EncodeE5M2(float v) {
  return static_cast<uint8_t>(EncodeFp8x2<true>(v, 0.0f));
}

// Four values (v[0] in the low byte) encoded into one word.
template <bool kE5M2>
__device__ __forceinline__ uint32_t EncodeFp8x4(float v0, float v1, float v2, float v3) {
  return static_cast<uint32_t>(EncodeFp8x2<kE5M2>(v0, v1)) |
         static_cast<uint32_t>(EncodeFp8x2<kE5M2>(v2, v3)) << 16;
}

template <int kExponentBits, int kMantissaBits, int kBias>
__device__ __forceinline__ float DecodeFp8Device(uint8_t code) {
  const bool negative = (code & 0x80) != 0;
  const uint32_t exponent_field = (code >> kMantissaBits) & ((1u << kExponentBits) - 1);
  const uint32_t mantissa_field = code & ((1u << kMantissaBits) - 1);
  const uint32_t max_field = (1u << kExponentBits) - 1;
  if (kExponentBits == 4 && exponent_field == max_field && mantissa_field == (1u << kMantissaBits) - 1) {
    return __int_as_float(0x7fc00000);
  }
  if (kExponentBits == 5 && exponent_field == max_field) {
    if (mantissa_field != 0) return __int_as_float(0x7fc00000);
    return negative ? -__int_as_float(0x7f800000) : __int_as_float(0x7f800000);
  }
  float v = exponent_field == 0
                ? ldexpf(static_cast<float>(mantissa_field), 1 - kBias - kMantissaBits)
                : ldexpf(1.0f + ldexpf(static_cast<float>(mantissa_field), -kMantissaBits),
                         static_cast<int>(exponent_field) - kBias);
  return negative ? -v : v;
}

__device__ __forceinline__ float DecodeE4M3(uint8_t c) { return DecodeFp8Device<4, 3, 7>(c); }
__device__ __forceinline__ float DecodeE5M2(uint8_t c) { return DecodeFp8Device<5, 2, 15>(c); }

// Non-negative float max through the integer order of IEEE floats.
__device__ __forceinline__ void AtomicMaxNonNegative(float* address, float value) {
  if (!(value >= 0.0f)) return;  // also drops NaN
  atomicMax(reinterpret_cast<int*>(address), __float_as_int(value));
}

}  // namespace cuda
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CUDA_FP8_DEVICE_CUH_
