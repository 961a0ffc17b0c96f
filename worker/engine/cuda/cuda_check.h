// One macro family for CUDA, cuBLASLt and NCCL calls: each returns an
// absl::Status carrying file:line, the failing expression and the library's
// own error string.
//
// Status codes follow what the worker must do next:
//  * out of memory (cudaErrorMemoryAllocation, CUBLAS_STATUS_ALLOC_FAILED)
//    -> RESOURCE_EXHAUSTED: the job does not fit; the device is fine.
//  * a sticky CUDA error (the context is unusable until the process exits:
//    an illegal address, a kernel trap or assert, a launch failure, ECC)
//    -> INTERNAL, with "sticky CUDA error" in the message and the payload
//    kStickyCudaErrorPayload. The worker daemon marks itself unhealthy on
//    INTERNAL and refuses further jobs.
//  * a bad request that the library rejected (an invalid value or launch
//    configuration, an unsupported cuBLASLt layout) -> INVALID_ARGUMENT.
//  * NCCL failures -> ABORTED: the collective group is gone, the device is
//    not (NcclCommunicator aborts the group before returning it).
//  * anything else -> INTERNAL.
#ifndef TESSERA_WORKER_ENGINE_CUDA_CUDA_CHECK_H_
#define TESSERA_WORKER_ENGINE_CUDA_CUDA_CHECK_H_

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace tessera {
namespace cuda {

// Type URL of the payload attached to statuses from sticky CUDA errors.
inline constexpr char kStickyCudaErrorPayload[] = "tessera/sticky-cuda-error";

// True for errors after which the CUDA context of this process is corrupt:
// every later CUDA call fails too, so the process must be restarted.
inline bool IsStickyCudaError(cudaError_t err) {
  switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorECCUncorrectable:
    case cudaErrorLaunchTimeout:
    case cudaErrorUnknown:
      return true;
    default:
      return false;
  }
}

// True if `status` came from a sticky CUDA error (see IsStickyCudaError).
inline bool IsStickyCudaStatus(const absl::Status& status) {
  return status.GetPayload(kStickyCudaErrorPayload).has_value();
}

inline absl::Status CudaStatus(cudaError_t err, const char* expr, const char* file, int line) {
  if (err == cudaSuccess) return absl::OkStatus();
  const bool sticky = IsStickyCudaError(err);
  std::string msg = absl::StrCat(file, ":", line, ": ", expr, ": ", cudaGetErrorName(err), " (",
                                 cudaGetErrorString(err), ")",
                                 sticky ? "; sticky CUDA error, the device context is lost" : "");
  switch (err) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(msg);
    case cudaErrorInvalidValue:
    case cudaErrorInvalidConfiguration:
    case cudaErrorLaunchOutOfResources:
    case cudaErrorInvalidDevice:
      return absl::InvalidArgumentError(msg);
    default:
      break;
  }
  absl::Status status = absl::InternalError(msg);
  if (sticky) status.SetPayload(kStickyCudaErrorPayload, absl::Cord(cudaGetErrorName(err)));
  return status;
}

inline absl::Status CublasStatus(cublasStatus_t err, const char* expr, const char* file, int line) {
  if (err == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  std::string msg = absl::StrCat(file, ":", line, ": ", expr, ": ", cublasLtGetStatusName(err),
                                 " (", cublasLtGetStatusString(err), ")");
  switch (err) {
    case CUBLAS_STATUS_NOT_SUPPORTED:
    case CUBLAS_STATUS_INVALID_VALUE:
      return absl::InvalidArgumentError(msg);
    case CUBLAS_STATUS_ALLOC_FAILED:
      return absl::ResourceExhaustedError(msg);
    default:
      return absl::InternalError(msg);
  }
}

inline absl::Status NcclStatus(ncclResult_t err, const char* expr, const char* file, int line) {
  if (err == ncclSuccess || err == ncclInProgress) return absl::OkStatus();
  return absl::AbortedError(
      absl::StrCat(file, ":", line, ": ", expr, ": ", ncclGetErrorString(err)));
}

}  // namespace cuda
}  // namespace tessera

#define TESSERA_CHECK_IMPL_(fn, expr)                                             \
  do {                                                                            \
    ::absl::Status tessera_check_status_ = fn((expr), #expr, __FILE__, __LINE__); \
    if (!tessera_check_status_.ok()) return tessera_check_status_;                \
  } while (false)

#define CUDA_RETURN_IF_ERROR(expr) TESSERA_CHECK_IMPL_(::tessera::cuda::CudaStatus, expr)
#define CUBLAS_RETURN_IF_ERROR(expr) TESSERA_CHECK_IMPL_(::tessera::cuda::CublasStatus, expr)
#define NCCL_RETURN_IF_ERROR(expr) TESSERA_CHECK_IMPL_(::tessera::cuda::NcclStatus, expr)
// After a kernel launch: the launch error, if any.
#define CUDA_RETURN_IF_LAUNCH_FAILED() CUDA_RETURN_IF_ERROR(cudaGetLastError())

#endif  // TESSERA_WORKER_ENGINE_CUDA_CUDA_CHECK_H_
