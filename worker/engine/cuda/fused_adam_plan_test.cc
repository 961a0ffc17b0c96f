// The FusedAdam plan's host image without a device: every part starts on a
// 256-byte boundary, the table holds each shard's pointers and flags as the
// kernels read them, each shard owns ceil(n / kAdamChunk) blocks (an empty
// shard none) with the right offsets, and malformed shards are refused
// with the shard and field named. Runs in CI (no GPU).
#include "worker/engine/cuda/fused_adam_plan.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace tessera {
namespace cuda {
namespace {

// Descriptors over fake, never-read addresses: the image only copies them.
TensorDesc At(uintptr_t address, DType dtype, int64_t n) {
  return MakeTensor(reinterpret_cast<void*>(address), dtype, Shape{n});
}

AdamShard Shard(uintptr_t base, int64_t n, bool fp8, bool decay) {
  AdamShard s;
  s.master = At(base + 0x000, DType::kFloat32, n);
  s.grad = At(base + 0x100, DType::kFloat32, n);
  s.exp_avg = At(base + 0x200, DType::kFloat32, n);
  s.exp_avg_sq = At(base + 0x300, DType::kFloat32, n);
  s.fp8 = At(base + 0x400, fp8 ? DType::kE4M3 : DType::kBFloat16, n);
  if (fp8) {
    s.fp8.scale = reinterpret_cast<float*>(base + 0x500);
    s.fp8.scale_inv = reinterpret_cast<float*>(base + 0x510);
    s.fp8.amax = reinterpret_cast<float*>(base + 0x520);
  }
  s.apply_weight_decay = decay;
  return s;
}

TEST(AdamPlanImage, LaysOutTheTableAndBlockMapTheKernelsRead) {
  const std::vector<AdamShard> shards = {Shard(0x10000, 2 * kAdamChunk + 1, true, true),
                                         Shard(0x20000, 0, false, false),
                                         Shard(0x30000, kAdamChunk, false, true)};
  auto image = BuildAdamPlanImage(shards);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->num_shards, 3);
  EXPECT_EQ(image->num_blocks, 4);  // 3 + 0 + 1
  for (size_t offset : {image->block_shard_offset, image->block_offset_offset,
                        image->partials_offset, image->device_bytes}) {
    EXPECT_EQ(offset % 256, 0u) << offset;
  }
  EXPECT_EQ(image->bytes.size(), image->partials_offset);
  EXPECT_GE(image->device_bytes, image->partials_offset + 4 * sizeof(float));

  std::vector<DeviceAdamShard> table(3);
  std::memcpy(table.data(), image->bytes.data(), 3 * sizeof(DeviceAdamShard));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(table[0].master), 0x10000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(table[0].grad), 0x10100u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(table[0].m), 0x10200u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(table[0].v), 0x10300u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(table[0].fp8), 0x10400u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(table[0].scale), 0x10500u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(table[0].scale_inv), 0x10510u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(table[0].amax), 0x10520u);
  EXPECT_EQ(table[0].numel, 2 * kAdamChunk + 1);
  EXPECT_EQ(table[0].is_fp8, 1);
  EXPECT_EQ(table[0].decay, 1);
  EXPECT_EQ(table[1].numel, 0);
  EXPECT_EQ(table[1].is_fp8, 0);
  EXPECT_EQ(table[1].decay, 0);
  EXPECT_EQ(table[1].scale, nullptr);
  EXPECT_EQ(table[2].is_fp8, 0);

  std::vector<int> block_shard(4);
  std::vector<int64_t> block_offset(4);
  std::memcpy(block_shard.data(), image->bytes.data() + image->block_shard_offset, 4 * sizeof(int));
  std::memcpy(block_offset.data(), image->bytes.data() + image->block_offset_offset,
              4 * sizeof(int64_t));
  EXPECT_EQ(block_shard, (std::vector<int>{0, 0, 0, 2}));
  EXPECT_EQ(block_offset, (std::vector<int64_t>{0, kAdamChunk, 2 * kAdamChunk, 0}));
}

TEST(AdamPlanImage, NoShardsIsAnEmptyPlanWithRoomForOnePartial) {
  auto image = BuildAdamPlanImage({});
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->num_shards, 0);
  EXPECT_EQ(image->num_blocks, 0);
  EXPECT_TRUE(image->bytes.empty());
  EXPECT_EQ(image->device_bytes, 256u);
}

TEST(AdamPlanImage, RefusesMalformedShardsNamingThem) {
  AdamShard count = Shard(0x10000, 8, true, true);
  count.grad.shape = Shape{7};
  AdamShard dtype = Shard(0x10000, 8, true, true);
  dtype.fp8.dtype = DType::kE5M2;
  AdamShard scale = Shard(0x10000, 8, true, true);
  scale.fp8.scale = nullptr;
  for (const auto& [shard, want] :
       {std::pair{count, "shard 1: grad: has 7 elements"}, std::pair{dtype, "shard 1: fp8: must be"},
        std::pair{scale, "shard 1: fp8.scale: must be set"}}) {
    const std::vector<AdamShard> shards = {Shard(0x20000, 8, false, true), shard};
    auto image = BuildAdamPlanImage(shards);
    EXPECT_EQ(image.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(image.status().message().rfind(want, 0), 0u) << image.status();
  }
}

}  // namespace
}  // namespace cuda
}  // namespace tessera
