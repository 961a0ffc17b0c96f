// Causal softmax attention for the CPU engine. qkv [B, S, 3, nh, hd] bf16,
// out [B, S, nh, hd] bf16, lse [B, nh, S] fp32. Scores are q·k / sqrt(hd) in
// fp32 with j <= i; softmax with max subtraction; lse_i = log(sum_j exp(s_ij
// - m_i)) + m_i. The backward recomputes P from lse and uses the bf16 output
// for D_i = sum(dO_i * O_i):
//   dV_j += P_ij dO_i,  dP_ij = dO_i·V_j,  dS_ij = P_ij (dP_ij - D_i),
//   dQ_i += dS_ij K_j / sqrt(hd),  dK_j += dS_ij Q_i / sqrt(hd).
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
