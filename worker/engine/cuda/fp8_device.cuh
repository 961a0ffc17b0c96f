// FP8 encode/decode on the device, bit-identical to the CPU reference
// (worker/engine/cpu/fp8.h): round to nearest even into subnormals, satfinite
// for out-of-range and infinite values, NaN -> 0x7F, for E4M3 and E5M2.
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

__device__ __forceinline__ uint8_t EncodeE4M3(float v) { return EncodeFp8Device<3, 7>(v, 448.0f); }
__device__ __forceinline__ uint8_t EncodeE5M2(float v) { return EncodeFp8Device<2, 15>(v, 57344.0f); }

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
