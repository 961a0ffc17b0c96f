// FP8 casts for the CPU engine: Quantize (with fused amax), QuantizeTranspose,
// Dequantize, Amax, Transpose and the delayed/current scaling update. The
// semantics are those of the matching Ops methods in worker/ops/ops.h.
#ifndef TESSERA_WORKER_ENGINE_CPU_QUANTIZE_H_
#define TESSERA_WORKER_ENGINE_CPU_QUANTIZE_H_

#include "absl/status/status.h"
#include "worker/ops/ops.h"

namespace tessera {
namespace cpu {

absl::Status Quantize(const TensorDesc& in, const TensorDesc& out);
absl::Status QuantizeTranspose(const TensorDesc& in, const TensorDesc& out, const TensorDesc& out_t);
absl::Status Dequantize(const TensorDesc& in, const TensorDesc& out);
absl::Status Amax(const TensorDesc& in, float* amax);
absl::Status UpdateFp8Scales(float* amax, float* history, float* scale, float* scale_inv,
                             int scale_inv_stride, int n, int history_len, float fp8_max,
                             int margin, AmaxAlgo algo);
absl::Status Transpose(const TensorDesc& in, const TensorDesc& out);

}  // namespace cpu
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CPU_QUANTIZE_H_
