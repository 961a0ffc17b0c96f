// Causal softmax attention of the CPU reference engine.
//
// Layouts: qkv [B, S, 3, nh, hd] bf16 (RoPE already applied), out and
// grad_out [B, S, nh, hd] bf16, lse [B, nh, S] fp32, grad_qkv like qkv.
// Arithmetic is fp32 on the stored bf16 values; per (batch, head, query i):
//
//   Forward:
//     s_ij  = (q_i · k_j) * scale for j <= i,   scale = 1 / sqrtf(hd)
//     m_i   = max_j s_ij,   p_ij = expf(s_ij - m_i),   z_i = sum_j p_ij
//     out_i = (sum_j p_ij v_j) / z_i, rounded to bf16
//     lse_i = logf(z_i) + m_i                           (fp32, kept for backward)
//
//   Backward (P recomputed from lse; D from the stored bf16 out):
//     P_ij  = expf(s_ij - lse_i),   D_i = dO_i · O_i,   dP_ij = dO_i · v_j
//     dS_ij = P_ij (dP_ij - D_i)
//     dq_i  = scale * sum_j dS_ij k_j,   dk_j = scale * sum_i dS_ij q_i,
//     dv_j  = sum_i P_ij dO_i
//   All three written to grad_qkv, rounded to bf16.
//
// The CUDA engine computes the same quantities; it differs only in fp32
// summation order and in the last bits of its expf/rsqrtf. Each (batch,
// head) is processed from contiguous fp32 copies, so seq 64-256 with head
// dim 32-64 runs in milliseconds per head.
//
// Errors: INVALID_ARGUMENT naming the argument for a dtype or shape other
// than the above (hd must be positive) or null data.
#ifndef TESSERA_WORKER_ENGINE_CPU_ATTENTION_H_
#define TESSERA_WORKER_ENGINE_CPU_ATTENTION_H_

#include "absl/status/status.h"
#include "worker/ops/tensor.h"

namespace tessera {
namespace cpu {

absl::Status AttentionForward(const TensorDesc& qkv, const TensorDesc& out, const TensorDesc& lse);
absl::Status AttentionBackward(const TensorDesc& grad_out, const TensorDesc& qkv,
                               const TensorDesc& out, const TensorDesc& lse,
                               const TensorDesc& grad_qkv);

}  // namespace cpu
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CPU_ATTENTION_H_
