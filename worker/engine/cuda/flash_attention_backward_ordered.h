// The one-pass attention backward with dQ summed in key-block order
// (flash_attention_backward_ordered.cu), as the two-pass launcher in
// flash_attention_backward.cu calls it after its prepare kernel: head dims
// 64 and 128. Device code's header: it names the kernels' parameter block.
#ifndef TESSERA_WORKER_ENGINE_CUDA_FLASH_ATTENTION_BACKWARD_ORDERED_H_
#define TESSERA_WORKER_ENGINE_CUDA_FLASH_ATTENTION_BACKWARD_ORDERED_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "worker/engine/cuda/flash_attention_tiles.cuh"

namespace tessera {
namespace cuda {

// fp32 scratch past the prepare kernel's: dQ sums, turn counters, the
// completion queue and the tiles' first key blocks, for `batch` sequences
// of seq_pad (a multiple of 128) rows. common/memory_estimate.cc counts the
// same bytes for jobs (it cannot call this); change both together.
int64_t OrderedAttentionScratchFloats(int64_t batch, int heads, int head_dim, int64_t seq_pad);

// dK, dV and dQ into dqkv from D, lse2 and the document starts the prepare
// kernel wrote (first_keys unused without documents); scratch holds
// OrderedAttentionScratchFloats floats. `ordered`: dQ summed in key-block
// order, bit-identical run to run; otherwise in the order the blocks get
// there (the atomic form, FlashBackwardForm::kAtomicDq). sm_count (the
// device's SMs) sizes the groups of K/V heads the grid takes one after
// another.
absl::Status LaunchOrderedAttentionGradients(const flash::AttentionParams& p, int64_t batch,
                                             int head_dim, const __nv_bfloat16* dout,
                                             const float* delta, const float* lse2,
                                             const int32_t* first_keys, int64_t seq_pad,
                                             bool ordered, int sm_count, float* scratch,
                                             __nv_bfloat16* dqkv, cudaStream_t stream);

}  // namespace cuda
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CUDA_FLASH_ATTENTION_BACKWARD_ORDERED_H_
