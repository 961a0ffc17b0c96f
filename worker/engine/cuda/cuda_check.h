// One macro family for CUDA, cuBLASLt and NCCL calls: each returns an
// absl::Status carrying file:line and the library's own error string. Sticky
// CUDA errors (the context is unusable afterwards, e.g. an illegal address)
// come back as INTERNAL, which the worker daemon turns into "unhealthy";
// out-of-memory comes back as RESOURCE_EXHAUSTED.
#ifndef TESSERA_WORKER_ENGINE_CUDA_CUDA_CHECK_H_
#define TESSERA_WORKER_ENGINE_CUDA_CUDA_CHECK_H_

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tessera {
namespace cuda {

inline absl::Status CudaStatus(cudaError_t err, const char* expr, const char* file, int line) {
  if (err == cudaSuccess) return absl::OkStatus();
  std::string msg = absl::StrCat(file, ":", line, ": ", expr, ": ", cudaGetErrorName(err), " (",
                                 cudaGetErrorString(err), ")");
  if (err == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(msg);
  return absl::InternalError(msg);
}

inline absl::Status CublasStatus(cublasStatus_t err, const char* expr, const char* file, int line) {
  if (err == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  std::string msg = absl::StrCat(file, ":", line, ": ", expr, ": cuBLASLt status ",
                                 static_cast<int>(err));
  if (err == CUBLAS_STATUS_NOT_SUPPORTED || err == CUBLAS_STATUS_INVALID_VALUE) {
    return absl::InvalidArgumentError(msg);
  }
  if (err == CUBLAS_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(msg);
  return absl::InternalError(msg);
}

inline absl::Status NcclStatus(ncclResult_t err, const char* expr, const char* file, int line) {
  if (err == ncclSuccess || err == ncclInProgress) return absl::OkStatus();
  return absl::AbortedError(
      absl::StrCat(file, ":", line, ": ", expr, ": ", ncclGetErrorString(err)));
}

}  // namespace cuda
}  // namespace tessera

#define TESSERA_CHECK_IMPL_(fn, expr)                                       \
  do {                                                                      \
    ::absl::Status tessera_check_status_ = fn((expr), #expr, __FILE__, __LINE__); \
    if (!tessera_check_status_.ok()) return tessera_check_status_;          \
  } while (false)

#define CUDA_RETURN_IF_ERROR(expr) TESSERA_CHECK_IMPL_(::tessera::cuda::CudaStatus, expr)
#define CUBLAS_RETURN_IF_ERROR(expr) TESSERA_CHECK_IMPL_(::tessera::cuda::CublasStatus, expr)
#define NCCL_RETURN_IF_ERROR(expr) TESSERA_CHECK_IMPL_(::tessera::cuda::NcclStatus, expr)
// After a kernel launch: the launch error, if any.
#define CUDA_RETURN_IF_LAUNCH_FAILED() CUDA_RETURN_IF_ERROR(cudaGetLastError())

#endif  // TESSERA_WORKER_ENGINE_CUDA_CUDA_CHECK_H_
