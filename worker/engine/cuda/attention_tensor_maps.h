// TMA descriptors (CUtensorMap) for the attention kernels' bf16 tensors of
// head rows, [B, S, heads, head_dim] with head_dim 64 or 128: the packed
// qkv (heads = nh + 2 nkv), the output and its gradient (heads = nh). A
// map's box is `box_rows` consecutive tokens x 64 columns of one head of
// one sequence, written to shared memory with the 128-byte swizzle, which
// is the tile layout of wgmma.cuh: one box per 64-column panel of a tile
// (columns 0 and 64 at head dim 128). Tokens
// past a sequence's end arrive as zeros. Maps are encoded on the host per
// call (a host cost not yet measured) and passed to kernels by value.
#ifndef TESSERA_WORKER_ENGINE_CUDA_ATTENTION_TENSOR_MAPS_H_
#define TESSERA_WORKER_ENGINE_CUDA_ATTENTION_TENSOR_MAPS_H_

#include <cuda.h>

#include <cstdint>

#include "absl/status/statusor.h"

namespace tessera {
namespace cuda {

// base must be 16-byte aligned (INVALID_ARGUMENT otherwise); box_rows is at
// most 256.
absl::StatusOr<CUtensorMap> HeadRowsTensorMap(const void* base, int64_t batch, int64_t seq,
                                              int heads, int head_dim, int box_rows);

}  // namespace cuda
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CUDA_ATTENTION_TENSOR_MAPS_H_
