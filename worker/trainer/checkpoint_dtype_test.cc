// The trainer writes a parameter's compute dtype into its state file as its
// DType value (fsdp_checkpoint.cc), and formats/checkpoint_state.h reads the
// file with the codes it names itself, so that the file format does not
// depend on the ops API. This holds the two numberings, and the element
// sizes, to each other.
#include "formats/checkpoint_state.h"
#include "gtest/gtest.h"
#include "worker/ops/tensor.h"

namespace tessera {
namespace {

static_assert(static_cast<int64_t>(DType::kBFloat16) == kStateDTypeBFloat16);
static_assert(static_cast<int64_t>(DType::kE4M3) == kStateDTypeE4M3);

TEST(CheckpointDType, StateFileCodesAreTheTrainersDTypes) {
  EXPECT_EQ(DTypeSize(DType::kBFloat16), 2u);
  EXPECT_EQ(DTypeSize(DType::kE4M3), 1u);
}

}  // namespace
}  // namespace tessera
