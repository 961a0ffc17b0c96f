// Bit-exact OCP FP8 encoding and decoding (OCP 8-bit floating point spec).
//   E4M3: bias 7, no infinities, max ±448, S.1111.111 is NaN.
//   E5M2: bias 15, IEEE-like, max finite ±57344, S.11111.00 is inf.
// Encoding rounds to nearest even (into subnormals too) and saturates: any
// finite or infinite value beyond the largest finite one becomes ±max, as the
// GPU's satfinite conversion does. NaN encodes as 0x7F in both formats. The
// CUDA engine matches this exactly.
#ifndef TESSERA_WORKER_ENGINE_CPU_FP8_H_
#define TESSERA_WORKER_ENGINE_CPU_FP8_H_

#include <cstdint>

#include "worker/ops/tensor.h"

namespace tessera {
namespace cpu {

inline constexpr float kE4M3Max = 448.0f;
inline constexpr float kE5M2Max = 57344.0f;
inline constexpr uint8_t kFp8NaN = 0x7F;

uint8_t EncodeE4M3(float value);
uint8_t EncodeE5M2(float value);
float DecodeE4M3(uint8_t code);
float DecodeE5M2(uint8_t code);

// Dispatch on dtype (kE4M3 or kE5M2).
uint8_t EncodeFp8(DType dtype, float value);
float DecodeFp8(DType dtype, uint8_t code);
float Fp8Max(DType dtype);

}  // namespace cpu
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CPU_FP8_H_
