// An owning tensor in engine memory: the Buffer from Ops::Allocate plus the
// TensorDesc that views it. The trainer allocates every DeviceTensor at
// setup; the steady-state step only passes their descriptors to ops.
#ifndef TESSERA_WORKER_OPS_DEVICE_TENSOR_H_
#define TESSERA_WORKER_OPS_DEVICE_TENSOR_H_

#include <memory>

#include "absl/status/statusor.h"
#include "worker/ops/ops.h"

namespace tessera {

struct DeviceTensor {
  std::unique_ptr<Buffer> buffer;
  TensorDesc desc;

  template <typename T>
  T* data() const { return static_cast<T*>(desc.data); }
};

// Zero-filled (the engine's Allocate contract) tensor of `shape`.
inline absl::StatusOr<DeviceTensor> AllocateTensor(Ops& ops, DType dtype, Shape shape) {
  DeviceTensor t;
  size_t bytes = static_cast<size_t>(shape.NumElements()) * DTypeSize(dtype);
  absl::StatusOr<std::unique_ptr<Buffer>> buffer = ops.Allocate(bytes);
  if (!buffer.ok()) return buffer.status();
  t.buffer = std::move(*buffer);
  if (bytes > 0) {
    absl::Status s = ops.Memset(t.buffer->data(), 0, bytes, nullptr);
    if (!s.ok()) return s;
  }
  t.desc = MakeTensor(t.buffer->data(), dtype, shape);
  return t;
}

// A view of `t` with another shape of the same element count.
inline TensorDesc Reshaped(const TensorDesc& t, Shape shape) {
  TensorDesc v = t;
  v.shape = shape;
  return v;
}

// A view of the first `rows` entries of `t`'s leading dimension (the first
// sequences of a [B, ...] tensor, the first tokens of a [T, ...] one): a
// prefix of its memory, every other dimension kept. For running a smaller
// batch through buffers sized for the full one. A tensor without
// dimensions (an unset TensorDesc) comes back as it is.
inline TensorDesc LeadingRows(const TensorDesc& t, int64_t rows) {
  TensorDesc v = t;
  if (v.shape.rank > 0) v.shape.dims[0] = rows;
  return v;
}

}  // namespace tessera

#endif  // TESSERA_WORKER_OPS_DEVICE_TENSOR_H_
