// BlockBufferRing's rules, checked by playing the step's schedule
// (train_step.cc) against them for many depths and depths of model: every
// block computes from a set holding its own weights, no all-gather
// overwrites a set whose weights a block has yet to read, no block writes a
// gradient set before the set's previous reduce-scatter was waited for, and
// every reduce-scatter is waited for by the end of the step.
#include "common/block_buffer_ring.h"

#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tessera {
namespace {

// Plays one step's forward and backward with `weights` and `grads` and
// returns the first rule broken, or "" when none is.
std::string PlayStep(const BlockBufferRing& weights, const BlockBufferRing& grads) {
  const int layers = weights.layers();
  std::vector<int> holds(weights.sets(), -1);  // the block whose weights each set holds
  std::vector<bool> forward_done(layers, false), backward_done(layers, false);
  std::vector<int> gathers(layers, 0);
  auto name = [](const char* what, int layer) { return std::string(what) + std::to_string(layer); };
  // A gather of `block` overwrites its set: whatever the set held must
  // have been read for the last time.
  auto gather = [&](int block, bool in_backward) -> std::string {
    if (block < 0 || block >= layers) return name("gathers a block out of range: ", block);
    const int held = holds[weights.SlotOf(block)];
    if (held >= 0 && held != block) {
      const bool read_again = !weights.HeldThroughBackward(held) || !in_backward;
      if (!forward_done[held] || (in_backward && !backward_done[held] && !read_again)) {
        return name("overwrites the weights of block ", held);
      }
      if (in_backward && !backward_done[held] && weights.HeldThroughBackward(held)) {
        return name("overwrites weights the backward still reads, block ", held);
      }
    }
    holds[weights.SlotOf(block)] = block;
    ++gathers[block];
    return "";
  };
  for (int l = 0; l < weights.FirstGathers(); ++l) {
    if (std::string e = gather(l, false); !e.empty()) return e;
  }
  for (int l = 0; l < layers; ++l) {
    if (const int ahead = weights.GatheredAheadOf(l); ahead >= 0) {
      if (std::string e = gather(ahead, false); !e.empty()) return e;
    }
    if (holds[weights.SlotOf(l)] != l) return name("forward reads another block's set: ", l);
    forward_done[l] = true;
  }
  for (int l = 0; l < layers; ++l) {
    if (gathers[l] != 1) return name("forward gathers a block other than once: ", l);
  }
  std::set<int> waited;                           // reduce-scatters waited for
  std::vector<int> grad_writer(grads.sets(), -1);  // last block to write each set
  for (int l = layers - 1; l >= 0; --l) {
    if (const int ahead = weights.RegatheredAheadOf(l); ahead >= 0) {
      if (ahead >= l) return name("gathers again a block already done: ", ahead);
      if (std::string e = gather(ahead, true); !e.empty()) return e;
    }
    if (holds[weights.SlotOf(l)] != l) return name("backward reads another block's set: ", l);
    if (const int previous = grads.GradientSetFreedBy(l); previous >= 0) waited.insert(previous);
    const int writer = grad_writer[grads.SlotOf(l)];
    if (writer >= 0 && waited.count(writer) == 0) {
      return name("writes a gradient set before its reduce-scatter finished, block ", l);
    }
    grad_writer[grads.SlotOf(l)] = l;
    backward_done[l] = true;
  }
  for (int l = 0; l < grads.UnwaitedAfterBackward(); ++l) waited.insert(l);
  for (int l = 0; l < layers; ++l) {
    if (waited.count(l) == 0) return name("never waits for the reduce-scatter of block ", l);
  }
  return "";
}

TEST(BlockBufferRing, TheStepKeepsEveryRuleAtEveryDepth) {
  for (int depth = 2; depth <= 5; ++depth) {
    for (int layers = 1; layers <= 9; ++layers) {
      SCOPED_TRACE(testing::Message() << "depth " << depth << ", " << layers << " blocks");
      const BlockBufferRing shared = BlockBufferRing::Shared(layers, depth);
      const BlockBufferRing own = BlockBufferRing::OnePerBlock(layers, depth);
      EXPECT_EQ(PlayStep(shared, shared), "") << "resharding after forward";
      EXPECT_EQ(PlayStep(own, shared), "") << "weights kept after forward";
      EXPECT_EQ(PlayStep(own, own), "") << "one rank";
      EXPECT_EQ(shared.sets(), std::min(layers, depth));
      EXPECT_EQ(own.sets(), layers);
    }
  }
}

TEST(BlockBufferRing, DepthTwoIsTheTrainersSchedule) {
  // Five blocks resharded: two sets; block l + 1 gathered as block l
  // begins; the last two blocks kept for the backward, which gathers block
  // l - 1 as block l begins; block l waits for block l + 2's reduce-scatter.
  const BlockBufferRing ring = BlockBufferRing::Shared(5);
  EXPECT_EQ(ring.sets(), 2);
  EXPECT_EQ(ring.FirstGathers(), 1);
  EXPECT_EQ(ring.SlotOf(3), 1);
  EXPECT_EQ(ring.GatheredAheadOf(0), 1);
  EXPECT_EQ(ring.GatheredAheadOf(4), -1);
  EXPECT_FALSE(ring.HeldThroughBackward(2));
  EXPECT_TRUE(ring.HeldThroughBackward(3));
  EXPECT_EQ(ring.RegatheredAheadOf(4), -1);
  EXPECT_EQ(ring.RegatheredAheadOf(3), 2);
  EXPECT_EQ(ring.RegatheredAheadOf(0), -1);
  EXPECT_EQ(ring.GradientSetFreedBy(2), 4);
  EXPECT_EQ(ring.GradientSetFreedBy(3), -1);
  EXPECT_EQ(ring.UnwaitedAfterBackward(), 2);
}

TEST(BlockBufferRing, DepthThreeGathersTwoAheadIntoThreeSets) {
  const BlockBufferRing ring = BlockBufferRing::Shared(6, 3);
  EXPECT_EQ(ring.sets(), 3);
  EXPECT_EQ(ring.FirstGathers(), 2);
  EXPECT_EQ(ring.GatheredAheadOf(1), 3);
  EXPECT_EQ(ring.RegatheredAheadOf(4), 2);
  EXPECT_EQ(ring.GradientSetFreedBy(1), 4);
  EXPECT_EQ(ring.UnwaitedAfterBackward(), 3);
}

}  // namespace
}  // namespace tessera
