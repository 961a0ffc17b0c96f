// Element access for the CPU engine: read any supported dtype as float and
// write float back with the dtype's rounding (bf16 round-to-nearest-even,
// FP8 through the tensor's scale). The argument checks are the ops API's
// (worker/ops/op_checks.h), shared with the CUDA engine.
#ifndef TESSERA_WORKER_ENGINE_CPU_TENSOR_ACCESS_H_
#define TESSERA_WORKER_ENGINE_CPU_TENSOR_ACCESS_H_

#include <cstdint>
#include <vector>

#include "worker/engine/cpu/bf16.h"
#include "worker/engine/cpu/fp8.h"
#include "worker/ops/tensor.h"

namespace tessera {
namespace cpu {

// Raw value of element i (FP8 decoded without scale_inv).
inline float Load(const TensorDesc& t, int64_t i) {
  switch (t.dtype) {
    case DType::kFloat32: return static_cast<const float*>(t.data)[i];
    case DType::kBFloat16: return Bf16ToFloat(static_cast<const uint16_t*>(t.data)[i]);
    case DType::kE4M3: return DecodeE4M3(static_cast<const uint8_t*>(t.data)[i]);
    case DType::kE5M2: return DecodeE5M2(static_cast<const uint8_t*>(t.data)[i]);
    case DType::kInt32: return static_cast<float>(static_cast<const int32_t*>(t.data)[i]);
    case DType::kUInt8: return static_cast<float>(static_cast<const uint8_t*>(t.data)[i]);
  }
  return 0.f;
}

// Stores v into element i of an fp32 or bf16 tensor.
inline void Store(const TensorDesc& t, int64_t i, float v) {
  if (t.dtype == DType::kFloat32) {
    static_cast<float*>(t.data)[i] = v;
  } else {
    static_cast<uint16_t*>(t.data)[i] = FloatToBf16(v);
  }
}

// Copies an fp32 / bf16 / FP8 tensor into `out` as float (FP8 decoded raw).
inline void LoadAll(const TensorDesc& t, std::vector<float>& out) {
  const int64_t n = t.NumElements();
  out.resize(n);
  if (t.dtype == DType::kFloat32) {
    const float* p = static_cast<const float*>(t.data);
    out.assign(p, p + n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = Load(t, i);
}

}  // namespace cpu
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CPU_TENSOR_ACCESS_H_
