// DeferredCommunicator: a test double that makes a synchronous communicator
// (Gloo, on the CPU engine) behave like a queued one (NCCL). Its Start*
// collectives do not run when they are issued but as late as a real queued
// collective may: when a WaitFor names them or a later one, or a blocking
// collective comes after them (collectives of one group run in issue order).
// A step that forgets to wait for a collective, or that reuses a buffer
// before the collective reading it has finished, then computes from stale or
// overwritten data on the CPU engine too, and its losses change. Gloo itself
// runs each collective as early as possible, so the two together bound both
// ways a schedule can be wrong.
//
// Buffers named by a deferred collective must stay valid until it runs,
// which the trainer's buffers (allocated once at setup) do.
#ifndef TESSERA_WORKER_COMM_DEFERRED_COMMUNICATOR_FOR_TEST_H_
#define TESSERA_WORKER_COMM_DEFERRED_COMMUNICATOR_FOR_TEST_H_

#include <deque>
#include <functional>
#include <memory>

#include "worker/comm/communicator.h"
#include "worker/comm/communicator_factory.h"

namespace tessera {

class DeferredCommunicator : public Communicator {
 public:
  explicit DeferredCommunicator(std::unique_ptr<Communicator> inner);

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  absl::Status AllGather(const void* send, void* recv, size_t bytes_per_rank,
                         Stream* stream) override;
  absl::Status ReduceScatter(const TensorDesc& send, const TensorDesc& recv,
                             Stream* stream) override;
  absl::Status AllReduce(const TensorDesc& buf, ReduceOp op, Stream* stream) override;
  absl::StatusOr<CollectiveTicket> StartAllGather(absl::Span<const AllGatherPart> parts,
                                                  Stream* after) override;
  absl::StatusOr<CollectiveTicket> StartReduceScatter(absl::Span<const ReduceScatterPart> parts,
                                                      Stream* after) override;
  absl::StatusOr<CollectiveTicket> StartAllReduce(absl::Span<const TensorDesc> bufs, ReduceOp op,
                                                  Stream* after) override;
  absl::Status WaitFor(const CollectiveTicket& ticket, Stream* stream) override;
  void Abort() override { inner_->Abort(); }
  absl::Status FirstFailure() override;

  // Collectives issued and not yet run.
  int pending() const { return static_cast<int>(pending_.size()); }

 private:
  struct Pending {
    uint64_t sequence;
    std::function<absl::Status()> run;
  };
  CollectiveTicket Defer(std::function<absl::Status()> run);
  // Runs the pending collectives up to and including `sequence`, in order.
  absl::Status RunThrough(uint64_t sequence);

  std::unique_ptr<Communicator> inner_;
  std::deque<Pending> pending_;
  uint64_t issued_ = 0;
  absl::Status failure_;
};

// Wraps every communicator `inner` makes in a DeferredCommunicator.
CommunicatorFactory DeferringFactory(CommunicatorFactory inner);

}  // namespace tessera

#endif  // TESSERA_WORKER_COMM_DEFERRED_COMMUNICATOR_FOR_TEST_H_
