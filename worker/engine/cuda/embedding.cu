// Token embedding on the GPU. Forward gathers table rows; an id outside
// [0, V) writes a zero row and raises the device error flag (reported as
// INVALID_ARGUMENT at the next Synchronize).
//
// Backward adds each token's gradient row into its id's row of the fp32
// table gradient (or of the rows of it one FSDP rank holds: tokens of other
// rows are sorted past the end and skipped, as bad ids are), with no float
// atomics, so the result is bit-identical run
// to run whatever order the blocks run in:
//  1. Sort inputs: key[t] = ids[t] - first_row, the token's row of the
//     gradient (R, the gradient's row count, for a token of another row,
//     and for a bad id, which also raises the flag; both are skipped),
//     value[t] = t.
//  2. A stable radix sort of (key, t) by key (CUB, over the bits R needs):
//     the tokens of each id form one group, in token order.
//  3. Chunk sums: the sorted positions are cut into chunks of kChunk. A
//     block owns a chunk and a tile of kTileColumns columns and walks the
//     chunk's positions in order, keeping one running sum per column for
//     the current run of equal ids. A group that lies wholly inside the
//     chunk starts from its table row, adds its tokens' rows in token order
//     and stores the row back: the CPU reference's order exactly. A group
//     that crosses a chunk boundary leaves a partial per chunk instead:
//     slot 1 of the chunk where it starts (begun from the table row), slot 0
//     of each later chunk it reaches (begun from zero).
//  4. Group sums: the block of the chunk where a crossing group starts adds
//     the later chunks' slot 0 partials to its slot 1, in chunk order, and
//     stores the row.
// Every table row is written by one block only, and every sum runs in an
// order fixed by the ids, so nothing depends on scheduling. A group inside
// one chunk gets the CPU reference's bits; one that crosses a chunk
// boundary differs from it only in rounding (its later chunks' partials are
// summed before they are added). The work is balanced however skewed the
// ids are (a synthetic task has a dozen distinct ids in 16k tokens): each
// block reads kChunk rows of its tile, and a group's final sum reads one
// partial row per 64 of its tokens.
//
// Scratch (EmbeddingBackwardScratchBytes): keys and values, before and after
// the sort (16 bytes per token), the sort's temporary storage, and two fp32
// partial rows per chunk (T * H / 8 bytes).

#include <cub/device/device_radix_sort.cuh>

#include "absl/strings/str_cat.h"
#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/device_util.cuh"
#include "worker/engine/cuda/kernels.h"

namespace tessera {
namespace cuda {
namespace {

constexpr int kChunk = 64;              // sorted positions per chunk
constexpr int kThreads = 128;           // per block; one column each per pass
constexpr int kColumnsPerThread = 4;    // columns t, t + 128, t + 256, t + 384 of the tile
constexpr int kTileColumns = kThreads * kColumnsPerThread;
constexpr uint32_t kNoKey = 0xFFFFFFFFu;  // before the first and after the last position

// Where the backward's scratch pieces start, each 256-byte aligned.
struct BackwardScratch {
  uint32_t* keys_in;
  uint32_t* keys;  // sorted
  int32_t* tokens_in;
  int32_t* tokens;  // sorted with the keys
  float* partials;  // [chunks, 2, H]
  void* sort_temp;
  size_t sort_temp_bytes;
  int64_t total_bytes;
};

int64_t Align256(int64_t bytes) { return (bytes + 255) / 256 * 256; }

int64_t Chunks(int64_t tokens) { return (tokens + kChunk - 1) / kChunk; }

// Keys are at most V: the sort looks at the bits V needs.
int SortBits(int64_t vocab) {
  int bits = 1;
  while ((int64_t{1} << bits) <= vocab) ++bits;
  return bits;
}

// The layout for `tokens` tokens of width h; with base == nullptr only the
// sizes (CUB's size query).
absl::StatusOr<BackwardScratch> LayOut(void* base, int64_t tokens, int64_t vocab, int64_t h) {
  BackwardScratch s{};
  char* p = static_cast<char*>(base);
  int64_t offset = 0;
  const auto take = [&](int64_t bytes) {
    void* at = p == nullptr ? nullptr : p + offset;
    offset += Align256(bytes);
    return at;
  };
  s.keys_in = static_cast<uint32_t*>(take(tokens * 4));
  s.keys = static_cast<uint32_t*>(take(tokens * 4));
  s.tokens_in = static_cast<int32_t*>(take(tokens * 4));
  s.tokens = static_cast<int32_t*>(take(tokens * 4));
  s.partials = static_cast<float*>(take(Chunks(tokens) * 2 * h * 4));
  size_t temp_bytes = 0;
  const cudaError_t err = cub::DeviceRadixSort::SortPairs(
      nullptr, temp_bytes, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
      static_cast<int>(tokens), 0, SortBits(vocab));
  if (err != cudaSuccess) return CudaStatus(err, "sizing the embedding sort", __FILE__, __LINE__);
  s.sort_temp_bytes = temp_bytes;
  s.sort_temp = take(static_cast<int64_t>(temp_bytes));
  s.total_bytes = offset;
  return s;
}

// ---- kernels ---------------------------------------------------------------

__global__ void EmbeddingForwardKernel(const int32_t* ids, const void* table, int table_dtype,
                                       void* out, int out_dtype, int64_t vocab, int64_t h,
                                       int* error_flag) {
  const int64_t t = blockIdx.x;
  const int32_t id = ids[t];
  const bool ok = id >= 0 && id < vocab;
  if (!ok && threadIdx.x == 0) atomicExch(error_flag, 1);
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    StoreF(out, out_dtype, t * h + j, ok ? LoadF(table, table_dtype, id * h + j) : 0.f);
  }
}

// Step 1: the sort's inputs.
// Keys are rows of the gradient: id - first_row for an id among its `rows`
// rows, `rows` (skipped) for any other; an id outside [0, vocab) also
// raises the flag.
__global__ void EmbeddingSortInputsKernel(const int32_t* __restrict__ ids, int64_t tokens,
                                          int64_t first_row, int64_t rows, int64_t vocab,
                                          uint32_t* __restrict__ keys,
                                          int32_t* __restrict__ token_index, int* error_flag) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < tokens;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int32_t id = ids[t];
    if (id < 0 || id >= vocab) atomicExch(error_flag, 1);
    const int64_t row = int64_t(id) - first_row;
    keys[t] = row >= 0 && row < rows ? static_cast<uint32_t>(row) : static_cast<uint32_t>(rows);
    token_index[t] = static_cast<int32_t>(t);
  }
}

template <typename GradT>
__device__ __forceinline__ float LoadGrad(const GradT* p, int64_t i);
template <>
__device__ __forceinline__ float LoadGrad<float>(const float* p, int64_t i) {
  return p[i];
}
template <>
__device__ __forceinline__ float LoadGrad<__nv_bfloat16>(const __nv_bfloat16* p, int64_t i) {
  return __bfloat162float(p[i]);
}

// Step 3: block (chunk, tile). partials[(chunk * 2 + slot) * h + column].
template <typename GradT>
__global__ void __launch_bounds__(kThreads)
    EmbeddingChunkSumsKernel(const uint32_t* __restrict__ keys, const int32_t* __restrict__ tokens,
                             int64_t n, const GradT* __restrict__ grad_out,
                             float* __restrict__ grad_table, float* __restrict__ partials,
                             int64_t vocab, int64_t h) {
  // key[i + 1] is position p0 + i's; key[0] the one before the chunk and
  // key[count + 1] the one after it (kNoKey at the ends).
  __shared__ uint32_t key[kChunk + 2];
  __shared__ int32_t token[kChunk];
  const int64_t chunk = blockIdx.x;
  const int64_t p0 = chunk * kChunk;
  const int count = static_cast<int>(min(int64_t{kChunk}, n - p0));
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    key[i + 1] = keys[p0 + i];
    token[i] = tokens[p0 + i];
  }
  if (threadIdx.x == 0) {
    key[0] = p0 > 0 ? keys[p0 - 1] : kNoKey;
    key[count + 1] = p0 + count < n ? keys[p0 + count] : kNoKey;
  }
  __syncthreads();

  int64_t column[kColumnsPerThread];
  bool valid[kColumnsPerThread];
#pragma unroll
  for (int c = 0; c < kColumnsPerThread; ++c) {
    column[c] = int64_t(blockIdx.y) * kTileColumns + c * kThreads + threadIdx.x;
    valid[c] = column[c] < h;
  }
  float sum[kColumnsPerThread] = {};
  bool group_starts_here = false;
  for (int i = 0; i < count; ++i) {
    const uint32_t id = key[i + 1];
    const bool in_range = id < static_cast<uint64_t>(vocab);
    if (i == 0 || key[i] != id) {  // a run starts
      group_starts_here = key[i] != id;
#pragma unroll
      for (int c = 0; c < kColumnsPerThread; ++c) {
        sum[c] = group_starts_here && in_range && valid[c] ? grad_table[id * h + column[c]] : 0.f;
      }
    }
    const int64_t row = int64_t(token[i]) * h;
#pragma unroll
    for (int c = 0; c < kColumnsPerThread; ++c) {
      if (valid[c]) sum[c] += LoadGrad(grad_out, row + column[c]);
    }
    const bool run_ends = i == count - 1 || key[i + 2] != id;
    if (!run_ends || !in_range) continue;
    const bool group_ends_here = key[i + 2] != id;
    float* dst = group_starts_here && group_ends_here ? grad_table + id * h
                 : group_starts_here                  ? partials + (chunk * 2 + 1) * h
                                                      : partials + chunk * 2 * h;
#pragma unroll
    for (int c = 0; c < kColumnsPerThread; ++c) {
      if (valid[c]) dst[column[c]] = sum[c];
    }
  }
}

// Step 4: block (chunk, tile); works only if a group starts in its chunk
// and continues past it.
__global__ void __launch_bounds__(kThreads)
    EmbeddingGroupSumsKernel(const uint32_t* __restrict__ keys, int64_t n,
                             const float* __restrict__ partials, float* __restrict__ grad_table,
                             int64_t vocab, int64_t h) {
  const int64_t chunk = blockIdx.x, chunks = (n + kChunk - 1) / kChunk;
  const int64_t p0 = chunk * kChunk, last = min(p0 + kChunk, n) - 1;
  const uint32_t id = keys[last];
  if (id >= static_cast<uint64_t>(vocab)) return;    // bad ids: skipped
  if (last + 1 >= n || keys[last + 1] != id) return;  // the group ends in this chunk
  if (p0 > 0 && keys[p0 - 1] == id) return;           // it started in an earlier chunk
  // The chunks after this one that start inside the group: [chunk + 1, end).
  int64_t end = chunk + 1;
  while (end < chunks && keys[end * kChunk] == id) ++end;
#pragma unroll
  for (int c = 0; c < kColumnsPerThread; ++c) {
    const int64_t column = int64_t(blockIdx.y) * kTileColumns + c * kThreads + threadIdx.x;
    if (column >= h) continue;
    float sum = partials[(chunk * 2 + 1) * h + column];
#pragma unroll 8
    for (int64_t next = chunk + 1; next < end; ++next) sum += partials[next * 2 * h + column];
    grad_table[id * h + column] = sum;
  }
}

}  // namespace

// ---- launchers -------------------------------------------------------------

absl::Status LaunchEmbeddingForward(const TensorDesc& ids, const TensorDesc& table,
                                    const TensorDesc& out, int* error_flag, cudaStream_t stream) {
  const int64_t tokens = ids.NumElements();
  if (tokens == 0) return absl::OkStatus();
  EmbeddingForwardKernel<<<static_cast<unsigned>(tokens), 128, 0, stream>>>(
      static_cast<const int32_t*>(ids.data), table.data, int(table.dtype), out.data,
      int(out.dtype), table.shape[0], table.shape[1], error_flag);
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

absl::StatusOr<int64_t> EmbeddingBackwardScratchBytes(int64_t tokens, int64_t rows, int64_t h) {
  const absl::StatusOr<BackwardScratch> layout = LayOut(nullptr, tokens, rows, h);
  if (!layout.ok()) return layout.status();
  return layout->total_bytes;
}

absl::Status LaunchEmbeddingBackward(const TensorDesc& ids, const TensorDesc& grad_out,
                                     const TensorDesc& grad_table, int64_t first_row,
                                     int64_t vocab, void* scratch, int64_t scratch_bytes,
                                     int* error_flag, cudaStream_t stream) {
  const int64_t tokens = ids.NumElements();
  // Below, "vocab" of the sort and the sums is the gradient's rows: keys
  // are rows of grad_table, `rows` for a token it does not hold.
  const int64_t rows = grad_table.shape[0], h = grad_table.shape[1];
  if (tokens == 0 || h == 0) return absl::OkStatus();
  if (tokens > INT32_MAX || vocab >= INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        "embedding backward: ", tokens, " tokens and vocabulary ", vocab, " exceed 2^31 - 1"));
  }
  const absl::StatusOr<BackwardScratch> laid_out = LayOut(scratch, tokens, rows, h);
  if (!laid_out.ok()) return laid_out.status();
  const BackwardScratch& s = *laid_out;
  if (s.total_bytes > scratch_bytes) {
    return absl::InternalError(absl::StrCat("embedding backward: scratch of ", scratch_bytes,
                                            " bytes, needs ", s.total_bytes));
  }
  const int64_t chunks = Chunks(tokens);
  if (chunks > INT32_MAX || (h + kTileColumns - 1) / kTileColumns > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("embedding backward: ", tokens, " tokens of width ", h, " are too many"));
  }
  EmbeddingSortInputsKernel<<<BlocksFor(tokens, 256), 256, 0, stream>>>(
      static_cast<const int32_t*>(ids.data), tokens, first_row, rows, vocab, s.keys_in,
      s.tokens_in, error_flag);
  CUDA_RETURN_IF_LAUNCH_FAILED();
  size_t temp_bytes = s.sort_temp_bytes;
  CUDA_RETURN_IF_ERROR(cub::DeviceRadixSort::SortPairs(
      s.sort_temp, temp_bytes, s.keys_in, s.keys, s.tokens_in, s.tokens, static_cast<int>(tokens),
      0, SortBits(rows), stream));
  const dim3 grid(static_cast<unsigned>(chunks),
                  static_cast<unsigned>((h + kTileColumns - 1) / kTileColumns));
  float* grad = static_cast<float*>(grad_table.data);
  if (grad_out.dtype == DType::kFloat32) {
    EmbeddingChunkSumsKernel<float><<<grid, kThreads, 0, stream>>>(
        s.keys, s.tokens, tokens, static_cast<const float*>(grad_out.data), grad, s.partials,
        rows, h);
  } else {
    EmbeddingChunkSumsKernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(
        s.keys, s.tokens, tokens, static_cast<const __nv_bfloat16*>(grad_out.data), grad,
        s.partials, rows, h);
  }
  CUDA_RETURN_IF_LAUNCH_FAILED();
  EmbeddingGroupSumsKernel<<<grid, kThreads, 0, stream>>>(s.keys, tokens, s.partials, grad, rows,
                                                          h);
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

}  // namespace cuda
}  // namespace tessera
