// cuBLASLt-backed GEMM with cached plans (see gemm.h).
#include "worker/engine/cuda/gemm.h"

#include "absl/strings/str_cat.h"
#include "worker/engine/cuda/cuda_check.h"

namespace tessera {
namespace cuda {
namespace {

cudaDataType_t ToCuda(DType d) {
  switch (d) {
    case DType::kFloat32: return CUDA_R_32F;
    case DType::kBFloat16: return CUDA_R_16BF;
    case DType::kE4M3: return CUDA_R_8F_E4M3;
    case DType::kE5M2: return CUDA_R_8F_E5M2;
    default: return CUDA_R_32F;
  }
}

}  // namespace

GemmRunner::~GemmRunner() {
  for (auto& [key, plan] : plans_) {
    cublasLtMatrixLayoutDestroy(plan->a);
    cublasLtMatrixLayoutDestroy(plan->b);
    cublasLtMatrixLayoutDestroy(plan->d);
    cublasLtMatmulDescDestroy(plan->desc);
  }
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (scale_slots_ != nullptr) cudaFree(scale_slots_);
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

absl::Status GemmRunner::Init(size_t workspace_bytes) {
  CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&handle_));
  CUDA_RETURN_IF_ERROR(cudaMalloc(&workspace_, workspace_bytes));
  workspace_bytes_ = workspace_bytes;
  CUDA_RETURN_IF_ERROR(cudaMalloc(&scale_slots_, 64));
  return absl::OkStatus();
}

absl::Status GemmRunner::BuildPlan(const TensorDesc& a, bool trans_a, const TensorDesc& b,
                                   bool trans_b, const TensorDesc& d, bool accumulate, Plan& plan) {
  const int64_t m = d.shape[0], n = d.shape[1];
  const int64_t k = trans_a ? a.shape[0] : a.shape[1];
  // Column-major view: Dᵀ [n, m] = op_lt(B) [n, k] · op_lt(A) [k, m], with
  // cuBLASLt's A = our b and B = our a.
  cublasOperation_t op_lt_a = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t op_lt_b = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                                        &op_lt_a, sizeof(op_lt_a)));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                                        &op_lt_b, sizeof(op_lt_b)));
  // Stored shapes, column-major: our row-major [r, c] is [c, r] with ld = c.
  const int64_t b_rows = b.shape[1], b_cols = b.shape[0];
  const int64_t a_rows = a.shape[1], a_cols = a.shape[0];
  CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan.a, ToCuda(b.dtype), b_rows, b_cols, b_rows));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan.b, ToCuda(a.dtype), a_rows, a_cols, a_rows));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan.d, ToCuda(d.dtype), n, m, n));
  cublasLtMatmulPreference_t pref;
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_, sizeof(workspace_bytes_)));
  if (IsFp8(a.dtype)) {  // cuBLASLt's A is our b: its scale lives in slot 0
    const float* lt_a_scale = scale_slots_;
    const float* lt_b_scale = scale_slots_ + 4;
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &lt_a_scale, sizeof(lt_a_scale)));
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &lt_b_scale, sizeof(lt_b_scale)));
  }
  constexpr int kCandidates = 8;
  cublasLtMatmulHeuristicResult_t results[kCandidates];
  int found = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.d,
                                                     plan.d, pref, kCandidates, results, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  CUBLAS_RETURN_IF_ERROR(st);
  if (found == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuBLASLt has no algorithm for ", m, "x", n, "x", k, " ", DTypeName(a.dtype), "/",
        DTypeName(b.dtype), " -> ", DTypeName(d.dtype), (accumulate ? " (accumulate)" : "")));
  }
  for (int i = 0; i < found; ++i) {
    if (results[i].state == CUBLAS_STATUS_SUCCESS) plan.algos.push_back(results[i].algo);
  }
  ++plans_built_;
  return absl::OkStatus();
}

absl::Status GemmRunner::Run(const TensorDesc& a, bool trans_a, const TensorDesc& b, bool trans_b,
                             const TensorDesc& d, bool accumulate, cudaStream_t stream) {
  const int64_t m = d.shape[0], n = d.shape[1];
  const int64_t k = trans_a ? a.shape[0] : a.shape[1];
  if (m == 0 || n == 0) return absl::OkStatus();
  if (k == 0) {
    if (!accumulate) CUDA_RETURN_IF_ERROR(cudaMemsetAsync(d.data, 0, d.Bytes(), stream));
    return absl::OkStatus();
  }
  const bool fp8 = IsFp8(a.dtype);
  if (fp8 && (k % 16 != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("FP8 GEMM needs K to be a multiple of 16 (got ", k, ")"));
  }
  const std::string key = absl::StrCat(m, ",", n, ",", k, ",", int(a.dtype), ",", int(b.dtype), ",",
                                       int(d.dtype), ",", trans_a, trans_b, accumulate);
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    auto plan = std::make_unique<Plan>();
    absl::Status s = BuildPlan(a, trans_a, b, trans_b, d, accumulate, *plan);
    if (!s.ok()) return s;
    it = plans_.emplace(key, std::move(plan)).first;
  }
  Plan& plan = *it->second;
  if (fp8) {  // this call's scales into the plan's fixed slots, stream-ordered
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(scale_slots_, b.scale_inv, sizeof(float),
                                         cudaMemcpyDeviceToDevice, stream));
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(scale_slots_ + 4, a.scale_inv, sizeof(float),
                                         cudaMemcpyDeviceToDevice, stream));
  }
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  // A candidate that reports NOT_SUPPORTED at launch is skipped for good.
  cublasStatus_t st = CUBLAS_STATUS_NOT_SUPPORTED;
  for (; plan.chosen < plan.algos.size(); ++plan.chosen) {
    st = cublasLtMatmul(handle_, plan.desc, &alpha, b.data, plan.a, a.data, plan.b, &beta, d.data,
                        plan.d, d.data, plan.d, &plan.algos[plan.chosen], workspace_,
                        workspace_bytes_, stream);
    if (st != CUBLAS_STATUS_NOT_SUPPORTED) break;
  }
  if (st != CUBLAS_STATUS_SUCCESS) {
    absl::Status s = CublasStatus(st, "cublasLtMatmul", __FILE__, __LINE__);
    return absl::Status(s.code(), absl::StrCat(s.message(), " for ", m, "x", n, "x", k, " ",
                                               DTypeName(a.dtype), "/", DTypeName(b.dtype),
                                               " -> ", DTypeName(d.dtype)));
  }
  return absl::OkStatus();
}

}  // namespace cuda
}  // namespace tessera
