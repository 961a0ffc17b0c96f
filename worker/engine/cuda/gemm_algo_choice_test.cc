// The GEMM candidate rule on made-up heuristic answers (no GPU needed):
// deterministic selection keeps the heuristic's order and drops only
// unusable candidates and split-K ones without a documented ordered
// reduction; timed selection keeps every usable candidate.
#include "worker/engine/cuda/gemm_algo_choice.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace tessera {
namespace cuda {
namespace {

GemmCandidate Usable(int32_t split_k = 1, uint32_t scheme = kReductionNone) {
  return GemmCandidate{true, split_k, scheme};
}

TEST(GemmAlgoChoice, FixedReductionOrder) {
  EXPECT_TRUE(HasFixedReductionOrder(Usable()));
  EXPECT_TRUE(HasFixedReductionOrder(Usable(0)));
  EXPECT_TRUE(HasFixedReductionOrder(Usable(1, kReductionInPlace)));  // scheme unused
  EXPECT_TRUE(HasFixedReductionOrder(Usable(4, kReductionInPlace)));
  EXPECT_TRUE(HasFixedReductionOrder(Usable(4, kReductionComputeType)));
  EXPECT_TRUE(HasFixedReductionOrder(Usable(2, kReductionOutputType)));
  EXPECT_FALSE(HasFixedReductionOrder(Usable(2, kReductionNone)));
  EXPECT_FALSE(HasFixedReductionOrder(Usable(2, 8)));     // not a documented scheme
  EXPECT_FALSE(HasFixedReductionOrder(Usable(2, 0x7)));   // a mask, not one scheme
}

TEST(GemmAlgoChoice, DeterministicKeepsTheHeuristicOrderOfFixedOrderCandidates) {
  const std::vector<GemmCandidate> candidates = {
      GemmCandidate{false, 1, kReductionNone},  // 0: the heuristic's state was not success
      Usable(3, 16),                            // 1: undocumented scheme
      Usable(2, kReductionComputeType),         // 2
      Usable(),                                 // 3
      Usable(2, kReductionNone),                // 4: split without an ordered reduction
      Usable(8, kReductionInPlace),             // 5
  };
  EXPECT_EQ(GemmCandidatesToTry(candidates, GemmAlgoSelection::kDeterministic),
            (std::vector<int>{2, 3, 5}));
  EXPECT_EQ(GemmCandidatesToTry(candidates, GemmAlgoSelection::kTimed),
            (std::vector<int>{1, 2, 3, 4, 5}));
}

TEST(GemmAlgoChoice, TheSameAnswerGivesTheSameChoice) {
  const std::vector<GemmCandidate> candidates = {Usable(), Usable(2, kReductionInPlace), Usable()};
  const std::vector<int> first = GemmCandidatesToTry(candidates, GemmAlgoSelection::kDeterministic);
  EXPECT_EQ(first, GemmCandidatesToTry(candidates, GemmAlgoSelection::kDeterministic));
  EXPECT_EQ(first.front(), 0) << "the heuristic's best fixed-order candidate runs first";
}

TEST(GemmAlgoChoice, NothingUsableKeepsNothing) {
  EXPECT_TRUE(GemmCandidatesToTry({}, GemmAlgoSelection::kDeterministic).empty());
  const std::vector<GemmCandidate> split_only = {Usable(2, kReductionNone)};
  EXPECT_TRUE(GemmCandidatesToTry(split_only, GemmAlgoSelection::kDeterministic).empty());
  EXPECT_EQ(GemmCandidatesToTry(split_only, GemmAlgoSelection::kTimed), (std::vector<int>{0}));
}

TEST(GemmAlgoChoice, PointerAlignment) {
  alignas(256) static char block[1024];
  EXPECT_EQ(PointerAlignmentBytes(nullptr), 256u);
  EXPECT_EQ(PointerAlignmentBytes(block), 256u);
  EXPECT_EQ(PointerAlignmentBytes(block + 512), 256u);  // capped at cuBLASLt's default
  EXPECT_EQ(PointerAlignmentBytes(block + 128), 128u);
  EXPECT_EQ(PointerAlignmentBytes(block + 48), 16u);
  EXPECT_EQ(PointerAlignmentBytes(block + 2), 2u);
  EXPECT_EQ(PointerAlignmentBytes(block + 7), 1u);
}

}  // namespace
}  // namespace cuda
}  // namespace tessera
