// Everything the CUDA engine holds per device, created once: the device's
// facts (queried with one cudaGetDeviceProperties call and cached), the
// cuBLASLt handle with its single workspace, a device-side error flag
// that kernels raise for out-of-range token ids or targets (reported at the
// next Synchronize, since nothing on the step path reads back to the host),
// and the counter a persistent kernel hands out its work with.
//
// Device selection: SetCurrentDevice keeps a thread_local record of the
// device this thread last selected, so the engine can call it at the top of
// every op and only the first call on a thread reaches cudaSetDevice.
#ifndef TESSERA_WORKER_ENGINE_CUDA_DEVICE_CONTEXT_H_
#define TESSERA_WORKER_ENGINE_CUDA_DEVICE_CONTEXT_H_

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tessera {
namespace cuda {

// Makes `device` current for the calling thread; a no-op when this thread
// already selected it through this function.
absl::Status SetCurrentDevice(int device);

// Facts about one GPU, read once.
struct DeviceFacts {
  std::string name;
  int sm_count = 0;
  int compute_major = 0;
  int compute_minor = 0;
  size_t total_memory_bytes = 0;
  size_t l2_bytes = 0;
  size_t smem_per_block_bytes = 0;        // default limit without opt-in
  size_t smem_per_block_optin_bytes = 0;  // with cudaFuncAttributeMaxDynamicSharedMemorySize
};

class DeviceContext {
 public:
  // cuBLASLt workspace: 32 MiB covers Hopper's FP8 and bf16 kernels.
  static constexpr size_t kDefaultWorkspaceBytes = size_t{32} << 20;

  // Selects `device` for the calling thread and allocates the handle,
  // workspace and error flag. NOT_FOUND if there is no such device.
  static absl::StatusOr<std::unique_ptr<DeviceContext>> Create(
      int device, size_t workspace_bytes = kDefaultWorkspaceBytes);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  // SetCurrentDevice(device()): call on entry to every engine operation.
  absl::Status MakeCurrent() const { return SetCurrentDevice(device_); }

  int device() const { return device_; }
  const DeviceFacts& facts() const { return facts_; }
  cublasLtHandle_t cublaslt() const { return cublaslt_; }
  void* workspace() const { return workspace_; }
  size_t workspace_bytes() const { return workspace_bytes_; }
  // One int in device memory; kernels set it to 1 on a bad id/target.
  int* error_flag() const { return error_flag_; }
  // One int in device memory from which a persistent kernel's blocks take
  // their next work item (the attention forward). Its launcher zeroes it on
  // the stream first, so launches in one stream's order share it; like the
  // cuBLASLt workspace, it is not for two streams' kernels at once.
  int* work_counter() const { return work_counter_; }

  // Waits for `stream`, then reads and clears the error flag:
  // INVALID_ARGUMENT if a kernel raised it since the last check.
  absl::Status SynchronizeAndCheckFlag(cudaStream_t stream);

 private:
  explicit DeviceContext(int device) : device_(device) {}

  int device_;
  DeviceFacts facts_;
  cublasLtHandle_t cublaslt_ = nullptr;
  void* workspace_ = nullptr;  // [workspace_bytes_], cuBLASLt only
  size_t workspace_bytes_ = 0;
  int* error_flag_ = nullptr;
  int* work_counter_ = nullptr;
};

// OK if GPU `device` exists, else NOT_FOUND (with the visible count).
absl::Status CheckDeviceExists(int device);

}  // namespace cuda
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CUDA_DEVICE_CONTEXT_H_
