// Elementwise ops for the CPU engine: Add (residual connections) and Cast
// between fp32 and bf16. Arithmetic in fp32, rounded to the output dtype.
#ifndef TESSERA_WORKER_ENGINE_CPU_ELEMENTWISE_H_
#define TESSERA_WORKER_ENGINE_CPU_ELEMENTWISE_H_

#include "absl/status/status.h"
#include "worker/ops/tensor.h"

namespace tessera {
namespace cpu {

absl::Status Add(const TensorDesc& a, const TensorDesc& b, const TensorDesc& out);
absl::Status Cast(const TensorDesc& in, const TensorDesc& out);

}  // namespace cpu
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CPU_ELEMENTWISE_H_
