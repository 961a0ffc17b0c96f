// RMSNorm of the CPU reference engine (the pre-attention, pre-MLP and final
// norms). All arithmetic is fp32 on the stored values, in this order; the
// CUDA engine evaluates the same expressions and differs only in the order
// of its row reductions and the last bit of rsqrtf:
//
//   Forward, x [T, H] fp32|bf16, weight [H] fp32|bf16, eps >= 0:
//     rstd_t = 1.0f / sqrtf(sum_j(x_tj * x_tj) / (float)H + eps)
//     out_tj = (x_tj * rstd_t) * w_j, rounded to out's dtype (fp32|bf16)
//     rstd [T] fp32 keeps rstd_t for the backward.
//
//   Backward, grad_out dy [T, H] fp32|bf16, the same x and weight, the saved
//   rstd (used as given, not recomputed):
//     c_t   = rstd_t^3 * sum_k(w_k * dy_tk * x_tk) / H
//     dx_tj = rstd_t * (w_j * dy_tj) - x_tj * c_t
//     grad_x [T, H] fp32|bf16 = dx (or grad_x + dx in fp32 when
//       accumulate_grad_x), rounded to grad_x's dtype
//     grad_weight [H] fp32 += sum_t dy_tj * x_tj * rstd_t (token order)
//
// H must be at least 1; T may be 0. out may alias x, and grad_x may alias
// grad_out, when their dtypes match. Errors are INVALID_ARGUMENT naming the
// argument (dtype, shape, null data, eps negative or not finite).
#ifndef TESSERA_WORKER_ENGINE_CPU_RMSNORM_H_
#define TESSERA_WORKER_ENGINE_CPU_RMSNORM_H_

#include "absl/status/status.h"
#include "worker/ops/tensor.h"

namespace tessera {
namespace cpu {

absl::Status RmsNormForward(const TensorDesc& x, const TensorDesc& weight, float eps,
                            const TensorDesc& out, const TensorDesc& rstd);
absl::Status RmsNormBackward(const TensorDesc& grad_out, const TensorDesc& x,
                             const TensorDesc& weight, const TensorDesc& rstd,
                             const TensorDesc& grad_x, bool accumulate_grad_x,
                             const TensorDesc& grad_weight);

}  // namespace cpu
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CPU_RMSNORM_H_
