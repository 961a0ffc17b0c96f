// The warp-specialised attention forward at head dim 128
// (flash_attention_forward_warp_specialized.cu), which
// LaunchFlashAttentionForward (flash_attention_forward.cu) runs for head dim
// 128.
#ifndef TESSERA_WORKER_ENGINE_CUDA_FLASH_ATTENTION_FORWARD_WARP_SPECIALIZED_H_
#define TESSERA_WORKER_ENGINE_CUDA_FLASH_ATTENTION_FORWARD_WARP_SPECIALIZED_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "worker/engine/cuda/kernels.h"

namespace tessera {
namespace cuda {

// Same contract as LaunchFlashAttentionForward (kernels.h) at head dim 128,
// with qkv 16-byte aligned; INVALID_ARGUMENT otherwise.
absl::Status LaunchWarpSpecializedAttentionForward(const AttentionShape& shape, const void* qkv,
                                                   const int32_t* doc_starts, void* out,
                                                   float* lse, cudaStream_t stream);

}  // namespace cuda
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CUDA_FLASH_ATTENTION_FORWARD_WARP_SPECIALIZED_H_
