// Device descriptions and trainer construction per device (see
// trainer_factory.h).
#include "worker/trainer/trainer_factory.h"

#include <unistd.h>

#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/engine/cpu/cpu_ops.h"
#include "worker/engine/cuda/cuda_ops.h"
#include "worker/engine/cuda/nccl_communicator.h"
#include "worker/trainer/fsdp_trainer.h"

namespace tessera {
namespace {

absl::StatusOr<int> CudaIndex(const std::string& device) {
  int index = -1;
  if (!absl::StartsWith(device, "cuda:") || !absl::SimpleAtoi(device.substr(5), &index) ||
      index < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("device: '", device, "' is not cpu or cuda:N"));
  }
  return index;
}

}  // namespace

absl::StatusOr<v1::DeviceInfo> DescribeDevice(const std::string& device) {
  v1::DeviceInfo info;
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  info.set_host(host);
  if (device == "cpu") {
    info.set_kind(v1::CPU);
    info.set_index(0);
    info.set_name(absl::StrCat("cpu (", std::thread::hardware_concurrency(), " cores)"));
    info.set_memory_bytes(static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE));
    return info;
  }
  absl::StatusOr<int> index = CudaIndex(device);
  if (!index.ok()) return index.status();
  return DescribeCudaDevice(*index);
}

CudaEngineOptions EngineOptionsFor(const v1::JobSpec& spec) {
  CudaEngineOptions options;
  options.time_gemm_algorithms = spec.nondeterministic_gemm_tuning();
  switch (spec.attention_kernels()) {
    case v1::ATTENTION_KERNELS_TESSERA:
      options.attention = CudaEngineOptions::Attention::kTessera;
      break;
    case v1::ATTENTION_KERNELS_CUDNN:
      options.attention = CudaEngineOptions::Attention::kCudnn;
      break;
    default:
      options.attention = CudaEngineOptions::Attention::kAuto;
      break;
  }
  options.attention_atomic_backward = spec.nondeterministic_attention_backward();
  return options;
}

absl::StatusOr<std::unique_ptr<Trainer>> CreateTrainer(const std::string& device,
                                                       const v1::JobSpec& spec,
                                                       const std::string& data_trace_dir) {
  if (device == "cpu") {
    auto trainer = std::make_unique<FsdpTrainer>(CreateCpuOps(), CreateGlooCommunicator);
    trainer->set_data_trace_dir(data_trace_dir);
    return std::unique_ptr<Trainer>(std::move(trainer));
  }
  absl::StatusOr<int> index = CudaIndex(device);
  if (!index.ok()) return index.status();
  absl::StatusOr<std::unique_ptr<Ops>> ops = CreateCudaOps(*index, EngineOptionsFor(spec));
  if (!ops.ok()) return ops.status();
  const int device_index = *index;
  auto trainer = std::make_unique<FsdpTrainer>(
      std::move(*ops), [device_index](RendezvousStore* store, int rank, int world,
                                      const std::string&, absl::Duration timeout) {
        return CreateNcclCommunicator(store, rank, world, device_index, timeout);
      });
  trainer->set_data_trace_dir(data_trace_dir);
  return std::unique_ptr<Trainer>(std::move(trainer));
}

}  // namespace tessera
