// DescribeCudaDevice (see describe_device.h).
#include "worker/engine/cuda/describe_device.h"

#include <cuda_runtime.h>
#include <unistd.h>

#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/device_context.h"

namespace tessera {

absl::StatusOr<v1::DeviceInfo> DescribeCudaDevice(int index) {
  absl::Status exists = cuda::CheckDeviceExists(index);
  if (!exists.ok()) return exists;
  cudaDeviceProp props;
  CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&props, index));
  v1::DeviceInfo info;
  info.set_kind(v1::CUDA);
  info.set_index(index);
  info.set_name(props.name);
  info.set_memory_bytes(static_cast<int64_t>(props.totalGlobalMem));
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) == 0) info.set_host(host);
  return info;
}

}  // namespace tessera
