// The key and value gradients of cuDNN's deterministic backward run in
// query bands (cudnn_attention.h): band c of n attends the keys of rows
// [0, (c + 1) S / n) and writes its dK and dV for those rows, a partial
// sum over its own queries, into a buffer of its own. This kernel adds the
// bands up in band order, in fp32, and writes each key row's dK and dV once
// into grad_qkv's key and value columns, rounded to bf16 there. The order
// is fixed, so the sums repeat their bits run to run.
//
// Partials: band c's buffer is [B, (c + 1) S / n, 2 kv_heads, hd] bf16 (a
// key row's dK heads, then its dV heads), the bands one after another from
// `partials`, each starting at a multiple of kQueryBandAlignment bytes.
// One thread sums 8 adjacent columns of one row (16-byte loads).
#include <cuda_bf16.h>

#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/kernels.h"

namespace tessera {
namespace cuda {
namespace {

constexpr int kSumThreads = 256;
constexpr int kColumnsPerThread = 8;

struct alignas(16) Bf16x8 {
  __nv_bfloat162 v[4];
};

__global__ void __launch_bounds__(kSumThreads)
    SumQueryBandsKernel(const char* __restrict__ partials, __nv_bfloat16* __restrict__ grad_qkv,
                        int64_t batch, int64_t seq, int64_t band, int bands, int64_t row_width,
                        int64_t key_column, int64_t partial_width, int64_t alignment) {
  const int64_t groups_per_row = partial_width / kColumnsPerThread;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kSumThreads + threadIdx.x;
  if (i >= batch * seq * groups_per_row) return;
  const int64_t column = (i % groups_per_row) * kColumnsPerThread;
  const int64_t token = i / groups_per_row;
  const int64_t b = token / seq, row = token % seq;
  float sum[kColumnsPerThread] = {};
  int64_t offset = 0;  // band c's first byte
  for (int c = 0; c < bands; ++c) {
    const int64_t keys = (c + 1) * band;
    if (row < keys) {
      const auto* part = reinterpret_cast<const Bf16x8*>(
          partials + offset +
          ((b * keys + row) * partial_width + column) * sizeof(__nv_bfloat16));
      const Bf16x8 x = *part;
      for (int k = 0; k < 4; ++k) {
        const float2 f = __bfloat1622float2(x.v[k]);
        sum[2 * k] += f.x;
        sum[2 * k + 1] += f.y;
      }
    }
    const int64_t bytes = batch * keys * partial_width * sizeof(__nv_bfloat16);
    offset += (bytes + alignment - 1) / alignment * alignment;
  }
  Bf16x8 out;
  for (int k = 0; k < 4; ++k) out.v[k] = __floats2bfloat162_rn(sum[2 * k], sum[2 * k + 1]);
  *reinterpret_cast<Bf16x8*>(grad_qkv + token * row_width + key_column + column) = out;
}

}  // namespace

int64_t QueryBandPartialOffset(const AttentionShape& shape, int bands, int band_index) {
  const int64_t band = shape.seq / bands;
  const int64_t width = 2 * int64_t{shape.kv_heads} * shape.head_dim;
  int64_t offset = 0;
  for (int c = 0; c < band_index; ++c) {
    const int64_t bytes = shape.batch * (c + 1) * band * width * 2;
    offset += (bytes + kQueryBandAlignment - 1) / kQueryBandAlignment * kQueryBandAlignment;
  }
  return offset;
}

absl::Status LaunchSumQueryBands(const AttentionShape& shape, int bands, const void* partials,
                                 void* grad_qkv, cudaStream_t stream) {
  if (bands < 1 || shape.seq % bands != 0) {
    return absl::InvalidArgumentError(absl::StrCat("query bands: ", shape.seq,
                                                   " tokens do not split into ", bands, " bands"));
  }
  const int64_t width = 2 * int64_t{shape.kv_heads} * shape.head_dim;
  if (shape.head_dim % kColumnsPerThread != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("query bands: head_dim ", shape.head_dim, " is not a multiple of 8"));
  }
  const int64_t threads = shape.batch * shape.seq * (width / kColumnsPerThread);
  if (threads == 0) return absl::OkStatus();
  const int64_t row_width = int64_t{shape.heads + 2 * shape.kv_heads} * shape.head_dim;
  const int64_t blocks = (threads + kSumThreads - 1) / kSumThreads;
  SumQueryBandsKernel<<<static_cast<unsigned>(blocks), kSumThreads, 0, stream>>>(
      static_cast<const char*>(partials), static_cast<__nv_bfloat16*>(grad_qkv), shape.batch,
      shape.seq, shape.seq / bands, bands, row_width, int64_t{shape.heads} * shape.head_dim,
      width, kQueryBandAlignment);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace cuda
}  // namespace tessera
