// bfloat16 <-> float32 conversion for the CPU reference engine. bf16 is the
// top 16 bits of an IEEE float32; conversion to bf16 rounds to nearest even
// (NaN stays NaN), matching __float2bfloat16_rn on the GPU.
#ifndef TESSERA_WORKER_ENGINE_CPU_BF16_H_
#define TESSERA_WORKER_ENGINE_CPU_BF16_H_

#include <cstdint>
#include <cstring>

namespace tessera {
namespace cpu {

inline float Bf16ToFloat(uint16_t bits) {
  uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float out;
  std::memcpy(&out, &wide, sizeof(out));
  return out;
}

inline uint16_t FloatToBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep it quiet and a NaN
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

// Rounds a float through bf16 and back (what storing to bf16 does to it).
inline float RoundToBf16(float value) { return Bf16ToFloat(FloatToBf16(value)); }

}  // namespace cpu
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CPU_BF16_H_
