// GEMM on cuBLASLt with the semantics of Ops::Gemm (row-major, fp32
// accumulation, bf16 or FP8 operands with per-tensor scales passed as device
// pointers, bf16 or fp32 output, beta = 1 accumulation into fp32).
//
// Row-major D = op(A)·op(B) is computed as the column-major Dᵀ = op(B)ᵀ·op(A)ᵀ,
// so cuBLASLt's "A" is our b. FP8 needs cuBLASLt's TN layout, which is
// exactly our trans_a = false, trans_b = true (both operands K-contiguous).
//
// Descriptors, layouts and the chosen algorithm are created once per shape
// key and cached; the workspace is allocated once. A steady-state step makes
// no heuristic query and creates no descriptor (plans_built() counts them).
#ifndef TESSERA_WORKER_ENGINE_CUDA_GEMM_H_
#define TESSERA_WORKER_ENGINE_CUDA_GEMM_H_

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "worker/ops/tensor.h"

namespace tessera {
namespace cuda {

class GemmRunner {
 public:
  ~GemmRunner();
  absl::Status Init(size_t workspace_bytes);
  absl::Status Run(const TensorDesc& a, bool trans_a, const TensorDesc& b, bool trans_b,
                   const TensorDesc& d, bool accumulate, cudaStream_t stream);
  int plans_built() const { return plans_built_; }

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    // Candidates from the heuristic, best first; `chosen` is the first that
    // ran (validated on first use, then fixed).
    std::vector<cublasLtMatmulAlgo_t> algos;
    size_t chosen = 0;
  };
  absl::Status BuildPlan(const TensorDesc& a, bool trans_a, const TensorDesc& b, bool trans_b,
                         const TensorDesc& d, bool accumulate, Plan& plan);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<std::string, std::unique_ptr<Plan>> plans_;
  int plans_built_ = 0;
  // FP8 scale factors are copied into two fixed, 16-byte-aligned device
  // slots before each FP8 GEMM: cuBLASLt rejects scale pointers that are
  // only 4-byte aligned (as they are inside the packed metadata block), and
  // fixed addresses let each plan carry its scale pointers from creation.
  float* scale_slots_ = nullptr;
};

}  // namespace cuda
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CUDA_GEMM_H_
