// BlockBufferRing: which buffer set each transformer block uses, and which
// collective must finish before a block may take its set over.
//
// FSDP keeps only a few full-size buffer sets (gathered weights, full fp32
// gradients) and lets consecutive blocks use them in turn. Reuse is safe
// only when the step waits for the right collective at the right place:
//  * forward: block l + depth - 1's all-gather is started when block l
//    begins, into the set block l - 1 has just finished reading;
//  * backward: block l writes the gradient set block l + sets last wrote,
//    so it first waits for that block's reduce-scatter; and it starts the
//    all-gather of block l - (depth - 1) into the set block l + 1 has just
//    finished reading;
//  * the last `sets` blocks of the forward are still in their sets when the
//    backward starts, so they are not gathered again;
//  * after the backward, the reduce-scatters of blocks [0, sets) are the
//    ones no later block waited for.
// The allocation (FsdpTrainer::AllocateState), the step (train_step.cc) and
// the memory estimate (memory_estimate.cc) all read these rules from here,
// so a change of depth is one number. `depth` (at least 2) is how many
// blocks' buffers are in use at once: the one computing and the depth - 1
// in flight.
//
// A ring that does not share its sets (one set per block: weights kept
// after forward, or one rank, whose sets are views of its shards) has the
// same interface; it never waits for a set and never gathers again.
#ifndef TESSERA_COMMON_BLOCK_BUFFER_RING_H_
#define TESSERA_COMMON_BLOCK_BUFFER_RING_H_

#include <algorithm>

namespace tessera {

class BlockBufferRing {
 public:
  // The trainer's depth: block l + 1 is gathered while block l computes,
  // and block l + 1's gradients are reduce-scattered while block l's
  // backward runs.
  static constexpr int kDefaultDepth = 2;

  // `layers` blocks taking turns over min(layers, depth) sets.
  static BlockBufferRing Shared(int layers, int depth = kDefaultDepth) {
    return BlockBufferRing(layers, depth, std::min(layers, std::max(depth, kMinDepth)));
  }
  // One set per block; `depth` still says how far ahead gathers run.
  static BlockBufferRing OnePerBlock(int layers, int depth = kDefaultDepth) {
    return BlockBufferRing(layers, depth, layers);
  }

  int layers() const { return layers_; }
  int depth() const { return depth_; }
  // Buffer sets to allocate.
  int sets() const { return sets_; }
  bool shares_sets() const { return sets_ < layers_; }
  // The set block `layer` uses.
  int SlotOf(int layer) const { return layer % sets_; }

  // Forward: the blocks whose all-gathers are started before block 0, in
  // order: [0, FirstGathers()).
  int FirstGathers() const { return std::min(layers_, depth_ - 1); }
  // Forward: the block whose all-gather is started as block `layer`
  // begins (its set was last read by block layer - 1), or -1.
  int GatheredAheadOf(int layer) const {
    const int ahead = layer + depth_ - 1;
    return ahead < layers_ ? ahead : -1;
  }
  // Whether block `layer`'s weights are still in its set when the backward
  // reaches it. Only a shared ring gathers again.
  bool HeldThroughBackward(int layer) const { return !shares_sets() || layer >= layers_ - sets_; }
  // Backward: the block whose all-gather is started as block `layer`'s
  // backward begins (its set was last read by block layer + 1), or -1.
  int RegatheredAheadOf(int layer) const {
    const int ahead = layer - (depth_ - 1);
    return ahead >= 0 && !HeldThroughBackward(ahead) ? ahead : -1;
  }
  // Backward: the block whose reduce-scatter must finish before block
  // `layer` writes its gradient set (the set's previous writer), or -1.
  int GradientSetFreedBy(int layer) const {
    const int previous = layer + sets_;
    return shares_sets() && previous < layers_ ? previous : -1;
  }
  // After the backward: the reduce-scatters no later block waited for are
  // those of blocks [0, UnwaitedAfterBackward()).
  int UnwaitedAfterBackward() const { return std::min(layers_, sets_); }

 private:
  BlockBufferRing(int layers, int depth, int sets)
      : layers_(std::max(layers, 1)), depth_(std::max(depth, kMinDepth)), sets_(std::max(sets, 1)) {}

  // A block's own gather is started before it computes, and waited for
  // there: the shallowest ring has one set in flight beside it.
  static constexpr int kMinDepth = 2;

  int layers_, depth_, sets_;
};

}  // namespace tessera

#endif  // TESSERA_COMMON_BLOCK_BUFFER_RING_H_
