// The document table cuDNN's ragged attention reads, built on the device
// from the per-token document starts Ops::AttentionForward takes.
//
// cuDNN runs a batch's documents as the sequences of "ragged" batches:
// entry d is seq_lens[d] tokens whose rows begin at element offset
// offsets[d] of each packed tensor (qkv, out and their gradients) and of the
// log-sum-exp. The host knows how many documents of each length there are
// (it splits them into groups by length and plans each group's call for a
// capacity of at least that many); only the device holds the starts of
// this step's batch, so the table is built here, in stream order, before
// each call. A document begins at every sequence's first token and
// wherever a start equals its own position. One block scans the B x S
// starts twice over: each thread a contiguous run of tokens, a block-wide
// prefix sum of the runs' counts, every document's first token in order;
// then each thread a run of those documents, a prefix sum of how many of
// them have a length in the group's range, and their entries. Entries past
// the group's documents are empty (length 0, offsets at the end). A batch
// whose documents do not match the host's count cannot make an entry read
// or write outside the tensors: entries past the capacity are dropped and
// each length is cut to the plan's longest document.
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
                              int64_t longest, int64_t above, int64_t up_to,
                              int32_t* __restrict__ first_tokens, RaggedDocumentTable table) {
  using Scan = cub::BlockScan<int64_t, kTableThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  const int64_t tokens = batch * seq;
  const auto run_of = [](int64_t n, int64_t& begin, int64_t& end) {
    const int64_t run = (n + kTableThreads - 1) / kTableThreads;
    begin = min(n, threadIdx.x * run);
    end = min(n, begin + run);
  };
  // Every document's first token, in order.
  const auto begins_document = [&](int64_t i) {
    const int64_t position = i % seq;
    return position == 0 || starts[i] == position;
  };
  int64_t begin = 0, end = 0;
  run_of(tokens, begin, end);
  int64_t mine = 0;
  for (int64_t i = begin; i < end; ++i) mine += begins_document(i) ? 1 : 0;
  int64_t index = 0, documents = 0;
  Scan(scan_storage).ExclusiveSum(mine, index, documents);
  for (int64_t i = begin; i < end; ++i) {
    if (begins_document(i)) first_tokens[index++] = static_cast<int32_t>(i);
  }
  __syncthreads();
  // The group's documents: those of (above, up_to] tokens, in order.
  const auto length_of = [&](int64_t d) {
    return (d + 1 < documents ? first_tokens[d + 1] : tokens) - first_tokens[d];
  };
  const auto in_group = [&](int64_t d) {
    const int64_t length = length_of(d);
    return length > above && length <= up_to;
  };
  run_of(documents, begin, end);
  mine = 0;
  for (int64_t d = begin; d < end; ++d) mine += in_group(d) ? 1 : 0;
  int64_t entry = 0, entries = 0;
  __syncthreads();  // scan_storage is reused
  Scan(scan_storage).ExclusiveSum(mine, entry, entries);
  const auto write = [&](int64_t e, int64_t first, int64_t length) {
    if (e < capacity) table.seq_lens[e] = static_cast<int32_t>(min(length, longest));
    table.qkv_offsets[e] = first * qkv_row;
    table.out_offsets[e] = first * out_row;
    table.lse_offsets[e] = (first / seq) * heads * seq + first % seq;
  };
  for (int64_t d = begin; d < end; ++d) {
    if (!in_group(d)) continue;
    if (entry < capacity) write(entry, first_tokens[d], length_of(d));
    ++entry;
  }
  // Empty entries, and the end offset after the last entry.
  for (int64_t e = min(entries, capacity) + threadIdx.x; e <= capacity; e += kTableThreads) {
    write(e, tokens, 0);
  }
}

}  // namespace

absl::Status LaunchRaggedDocumentTable(const int32_t* doc_starts, const AttentionShape& shape,
                                       int64_t capacity, int64_t longest, int64_t above,
                                       int64_t up_to, int32_t* first_tokens,
                                       const RaggedDocumentTable& table, cudaStream_t stream) {
  if (shape.batch * shape.seq > std::numeric_limits<int32_t>::max() || capacity < 1 ||
      longest < 1) {
    return absl::InvalidArgumentError("ragged document table: batch too large or empty plan");
  }
  const int64_t qkv_row = int64_t{shape.heads + 2 * shape.kv_heads} * shape.head_dim;
  const int64_t out_row = int64_t{shape.heads} * shape.head_dim;
  RaggedDocumentTableKernel<<<1, kTableThreads, 0, stream>>>(
      doc_starts, shape.batch, shape.seq, shape.heads, qkv_row, out_row, capacity, longest, above,
      up_to, first_tokens, table);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace cuda
}  // namespace tessera
