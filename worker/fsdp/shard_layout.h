// FSDP2 dim-0 sharding math. A parameter of `rows` x `row_elems` is split
// into world_size chunks of rows_per_rank = ceil(rows / world) rows; rank r
// owns rows [r * rows_per_rank, min(rows, (r + 1) * rows_per_rank)). Late
// ranks may own fewer rows or none (uneven and empty shards are normal).
// Every chunk is padded to rows_per_rank rows so that collectives move equal
// sizes; the padding is zero and never read as parameter data.
#ifndef TESSERA_WORKER_FSDP_SHARD_LAYOUT_H_
#define TESSERA_WORKER_FSDP_SHARD_LAYOUT_H_

#include <algorithm>
#include <cstdint>

namespace tessera {

struct ShardLayout {
  int64_t rows = 0;
  int64_t row_elems = 1;
  int world = 1;
  int rank = 0;

  int64_t rows_per_rank() const { return (rows + world - 1) / world; }
  int64_t begin_row() const { return std::min<int64_t>(rows, rank * rows_per_rank()); }
  int64_t end_row() const { return std::min<int64_t>(rows, (rank + 1) * rows_per_rank()); }
  int64_t local_rows() const { return end_row() - begin_row(); }
  // Elements this rank really owns (may be 0).
  int64_t shard_numel() const { return local_rows() * row_elems; }
  // Elements of one padded chunk, the unit of all-gather and reduce-scatter.
  int64_t padded_numel() const { return rows_per_rank() * row_elems; }
  // Elements of the gathered (padded) full tensor.
  int64_t gathered_numel() const { return padded_numel() * world; }
  int64_t first_elem() const { return begin_row() * row_elems; }
};

}  // namespace tessera

#endif  // TESSERA_WORKER_FSDP_SHARD_LAYOUT_H_
