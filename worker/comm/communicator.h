// Collectives between the ranks of one job: the engine-neutral interface the
// FSDP2 layer uses. Gloo implements it on CPU (worker/comm/gloo_*), NCCL on
// GPU (worker/engine/cuda/nccl_*). Buffers live in the engine's memory.
//
// Every collective has a timeout: a dead or stuck peer turns into an ABORTED
// status, never a hang. After ABORTED the communicator is unusable; the job
// fails and a new group is built for the next job.
//
// A collective may still be running on the device when its call returns
// (NCCL queues it on a stream, ordered with the caller's stream by events).
// Its failure then reaches the caller through FirstFailure(), and through
// every later call. So the caller synchronises its stream and then asks
// FirstFailure() before it trusts what the collectives produced.
#ifndef TESSERA_WORKER_COMM_COMMUNICATOR_H_
#define TESSERA_WORKER_COMM_COMMUNICATOR_H_

#include <cstddef>

#include "absl/status/status.h"
#include "worker/ops/tensor.h"

namespace tessera {

enum class ReduceOp : uint8_t { kSum = 0, kMax = 1 };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // recv [world_size * bytes_per_rank] = concatenation of every rank's send
  // [bytes_per_rank] in rank order. Raw bytes (FP8 data goes as uint8).
  virtual absl::Status AllGather(const void* send, void* recv, size_t bytes_per_rank,
                                 Stream* stream) = 0;
  // send [world_size * n] fp32 or bf16; recv [n] (same dtype) = slice `rank`
  // of the elementwise sum over ranks.
  virtual absl::Status ReduceScatter(const TensorDesc& send, const TensorDesc& recv,
                                     Stream* stream) = 0;
  // In place over buf (fp32), elementwise across ranks.
  virtual absl::Status AllReduce(const TensorDesc& buf, ReduceOp op, Stream* stream) = 0;
  // Tears the group down so that blocked collectives return ABORTED. Safe to
  // call from another thread.
  virtual void Abort() = 0;
  // OK while no collective has failed, timed out or been aborted; otherwise
  // the first such failure (ABORTED, naming the collective and the rank).
  virtual absl::Status FirstFailure() = 0;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_COMM_COMMUNICATOR_H_
