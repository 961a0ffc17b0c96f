// The FusedAdam plan in device memory: the one host image of the rank's
// shard table and block map that CreateAdamPlan uploads with a single copy,
// and the plan that owns the upload. The table's records are the
// DeviceAdamShard and the block size kAdamChunk that the kernels in
// fused_adam.cu read (declared beside their launchers in kernels.h); this
// file is the only place that lays those bytes out.
//
// Image layout, each part starting on a 256-byte boundary:
//   [num_shards] DeviceAdamShard | [num_blocks] int shard index |
//   [num_blocks] int64 element offset
// followed in the device allocation (not in the image) by [num_blocks]
// fp32 partial sums for GradSumSquares. A shard of n elements owns
// ceil(n / kAdamChunk) blocks; an empty shard owns none.
#ifndef TESSERA_WORKER_ENGINE_CUDA_FUSED_ADAM_PLAN_H_
#define TESSERA_WORKER_ENGINE_CUDA_FUSED_ADAM_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/engine/cuda/kernels.h"
#include "worker/ops/ops.h"

namespace tessera {
namespace cuda {

struct AdamPlanImage {
  std::vector<uint8_t> bytes;     // the table and block map, as uploaded
  size_t block_shard_offset = 0;  // byte offsets into `bytes` (the table is at 0)
  size_t block_offset_offset = 0;
  size_t partials_offset = 0;  // == bytes.size(): the partials follow the image
  size_t device_bytes = 0;     // image plus partials: the one device allocation
  int num_shards = 0;
  int num_blocks = 0;
};

// INVALID_ARGUMENT names the shard and field whose element count or dtype
// does not fit (an FP8 shard must be e4m3 with its scale set, else bf16).
absl::StatusOr<AdamPlanImage> BuildAdamPlanImage(absl::Span<const AdamShard> shards);

// The plan CudaOps hands out: one device allocation holding the image and
// the partial sums, freed with the plan.
class CudaAdamPlan : public AdamPlan {
 public:
  ~CudaAdamPlan() override;
  void* storage = nullptr;
  DeviceAdamShard* table = nullptr;
  int* block_shard = nullptr;
  int64_t* block_offset = nullptr;
  float* partials = nullptr;
  int num_shards = 0;
  int num_blocks = 0;
};

// Allocates the plan's device memory and uploads the image (synchronously,
// once at setup).
absl::StatusOr<std::unique_ptr<CudaAdamPlan>> UploadAdamPlan(const AdamPlanImage& image);

}  // namespace cuda
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CUDA_FUSED_ADAM_PLAN_H_
