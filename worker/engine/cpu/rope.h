// Rotary position embedding (RoPE) of the CPU reference engine, in place on
// the q and k parts of qkv [B, S, 3, nh, hd] bf16; the v part is untouched.
//
// Token s (0-based within its sequence) has position s. Pairs are
// (i, i + hd/2) for i < hd/2 ("rotate half"). Per pair, in fp32, with the
// expressions the CUDA engine evaluates identically:
//   inv_freq_i = powf(theta, -2.0f * i / hd)      (i and hd as float)
//   angle      = (float)s * inv_freq_i,  c = cosf(angle), n = sinf(angle)
//   Forward:   x_i' = x_i c - x_{i+hd/2} n,   x_{i+hd/2}' = x_{i+hd/2} c + x_i n
//   Backward:  g_i' = g_i c + g_{i+hd/2} n,   g_{i+hd/2}' = g_{i+hd/2} c - g_i n
// The backward is the transpose (= inverse) rotation, applied in place to the
// q and k parts of grad_qkv; the v gradients pass through unchanged. Results
// are rounded to bf16 (nearest even).
//
// Errors: INVALID_ARGUMENT naming the argument for a dtype other than bf16,
// a shape that is not [B, S, 3, nh, hd] with hd even and positive, null
// data, or theta not finite and > 0.
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
