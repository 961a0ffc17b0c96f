// Element access for the CPU engine: read any supported dtype as float and
// write float back with the dtype's rounding (bf16 round-to-nearest-even,
// FP8 through the tensor's scale). Also the argument checks every CPU op
// shares, which name the offending argument in INVALID_ARGUMENT errors.
#ifndef TESSERA_WORKER_ENGINE_CPU_TENSOR_ACCESS_H_
#define TESSERA_WORKER_ENGINE_CPU_TENSOR_ACCESS_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
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

inline absl::Status CheckDType(const char* name, const TensorDesc& t,
                               std::initializer_list<DType> allowed) {
  for (DType d : allowed) {
    if (t.dtype == d) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(name, ": dtype ", DTypeName(t.dtype), " is not supported here"));
}

inline absl::Status CheckShape(const char* name, const TensorDesc& t, const Shape& want) {
  if (t.shape == want) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(name, ": shape ", t.shape.ToString(),
                                                 ", expected ", want.ToString()));
}

inline absl::Status CheckRank(const char* name, const TensorDesc& t, int rank) {
  if (t.shape.rank == rank) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(name, ": expected a rank-", rank,
                                                 " tensor, got ", t.shape.ToString()));
}

inline absl::Status CheckData(const char* name, const TensorDesc& t) {
  if (t.data != nullptr || t.NumElements() == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(name, ": data is null"));
}

// Ops::GemmAdd's addend rule, for both engines: c and d fp32 of one shape,
// c with data, and c either d itself or not overlapping it.
inline absl::Status CheckGemmAddend(const TensorDesc& c, const TensorDesc& d) {
  if (absl::Status s = CheckDType("c", c, {DType::kFloat32}); !s.ok()) return s;
  if (absl::Status s = CheckDType("d", d, {DType::kFloat32}); !s.ok()) return s;
  if (absl::Status s = CheckShape("c", c, d.shape); !s.ok()) return s;
  if (absl::Status s = CheckData("c", c); !s.ok()) return s;
  const char* c_bytes = static_cast<const char*>(c.data);
  const char* d_bytes = static_cast<const char*>(d.data);
  const int64_t bytes = d.Bytes();
  if (c.data != d.data && c_bytes < d_bytes + bytes && d_bytes < c_bytes + bytes) {
    return absl::InvalidArgumentError("c, d: the addend overlaps the output without being it");
  }
  return absl::OkStatus();
}

// Ops::UpdateFp8Scales's argument rule, for both engines.
inline absl::Status CheckUpdateFp8ScalesArgs(const float* amax, const float* history,
                                             const float* scale, const float* scale_inv,
                                             int scale_inv_stride, int n, int history_len) {
  if (n < 0 || history_len < 1) {
    return absl::InvalidArgumentError("n must be >= 0 and history_len >= 1");
  }
  if (scale_inv_stride < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("scale_inv_stride: must be >= 1 (got ", scale_inv_stride, ")"));
  }
  if (n > 0 &&
      (amax == nullptr || history == nullptr || scale == nullptr || scale_inv == nullptr)) {
    return absl::InvalidArgumentError("amax, history, scale, scale_inv: must all be set");
  }
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CPU_TENSOR_ACCESS_H_
