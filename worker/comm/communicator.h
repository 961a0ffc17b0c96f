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
//
// The blocking forms (AllGather, ReduceScatter, AllReduce) order the
// caller's stream after the collective before they return. The Start* forms
// are for overlapping communication with compute: they queue several buffers
// as one grouped collective (one NCCL launch) after the work queued on
// `after` so far, and order nothing after it; the caller makes a stream wait
// with WaitFor(ticket, stream) just before that stream touches the buffers.
// Engines whose collectives run synchronously (Gloo, one rank) have finished
// them when Start* returns, and WaitFor only reports FirstFailure().
#ifndef TESSERA_WORKER_COMM_COMMUNICATOR_H_
#define TESSERA_WORKER_COMM_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/ops/tensor.h"

namespace tessera {

enum class ReduceOp : uint8_t { kSum = 0, kMax = 1 };

// One buffer pair of a grouped all-gather: recv [world_size *
// bytes_per_rank] = every rank's send [bytes_per_rank], in rank order.
struct AllGatherPart {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t bytes_per_rank = 0;
};

// One buffer pair of a grouped reduce-scatter (as ReduceScatter below).
struct ReduceScatterPart {
  TensorDesc send, recv;
};

// A grouped collective that was queued and that no stream waits for yet.
// A default-constructed ticket stands for one that has already finished.
struct CollectiveTicket {
  uint64_t sequence = 0;  // the communicator's issue number
  bool queued = false;    // false: finished when Start* returned
};

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

  // Grouped, deferred forms (see the file comment). The defaults run the
  // blocking forms one by one on `after`, which is right for engines whose
  // collectives finish synchronously.
  virtual absl::StatusOr<CollectiveTicket> StartAllGather(absl::Span<const AllGatherPart> parts,
                                                          Stream* after) {
    for (const AllGatherPart& p : parts) {
      absl::Status s = AllGather(p.send, p.recv, p.bytes_per_rank, after);
      if (!s.ok()) return s;
    }
    return CollectiveTicket{};
  }
  virtual absl::StatusOr<CollectiveTicket> StartReduceScatter(
      absl::Span<const ReduceScatterPart> parts, Stream* after) {
    for (const ReduceScatterPart& p : parts) {
      absl::Status s = ReduceScatter(p.send, p.recv, after);
      if (!s.ok()) return s;
    }
    return CollectiveTicket{};
  }
  virtual absl::StatusOr<CollectiveTicket> StartAllReduce(absl::Span<const TensorDesc> bufs,
                                                          ReduceOp op, Stream* after) {
    for (const TensorDesc& b : bufs) {
      absl::Status s = AllReduce(b, op, after);
      if (!s.ok()) return s;
    }
    return CollectiveTicket{};
  }
  // Orders `stream` after the ticket's collective; its failure (and any
  // earlier one) is reported here as by FirstFailure().
  virtual absl::Status WaitFor(const CollectiveTicket& ticket, Stream* stream) {
    (void)ticket;
    (void)stream;
    return FirstFailure();
  }

  // Tears the group down so that blocked collectives return ABORTED. Safe to
  // call from another thread.
  virtual void Abort() = 0;
  // OK while no collective has failed, timed out or been aborted; otherwise
  // the first such failure (ABORTED, naming the collective and the rank).
  virtual absl::Status FirstFailure() = 0;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_COMM_COMMUNICATOR_H_
