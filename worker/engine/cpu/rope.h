// Rotary position embedding for the CPU engine, in place on the q and k
// parts of qkv [B, S, 3, nh, hd] (bf16). Token s has position s; pairs are
// (i, i + hd/2) for i < hd/2 ("rotate half"), inv_freq_i =
// powf(theta, -2i/hd), angle = s * inv_freq_i, all in fp32:
//   x_i' = x_i cos - x_{i+hd/2} sin,   x_{i+hd/2}' = x_{i+hd/2} cos + x_i sin.
// The backward applies the inverse (transposed) rotation to the gradients.
#ifndef TESSERA_WORKER_ENGINE_CPU_ROPE_H_
#define TESSERA_WORKER_ENGINE_CPU_ROPE_H_

#include "absl/status/status.h"
#include "worker/ops/tensor.h"

namespace tessera {
namespace cpu {

absl::Status RopeForward(const TensorDesc& qkv, float theta);
absl::Status RopeBackward(const TensorDesc& grad_qkv, float theta);

}  // namespace cpu
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CPU_ROPE_H_
