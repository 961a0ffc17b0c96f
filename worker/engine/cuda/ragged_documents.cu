// The document table cuDNN's ragged attention reads, built on the device
// from the per-token document starts Ops::AttentionForward takes.
//
// cuDNN runs a batch's documents as the sequences of a "ragged" batch:
// document d is seq_lens[d] tokens whose rows begin at element offset
// offsets[d] of each packed tensor (qkv, out and their gradients) and of the
// log-sum-exp. The host knows how many documents there are (it plans the
// graph for a capacity of at least that many); only the device holds the
// starts of this step's batch, so the table is built here, in stream order,
// before each attention call. A document begins at every sequence's first
// token and wherever a start equals its own position. One block scans the
// B x S starts (each thread a contiguous run, a block-wide prefix sum of
// the runs' counts), writes each document's first token, then each entry.
// Entries past the documents are empty (length 0, offsets at the end). A
// batch with more documents than the capacity (a host count that does not
// match the starts) cannot read or write outside the tensors: the last
// entry runs to the batch's end, cut to the plan's longest document.
#include <cub/block/block_scan.cuh>

#include <limits>

#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/kernels.h"

namespace tessera {
namespace cuda {
namespace {

constexpr int kTableThreads = 1024;

__global__ void __launch_bounds__(kTableThreads)
    RaggedDocumentTableKernel(const int32_t* __restrict__ starts, int64_t batch, int64_t seq,
                              int heads, int64_t qkv_row, int64_t out_row, int64_t capacity,
                              int64_t longest, int32_t* __restrict__ first_tokens,
                              RaggedDocumentTable table) {
  using Scan = cub::BlockScan<int64_t, kTableThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  const int64_t tokens = batch * seq;
  const int64_t run = (tokens + kTableThreads - 1) / kTableThreads;
  const int64_t begin = min(tokens, threadIdx.x * run), end = min(tokens, begin + run);
  const auto begins_document = [&](int64_t i) {
    const int64_t position = i % seq;
    return position == 0 || starts[i] == position;
  };
  int64_t mine = 0;
  for (int64_t i = begin; i < end; ++i) mine += begins_document(i) ? 1 : 0;
  int64_t index = 0, documents = 0;
  Scan(scan_storage).ExclusiveSum(mine, index, documents);
  for (int64_t i = begin; i < end; ++i) {
    if (!begins_document(i)) continue;
    if (index < capacity) first_tokens[index] = static_cast<int32_t>(i);
    ++index;
  }
  __syncthreads();
  const int64_t listed = min(documents, capacity);
  for (int64_t d = threadIdx.x; d <= capacity; d += kTableThreads) {
    const int64_t first = d < listed ? first_tokens[d] : tokens;
    if (d < capacity) {
      const int64_t next = d + 1 < listed ? first_tokens[d + 1] : tokens;
      table.seq_lens[d] = static_cast<int32_t>(min(next - first, longest));
    }
    table.qkv_offsets[d] = first * qkv_row;
    table.out_offsets[d] = first * out_row;
    table.lse_offsets[d] = (first / seq) * heads * seq + first % seq;
  }
}

}  // namespace

absl::Status LaunchRaggedDocumentTable(const int32_t* doc_starts, const AttentionShape& shape,
                                       int64_t capacity, int64_t longest, int32_t* first_tokens,
                                       const RaggedDocumentTable& table, cudaStream_t stream) {
  if (shape.batch * shape.seq > std::numeric_limits<int32_t>::max() || capacity < 1 ||
      longest < 1) {
    return absl::InvalidArgumentError("ragged document table: batch too large or empty plan");
  }
  const int64_t qkv_row = int64_t{shape.heads + 2 * shape.kv_heads} * shape.head_dim;
  const int64_t out_row = int64_t{shape.heads} * shape.head_dim;
  RaggedDocumentTableKernel<<<1, kTableThreads, 0, stream>>>(
      doc_starts, shape.batch, shape.seq, shape.heads, qkv_row, out_row, capacity, longest,
      first_tokens, table);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace cuda
}  // namespace tessera
