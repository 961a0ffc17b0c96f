// The TMA descriptors' argument checks (attention_tensor_maps.h), which run
// on the host before the driver is asked for anything, so they need no GPU:
// a misaligned base, a head dim the kernels do not take, or a box past the
// TMA unit's 256 rows is INVALID_ARGUMENT with the reason named.
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "worker/engine/cuda/attention_tensor_maps.h"

namespace tessera {
namespace cuda {
namespace {

alignas(16) unsigned char buffer[64];

void ExpectInvalid(const absl::StatusOr<CUtensorMap>& map, const std::string& reason) {
  ASSERT_FALSE(map.ok());
  EXPECT_EQ(map.status().code(), absl::StatusCode::kInvalidArgument) << map.status();
  EXPECT_NE(std::string(map.status().message()).find(reason), std::string::npos) << map.status();
}

TEST(AttentionTensorMaps, MisalignedTensorsAreInvalidArgument) {
  ExpectInvalid(HeadRowsTensorMap(buffer + 8, 1, 128, 4, 128, 128), "16-byte aligned");
}

TEST(AttentionTensorMaps, HeadDimsOtherThan64And128AreInvalidArgument) {
  for (int head_dim : {0, 32, 96, 256}) {
    ExpectInvalid(HeadRowsTensorMap(buffer, 1, 128, 4, head_dim, 128), "has no TMA map (64 or 128)");
  }
}

TEST(AttentionTensorMaps, BoxesOutsideOneTo256RowsAreInvalidArgument) {
  for (int rows : {0, -1, 257}) {
    ExpectInvalid(HeadRowsTensorMap(buffer, 1, 128, 4, 64, rows), "rows (1 to 256)");
  }
}

}  // namespace
}  // namespace cuda
}  // namespace tessera
