// Test-only harness that runs the same op on two engines. Host tensors are
// uploaded through Ops::Allocate/CopyToDevice (so one test body serves the
// CPU reference and the CUDA engine), outputs are poisoned first, and
// everything is downloaded back after Synchronize for comparison.
#ifndef TESSERA_WORKER_ENGINE_CUDA_ENGINE_HARNESS_FOR_TEST_H_
#define TESSERA_WORKER_ENGINE_CUDA_ENGINE_HARNESS_FOR_TEST_H_

#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "worker/ops/ops.h"

namespace tessera {
namespace testing {

struct HostTensor {
  DType dtype = DType::kFloat32;
  Shape shape;
  std::vector<uint8_t> bytes;

  static HostTensor Of(DType dtype, Shape shape) {
    HostTensor t;
    t.dtype = dtype;
    t.shape = shape;
    t.bytes.assign(static_cast<size_t>(shape.NumElements()) * DTypeSize(dtype), 0);
    return t;
  }
  template <typename T>
  static HostTensor FromVector(DType dtype, Shape shape, const std::vector<T>& v) {
    HostTensor t = Of(dtype, shape);
    std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
    return t;
  }
  template <typename T>
  std::vector<T> As() const {
    std::vector<T> v(bytes.size() / sizeof(T));
    std::memcpy(v.data(), bytes.data(), bytes.size());
    return v;
  }
  HostTensor& Poison() {
    std::fill(bytes.begin(), bytes.end(), 0xFF);
    return *this;
  }
};

// Uploads `tensors` to `ops`, runs body with their device descriptors,
// synchronizes and downloads them back into a copy that is returned.
inline absl::StatusOr<std::vector<HostTensor>> RunOn(
    Ops& ops, const std::vector<HostTensor>& tensors,
    const std::function<absl::Status(Ops&, std::vector<TensorDesc>&)>& body) {
  std::vector<std::unique_ptr<Buffer>> buffers;
  std::vector<TensorDesc> descs;
  for (const HostTensor& t : tensors) {
    auto buffer = ops.Allocate(t.bytes.size());
    if (!buffer.ok()) return buffer.status();
    absl::Status s = ops.CopyToDevice((*buffer)->data(), t.bytes.data(), t.bytes.size(), nullptr);
    if (!s.ok()) return s;
    descs.push_back(MakeTensor((*buffer)->data(), t.dtype, t.shape));
    buffers.push_back(std::move(*buffer));
  }
  absl::Status s = body(ops, descs);
  if (!s.ok()) return s;
  s = ops.Synchronize(nullptr);
  if (!s.ok()) return s;
  std::vector<HostTensor> out = tensors;
  for (size_t i = 0; i < out.size(); ++i) {
    s = ops.CopyToHost(out[i].bytes.data(), descs[i].data, out[i].bytes.size(), nullptr);
    if (!s.ok()) return s;
  }
  return out;
}

}  // namespace testing
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CUDA_ENGINE_HARNESS_FOR_TEST_H_
