// Device memory for the CUDA engine: cudaMalloc that leaves no stale error
// behind, the engine's Buffer, the allocator its scratch buffers use, and
// the page-locked host memory checkpoint snapshots are copied into.
// A failed cudaMalloc is also recorded as the thread's "last error", which
// the next launch check would otherwise report against an innocent kernel,
// so every engine allocation goes through DeviceMalloc.
#ifndef TESSERA_WORKER_ENGINE_CUDA_DEVICE_MEMORY_H_
#define TESSERA_WORKER_ENGINE_CUDA_DEVICE_MEMORY_H_

#include <cstddef>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/engine/cuda/scratch_buffer.h"
#include "worker/ops/ops.h"

namespace tessera {
namespace cuda {

// RESOURCE_EXHAUSTED when the device is out of memory; *p is then null and
// the thread's last CUDA error is cleared.
absl::Status DeviceMalloc(void** p, size_t bytes);

// An Ops::Allocate result: device memory freed with the buffer.
class DeviceBuffer : public Buffer {
 public:
  DeviceBuffer(void* data, size_t bytes) : data_(data), bytes_(bytes) {}
  ~DeviceBuffer() override;
  void* data() const override { return data_; }
  size_t bytes() const override { return bytes_; }

 private:
  void* data_;
  size_t bytes_;
};

// An Ops::AllocateHost result: page-locked host memory (cudaHostAlloc), so a
// device-to-host copy into it runs at the bus's speed and needs no staging
// copy; freed with the buffer. RESOURCE_EXHAUSTED, with no stale error left
// behind, when the host cannot lock that much.
absl::StatusOr<std::unique_ptr<Buffer>> AllocatePinnedHost(size_t bytes);

// cudaMalloc / cudaFree for ScratchBuffer, on the calling thread's device.
class DeviceScratchAllocator : public ScratchAllocator {
 public:
  absl::Status Allocate(void** p, size_t bytes) override { return DeviceMalloc(p, bytes); }
  void Free(void* p) override;
};

}  // namespace cuda
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CUDA_DEVICE_MEMORY_H_
