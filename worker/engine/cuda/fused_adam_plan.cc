// Builds and uploads the FusedAdam plan's image (layout in fused_adam_plan.h).
#include "worker/engine/cuda/fused_adam_plan.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/device_memory.h"
#include "worker/ops/op_checks.h"

namespace tessera {
namespace cuda {
namespace {

size_t RoundUp(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

absl::StatusOr<AdamPlanImage> BuildAdamPlanImage(absl::Span<const AdamShard> shards) {
  RETURN_IF_ERROR(CheckAdamShards(shards));
  std::vector<DeviceAdamShard> table;
  std::vector<int> block_shard;
  std::vector<int64_t> block_offset;
  for (size_t i = 0; i < shards.size(); ++i) {
    const AdamShard& s = shards[i];
    const int64_t n = s.master.NumElements();
    const bool fp8 = s.fp8.dtype == DType::kE4M3;
    table.push_back({static_cast<float*>(s.master.data), static_cast<const float*>(s.grad.data),
                     static_cast<float*>(s.exp_avg.data), static_cast<float*>(s.exp_avg_sq.data),
                     s.fp8.data, s.fp8.scale, s.fp8.scale_inv, s.fp8.amax, n, fp8 ? 1 : 0,
                     s.apply_weight_decay ? 1 : 0});
    for (int64_t off = 0; off < n; off += kAdamChunk) {
      block_shard.push_back(static_cast<int>(i));
      block_offset.push_back(off);
    }
  }
  AdamPlanImage image;
  image.num_shards = static_cast<int>(table.size());
  image.num_blocks = static_cast<int>(block_shard.size());
  const size_t table_bytes = RoundUp(table.size() * sizeof(DeviceAdamShard));
  const size_t shard_bytes = RoundUp(block_shard.size() * sizeof(int));
  const size_t offset_bytes = RoundUp(block_offset.size() * sizeof(int64_t));
  const size_t partial_bytes = RoundUp(std::max<size_t>(1, block_shard.size()) * sizeof(float));
  image.block_shard_offset = table_bytes;
  image.block_offset_offset = table_bytes + shard_bytes;
  image.partials_offset = table_bytes + shard_bytes + offset_bytes;
  image.device_bytes = image.partials_offset + partial_bytes;
  image.bytes.assign(image.partials_offset, 0);
  // A plan with no shards has empty vectors, whose data() may be null, which
  // memcpy must not be given even for zero bytes.
  if (!table.empty()) {
    std::memcpy(image.bytes.data(), table.data(), table.size() * sizeof(DeviceAdamShard));
  }
  if (!block_shard.empty()) {
    std::memcpy(image.bytes.data() + image.block_shard_offset, block_shard.data(),
                block_shard.size() * sizeof(int));
    std::memcpy(image.bytes.data() + image.block_offset_offset, block_offset.data(),
                block_offset.size() * sizeof(int64_t));
  }
  return image;
}

CudaAdamPlan::~CudaAdamPlan() {
  if (storage != nullptr) cudaFree(storage);
}

absl::StatusOr<std::unique_ptr<CudaAdamPlan>> UploadAdamPlan(const AdamPlanImage& image) {
  auto plan = std::make_unique<CudaAdamPlan>();
  plan->num_shards = image.num_shards;
  plan->num_blocks = image.num_blocks;
  RETURN_IF_ERROR(DeviceMalloc(&plan->storage, image.device_bytes));
  uint8_t* base = static_cast<uint8_t*>(plan->storage);
  plan->table = reinterpret_cast<DeviceAdamShard*>(base);
  plan->block_shard = reinterpret_cast<int*>(base + image.block_shard_offset);
  plan->block_offset = reinterpret_cast<int64_t*>(base + image.block_offset_offset);
  plan->partials = reinterpret_cast<float*>(base + image.partials_offset);
  if (!image.bytes.empty()) {
    CUDA_RETURN_IF_ERROR(
        cudaMemcpy(plan->storage, image.bytes.data(), image.bytes.size(), cudaMemcpyHostToDevice));
  }
  return plan;
}

}  // namespace cuda
}  // namespace tessera
