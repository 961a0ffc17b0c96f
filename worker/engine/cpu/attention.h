// Causal softmax attention with grouped-query heads, the CPU reference
// engine's implementation of the ops API's attention (worker/ops/ops.h).
//
// Layouts: qkv [B, S, nh + 2*nkv, hd] bf16 (RoPE already applied) holds per
// token the nh query heads, then the nkv key heads, then the nkv value heads;
// out and grad_out [B, S, nh, hd] bf16 (nh is read from out), lse [B, nh, S]
// fp32, grad_qkv like qkv. nkv (n_kv_heads) divides nh; query head h uses key
// and value head g(h) = h / (nh / nkv), so nkv == nh is multi-head attention.
// Arithmetic is fp32 on the stored bf16 values; per (batch, query head h,
// query i), with k_j, v_j the rows of kv head g(h):
//
//   Forward:
//     s_ij  = (q_i · k_j) * scale for first_i <= j <= i,   scale = 1 / sqrtf(hd)
//     m_i   = max_j s_ij,   p_ij = expf(s_ij - m_i),   z_i = sum_j p_ij
//     out_i = (sum_j p_ij v_j) / z_i, rounded to bf16
//     lse_i = logf(z_i) + m_i                           (fp32, kept for backward)
//
//   Backward (P recomputed from lse; D from the stored bf16 out):
//     P_ij  = expf(s_ij - lse_i),   D_i = dO_i · O_i,   dP_ij = dO_i · v_j
//     dS_ij = P_ij (dP_ij - D_i)
//     dq_i  = scale * sum_j dS_ij k_j,   dk_j = scale * sum_i dS_ij q_i,
//     dv_j  = sum_i P_ij dO_i
//   dq goes to query head h of grad_qkv. dk and dv of kv head g are summed in
//   fp32 over the query heads of its group (h = g*(nh/nkv), ... in order)
//   before they are written. Every element of grad_qkv is written, rounded
//   to bf16.
//
// first_i is 0 (causal over the whole sequence), or with document masking
// doc_starts[b, i], where token i's document begins (ops.h), so every sum
// above runs over the keys of the query's own document only: a packed
// sequence gives each document exactly what it gives on its own.
//
// The CUDA engine computes the same quantities; it differs only in fp32
// summation order and in the last bits of its expf/rsqrtf. Each (batch,
// head) is processed from contiguous fp32 copies, so seq 64-256 with head
// dim 32-128 runs in milliseconds per head.
//
// Errors: INVALID_ARGUMENT naming the argument for a dtype or shape other
// than the above (hd must be positive), n_kv_heads < 1 or not dividing nh,
// a qkv head count other than nh + 2*n_kv_heads, or null data; and for
// doc_starts other than int32 [B, S] whose rows start at 0 and then repeat
// the previous entry or start a document at their own position.
#ifndef TESSERA_WORKER_ENGINE_CPU_ATTENTION_H_
#define TESSERA_WORKER_ENGINE_CPU_ATTENTION_H_

#include "absl/status/status.h"
#include "worker/ops/tensor.h"

namespace tessera {
namespace cpu {

// doc_starts: the default (no data) is whole sequences.
absl::Status AttentionForward(const TensorDesc& qkv, int n_kv_heads, const TensorDesc& out,
                              const TensorDesc& lse, const TensorDesc& doc_starts = {});
absl::Status AttentionBackward(const TensorDesc& grad_out, const TensorDesc& qkv, int n_kv_heads,
                               const TensorDesc& out, const TensorDesc& lse,
                               const TensorDesc& grad_qkv, const TensorDesc& doc_starts = {});

}  // namespace cpu
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CPU_ATTENTION_H_
