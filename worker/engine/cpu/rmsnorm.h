// RMSNorm for the CPU engine. rstd_t = 1 / sqrt(mean_j(x_tj^2) + eps) in
// fp32; out_tj = x_tj * rstd_t * w_j rounded to out's dtype. The backward
// uses the same formula in fp32:
//   dx_tj = rstd_t * (w_j dy_tj) - x_tj * rstd_t^3 / H * sum_k(w_k dy_tk x_tk)
//   dw_j += sum_t dy_tj x_tj rstd_t
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
