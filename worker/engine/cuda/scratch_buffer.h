// Engine scratch memory that grows with the largest shape seen and is then
// reused, and the one rule that makes it safe under captured work: once the
// engine has captured work (a CUDA graph), a buffer it outgrows is retired,
// kept until the buffer object goes, instead of freed. A captured graph
// keeps the raw pointers it was recorded with, so freeing the smaller
// buffer would leave every later replay writing into memory that may by
// then belong to someone else.
//
// The rule is written over a small allocator interface so that it can be
// tested without a device (scratch_buffer_test.cc); the CUDA engine plugs
// in cudaMalloc/cudaFree (device_memory.h).
#ifndef TESSERA_WORKER_ENGINE_CUDA_SCRATCH_BUFFER_H_
#define TESSERA_WORKER_ENGINE_CUDA_SCRATCH_BUFFER_H_

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tessera {
namespace cuda {

class ScratchAllocator {
 public:
  virtual ~ScratchAllocator() = default;
  // On failure *p is null and the status says why (RESOURCE_EXHAUSTED for
  // out of memory).
  virtual absl::Status Allocate(void** p, size_t bytes) = 0;
  virtual void Free(void* p) = 0;
};

// Whether the engine has captured work yet; shared by all of its scratch
// buffers, and only ever turned on.
class CaptureRecord {
 public:
  void NoteCapture() { captured_ = true; }
  bool captured() const { return captured_; }

 private:
  bool captured_ = false;
};

class ScratchBuffer {
 public:
  // `allocator` and `record` must outlive the buffer.
  ScratchBuffer(ScratchAllocator* allocator, const CaptureRecord* record)
      : allocator_(allocator), record_(record) {}
  ~ScratchBuffer();
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;

  // At least `bytes` of memory, the same pointer as the last call unless
  // the buffer had to grow. Growing frees the old buffer, or retires it once
  // work has been captured. A failed growth leaves no buffer behind (the
  // next call allocates afresh, whatever its size), never a null pointer
  // with a stale size.
  absl::StatusOr<void*> Get(size_t bytes);

  size_t bytes() const { return bytes_; }
  size_t retired() const { return retired_.size(); }  // outgrown buffers still held

 private:
  ScratchAllocator* allocator_;
  const CaptureRecord* record_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  std::vector<void*> retired_;
};

}  // namespace cuda
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CUDA_SCRATCH_BUFFER_H_
