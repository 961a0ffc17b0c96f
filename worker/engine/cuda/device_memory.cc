// DeviceMalloc, DeviceBuffer, AllocatePinnedHost and DeviceScratchAllocator
// (see device_memory.h).
#include "worker/engine/cuda/device_memory.h"

#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
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

namespace {

class PinnedHostBuffer : public Buffer {
 public:
  PinnedHostBuffer(void* data, size_t bytes) : data_(data), bytes_(bytes) {}
  ~PinnedHostBuffer() override { cudaFreeHost(data_); }
  void* data() const override { return data_; }
  size_t bytes() const override { return bytes_; }

 private:
  void* data_;
  size_t bytes_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Buffer>> AllocatePinnedHost(size_t bytes) {
  void* p = nullptr;
  const cudaError_t err = cudaHostAlloc(&p, bytes == 0 ? 256 : bytes, cudaHostAllocDefault);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(absl::StrCat("page-locked host allocation of ", bytes,
                                                     " bytes failed: ", cudaGetErrorString(err)));
  }
  return std::unique_ptr<Buffer>(new PinnedHostBuffer(p, bytes));
}

void DeviceScratchAllocator::Free(void* p) { cudaFree(p); }

}  // namespace cuda
}  // namespace tessera
