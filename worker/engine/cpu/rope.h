// Rotary position embedding (RoPE) of the CPU reference engine, in place on
// the query and key heads of the grouped-query layout qkv
// [B, S, nh + 2*nkv, hd] bf16 (worker/ops/ops.h): heads [0, nh + nkv) of
// every token are rotated, the nkv value heads after them are untouched.
// nh is not an argument: it is qkv's head count minus 2 * n_kv_heads.
//
// Token s (0-based within its sequence) has position s. Pairs are
// (i, i + hd/2) for i < hd/2 ("rotate half"). Per pair, in fp32, with the
// expressions the CUDA engine evaluates identically:
//   inv_freq_i = powf(theta, -2.0f * i / hd)      (i and hd as float)
//   angle      = (float)s * inv_freq_i,  c = cosf(angle), n = sinf(angle)
//   Forward:   x_i' = x_i c - x_{i+hd/2} n,   x_{i+hd/2}' = x_{i+hd/2} c + x_i n
//   Backward:  g_i' = g_i c + g_{i+hd/2} n,   g_{i+hd/2}' = g_{i+hd/2} c - g_i n
// The backward is the transpose (= inverse) rotation, applied in place to the
// query and key heads of grad_qkv; the value gradients pass through
// unchanged. Results are rounded to bf16 (nearest even).
//
// Errors: INVALID_ARGUMENT naming the argument for a dtype other than bf16,
// a shape that is not [B, S, nh + 2*nkv, hd] with nh >= 1 and hd even and
// positive, n_kv_heads < 1 or not dividing nh, null data, or theta not
// finite and > 0. A failed call writes nothing.
#ifndef TESSERA_WORKER_ENGINE_CPU_ROPE_H_
#define TESSERA_WORKER_ENGINE_CPU_ROPE_H_

#include "absl/status/status.h"
#include "worker/ops/tensor.h"

namespace tessera {
namespace cpu {

absl::Status RopeForward(const TensorDesc& qkv, int n_kv_heads, float theta);
absl::Status RopeBackward(const TensorDesc& grad_qkv, int n_kv_heads, float theta);

}  // namespace cpu
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CPU_ROPE_H_
