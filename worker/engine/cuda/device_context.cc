// Per-device state of the CUDA engine (see device_context.h).
#include "worker/engine/cuda/device_context.h"

#include "absl/strings/str_cat.h"
#include "worker/engine/cuda/cuda_check.h"

namespace tessera {
namespace cuda {
namespace {

// The device this thread selected last through SetCurrentDevice; -1 before
// the first call.
thread_local int current_device = -1;

}  // namespace

absl::Status CheckDeviceExists(int device) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it
    return absl::NotFoundError(absl::StrCat("no CUDA device ", device, ": ",
                                            cudaGetErrorString(err)));
  }
  if (device < 0 || device >= count) {
    return absl::NotFoundError(absl::StrCat("no CUDA device ", device, " (", count, " visible)"));
  }
  return absl::OkStatus();
}

absl::Status SetCurrentDevice(int device) {
  if (current_device == device) return absl::OkStatus();
  CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  current_device = device;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DeviceContext>> DeviceContext::Create(int device,
                                                                     size_t workspace_bytes) {
  absl::Status exists = CheckDeviceExists(device);
  if (!exists.ok()) return exists;
  std::unique_ptr<DeviceContext> ctx(new DeviceContext(device));
  absl::Status current = SetCurrentDevice(device);
  if (!current.ok()) return current;
  cudaDeviceProp props;
  CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&props, device));
  // The kernels are built for sm_90a (wgmma, Hopper FP8): on any other GPU
  // they could only trap, so refuse the device up front.
  if (props.major != 9 || props.minor != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "device ", device, " (", props.name, ") has compute capability ", props.major, ".",
        props.minor, "; this build of the CUDA engine runs on sm_90 (H100/H200) only"));
  }
  ctx->facts_.name = props.name;
  ctx->facts_.sm_count = props.multiProcessorCount;
  ctx->facts_.compute_major = props.major;
  ctx->facts_.compute_minor = props.minor;
  ctx->facts_.total_memory_bytes = props.totalGlobalMem;
  ctx->facts_.l2_bytes = static_cast<size_t>(props.l2CacheSize);
  ctx->facts_.smem_per_block_bytes = props.sharedMemPerBlock;
  ctx->facts_.smem_per_block_optin_bytes = props.sharedMemPerBlockOptin;
  CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&ctx->cublaslt_));
  CUDA_RETURN_IF_ERROR(cudaMalloc(&ctx->workspace_, workspace_bytes));
  ctx->workspace_bytes_ = workspace_bytes;
  CUDA_RETURN_IF_ERROR(cudaMalloc(&ctx->error_flag_, sizeof(int)));
  CUDA_RETURN_IF_ERROR(cudaMemset(ctx->error_flag_, 0, sizeof(int)));
  CUDA_RETURN_IF_ERROR(cudaMalloc(&ctx->work_counter_, sizeof(int)));
  return ctx;
}

DeviceContext::~DeviceContext() {
  if (SetCurrentDevice(device_).ok()) {
    if (work_counter_ != nullptr) cudaFree(work_counter_);
    if (error_flag_ != nullptr) cudaFree(error_flag_);
    if (workspace_ != nullptr) cudaFree(workspace_);
    if (cublaslt_ != nullptr) cublasLtDestroy(cublaslt_);
  }
}

absl::Status DeviceContext::SynchronizeAndCheckFlag(cudaStream_t stream) {
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  int flag = 0;
  CUDA_RETURN_IF_ERROR(cudaMemcpy(&flag, error_flag_, sizeof(int), cudaMemcpyDeviceToHost));
  if (flag == 0) return absl::OkStatus();
  CUDA_RETURN_IF_ERROR(cudaMemset(error_flag_, 0, sizeof(int)));
  return absl::InvalidArgumentError(
      "a token id or target was outside [0, vocab_size): its embedding row was written as zeros "
      "or its loss row was ignored");
}

}  // namespace cuda
}  // namespace tessera
