// ScratchBuffer: grow-on-demand scratch memory that never frees a buffer
// captured work may still point at (see scratch_buffer.h).
#include "worker/engine/cuda/scratch_buffer.h"

#include "common/status_macros.h"

namespace tessera {
namespace cuda {

ScratchBuffer::~ScratchBuffer() {
  if (data_ != nullptr) allocator_->Free(data_);
  for (void* p : retired_) allocator_->Free(p);
}

absl::StatusOr<void*> ScratchBuffer::Get(size_t bytes) {
  if (bytes <= bytes_) return data_;
  if (data_ != nullptr) {
    if (record_->captured()) {
      retired_.push_back(data_);
    } else {
      allocator_->Free(data_);
    }
  }
  data_ = nullptr;
  bytes_ = 0;
  RETURN_IF_ERROR(allocator_->Allocate(&data_, bytes));
  bytes_ = bytes;
  return data_;
}

}  // namespace cuda
}  // namespace tessera
