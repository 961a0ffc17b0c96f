// What the worker daemon reports about its GPU when it registers with the
// coordinator: name, memory and host. Kept apart from the engine so the
// daemon can describe a device without creating one (no cuBLASLt handle,
// no allocation).
#ifndef TESSERA_WORKER_ENGINE_CUDA_DESCRIBE_DEVICE_H_
#define TESSERA_WORKER_ENGINE_CUDA_DESCRIBE_DEVICE_H_

#include "absl/status/statusor.h"
#include "proto/tessera/v1/worker.pb.h"

namespace tessera {

// Name, memory and host of GPU `index`; NOT_FOUND if there is no such GPU.
absl::StatusOr<v1::DeviceInfo> DescribeCudaDevice(int index);

}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CUDA_DESCRIBE_DEVICE_H_
