// Fp8Stats for the CPU engine (see fp8_stats.h).
#include "worker/engine/cpu/fp8_stats.h"

#include <cmath>

#include "worker/engine/cpu/fp8.h"
#include "worker/engine/cpu/tensor_access.h"
#include "worker/ops/op_checks.h"

namespace tessera {
namespace cpu {

absl::Status Fp8Stats(const TensorDesc& in, DType format, const float* scale, int64_t* counts) {
  if (absl::Status s = CheckFp8StatsArgs(in, format, scale, counts); !s.ok()) return s;
  // The largest finite magnitude's code: S.1111.110 (e4m3), S.11110.11 (e5m2).
  const uint8_t max_code = EncodeFp8(format, Fp8Max(format));
  int64_t saturated = 0, underflowed = 0;
  for (int64_t i = 0; i < in.NumElements(); ++i) {
    const float v = Load(in, i);
    if (std::isnan(v)) continue;
    const uint8_t magnitude = EncodeFp8(format, v * *scale) & 0x7F;
    if (magnitude == max_code) {
      ++saturated;
    } else if (magnitude == 0 && v != 0.f) {
      ++underflowed;
    }
  }
  counts[0] += saturated;
  counts[1] += underflowed;
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace tessera
