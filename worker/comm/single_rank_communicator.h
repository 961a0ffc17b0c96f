// The communicator of a one-rank job. With a single rank every collective is
// the identity: an all-gather or reduce-scatter is at most a copy within the
// engine's memory (none when send and receive are the same buffer), an
// all-reduce does nothing. So a one-GPU job runs no NCCL, sets up no
// rendezvous, and never waits on the host for a collective; the copies are
// queued on the step's stream like any other op.
#ifndef TESSERA_WORKER_COMM_SINGLE_RANK_COMMUNICATOR_H_
#define TESSERA_WORKER_COMM_SINGLE_RANK_COMMUNICATOR_H_

#include <atomic>

#include "worker/comm/communicator.h"
#include "worker/ops/ops.h"

namespace tessera {

class SingleRankCommunicator : public Communicator {
 public:
  // `ops` (not owned) performs the copies; it must outlive this object.
  explicit SingleRankCommunicator(Ops& ops) : ops_(ops) {}

  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  absl::Status AllGather(const void* send, void* recv, size_t bytes_per_rank,
                         Stream* stream) override;
  absl::Status ReduceScatter(const TensorDesc& send, const TensorDesc& recv,
                             Stream* stream) override;
  absl::Status AllReduce(const TensorDesc& buf, ReduceOp op, Stream* stream) override;
  // Later collectives return ABORTED, as with a real group.
  void Abort() override { aborted_ = true; }
  absl::Status FirstFailure() override { return CheckNotAborted(); }

 private:
  absl::Status CheckNotAborted() const;

  Ops& ops_;
  std::atomic<bool> aborted_{false};
};

}  // namespace tessera

#endif  // TESSERA_WORKER_COMM_SINGLE_RANK_COMMUNICATOR_H_
