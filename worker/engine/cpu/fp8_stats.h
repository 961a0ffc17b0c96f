// Fp8Stats for the CPU engine (Ops::Fp8Stats): how many elements of a
// tensor saturate at, or underflow below, an FP8 format under a given
// scale. It encodes each element with the same encoder Quantize uses
// (fp8.h), so "saturates" and "underflows" mean what the quantized tensor
// really holds, and the CUDA engine's counts must equal these exactly.
#ifndef TESSERA_WORKER_ENGINE_CPU_FP8_STATS_H_
#define TESSERA_WORKER_ENGINE_CPU_FP8_STATS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "worker/ops/tensor.h"

namespace tessera {
namespace cpu {

// counts[0] += elements encoded at ±(format's largest magnitude); counts[1]
// += nonzero, non-NaN elements encoded as ±0. See Ops::Fp8Stats.
absl::Status Fp8Stats(const TensorDesc& in, DType format, const float* scale, int64_t* counts);

}  // namespace cpu
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CPU_FP8_STATS_H_
