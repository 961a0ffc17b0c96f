// DeviceMalloc, DeviceBuffer and DeviceScratchAllocator (see device_memory.h).
#include "worker/engine/cuda/device_memory.h"

#include <cuda_runtime.h>

#include "worker/engine/cuda/cuda_check.h"

namespace tessera {
namespace cuda {

absl::Status DeviceMalloc(void** p, size_t bytes) {
  const cudaError_t err = cudaMalloc(p, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();
    *p = nullptr;
  }
  CUDA_RETURN_IF_ERROR(err);
  return absl::OkStatus();
}

DeviceBuffer::~DeviceBuffer() { cudaFree(data_); }

void DeviceScratchAllocator::Free(void* p) { cudaFree(p); }

}  // namespace cuda
}  // namespace tessera
