// The query gradient of cuDNN's deterministic backward run in key bands
// (cudnn_attention.h): band c of n takes the keys [c S/n, (c+1) S/n) and
// the queries [c S/n, S), and writes its dQ, a partial sum over its own
// keys, into a buffer of its own. This kernel adds up, for each query row
// r, the bands whose keys it sees (c <= r / (S/n)) in band order, in fp32,
// and writes the row's dQ once into grad_qkv's query columns, rounded to
// bf16 there. The order is fixed, so the sums repeat their bits run to run.
//
// Partials: band c's buffer is [B, S - c S/n, heads, hd] bf16, its row i
// the query c S/n + i; the bands lie one after another from `partials`,
// each starting at a multiple of kKeyBandAlignment bytes. One thread sums
// 8 adjacent columns of one row (16-byte loads and stores).
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
    SumKeyBandsKernel(const char* __restrict__ partials, __nv_bfloat16* __restrict__ grad_qkv,
                      int64_t batch, int64_t seq, int64_t band, int bands, int64_t row_width,
                      int64_t query_width, int64_t alignment) {
  const int64_t groups_per_row = query_width / kColumnsPerThread;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kSumThreads + threadIdx.x;
  if (i >= batch * seq * groups_per_row) return;
  const int64_t column = (i % groups_per_row) * kColumnsPerThread;
  const int64_t token = i / groups_per_row;
  const int64_t b = token / seq, row = token % seq;
  const int seen = static_cast<int>(row / band) + 1;  // bands 0 .. row / band
  float sum[kColumnsPerThread] = {};
  int64_t offset = 0;  // band c's first byte
  for (int c = 0; c < seen; ++c) {
    const int64_t rows = seq - c * band;
    const auto* part = reinterpret_cast<const Bf16x8*>(
        partials + offset +
        ((b * rows + row - c * band) * query_width + column) * sizeof(__nv_bfloat16));
    const Bf16x8 x = *part;
    for (int k = 0; k < 4; ++k) {
      const float2 f = __bfloat1622float2(x.v[k]);
      sum[2 * k] += f.x;
      sum[2 * k + 1] += f.y;
    }
    const int64_t bytes = batch * rows * query_width * sizeof(__nv_bfloat16);
    offset += (bytes + alignment - 1) / alignment * alignment;
  }
  Bf16x8 out;
  for (int k = 0; k < 4; ++k) out.v[k] = __floats2bfloat162_rn(sum[2 * k], sum[2 * k + 1]);
  *reinterpret_cast<Bf16x8*>(grad_qkv + token * row_width + column) = out;
}

}  // namespace

int64_t KeyBandPartialOffset(const AttentionShape& shape, int bands, int band_index) {
  const int64_t band = shape.seq / bands;
  const int64_t width = int64_t{shape.heads} * shape.head_dim;
  int64_t offset = 0;
  for (int c = 0; c < band_index; ++c) {
    const int64_t bytes = shape.batch * (shape.seq - c * band) * width * 2;
    offset += (bytes + kKeyBandAlignment - 1) / kKeyBandAlignment * kKeyBandAlignment;
  }
  return offset;
}

absl::Status LaunchSumKeyBands(const AttentionShape& shape, int bands, const void* partials,
                               void* grad_qkv, cudaStream_t stream) {
  if (bands < 1 || shape.seq % bands != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("key bands: ", shape.seq, " tokens do not split into ", bands, " bands"));
  }
  if (shape.head_dim % kColumnsPerThread != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("key bands: head_dim ", shape.head_dim, " is not a multiple of 8"));
  }
  const int64_t width = int64_t{shape.heads} * shape.head_dim;
  const int64_t threads = shape.batch * shape.seq * (width / kColumnsPerThread);
  if (threads == 0) return absl::OkStatus();
  const int64_t row_width = int64_t{shape.heads + 2 * shape.kv_heads} * shape.head_dim;
  const int64_t blocks = (threads + kSumThreads - 1) / kSumThreads;
  SumKeyBandsKernel<<<static_cast<unsigned>(blocks), kSumThreads, 0, stream>>>(
      static_cast<const char*>(partials), static_cast<__nv_bfloat16*>(grad_qkv), shape.batch,
      shape.seq, shape.seq / bands, bands, row_width, width, kKeyBandAlignment);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace cuda
}  // namespace tessera
