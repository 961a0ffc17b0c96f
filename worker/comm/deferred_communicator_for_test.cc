// DeferredCommunicator (see the header): Start* records, WaitFor runs.
#include "worker/comm/deferred_communicator_for_test.h"

#include <utility>
#include <vector>

namespace tessera {

DeferredCommunicator::DeferredCommunicator(std::unique_ptr<Communicator> inner)
    : inner_(std::move(inner)) {}

CollectiveTicket DeferredCommunicator::Defer(std::function<absl::Status()> run) {
  const uint64_t sequence = ++issued_;
  pending_.push_back(Pending{sequence, std::move(run)});
  return CollectiveTicket{sequence, /*queued=*/true};
}

absl::Status DeferredCommunicator::RunThrough(uint64_t sequence) {
  while (!pending_.empty() && pending_.front().sequence <= sequence) {
    Pending next = std::move(pending_.front());
    pending_.pop_front();
    absl::Status s = next.run();
    if (!s.ok() && failure_.ok()) failure_ = s;
  }
  return FirstFailure();
}

absl::Status DeferredCommunicator::AllGather(const void* send, void* recv, size_t bytes_per_rank,
                                             Stream* stream) {
  if (absl::Status s = RunThrough(issued_); !s.ok()) return s;
  return inner_->AllGather(send, recv, bytes_per_rank, stream);
}

absl::Status DeferredCommunicator::ReduceScatter(const TensorDesc& send, const TensorDesc& recv,
                                                 Stream* stream) {
  if (absl::Status s = RunThrough(issued_); !s.ok()) return s;
  return inner_->ReduceScatter(send, recv, stream);
}

absl::Status DeferredCommunicator::AllReduce(const TensorDesc& buf, ReduceOp op, Stream* stream) {
  if (absl::Status s = RunThrough(issued_); !s.ok()) return s;
  return inner_->AllReduce(buf, op, stream);
}

absl::StatusOr<CollectiveTicket> DeferredCommunicator::StartAllGather(
    absl::Span<const AllGatherPart> parts, Stream* after) {
  std::vector<AllGatherPart> copy(parts.begin(), parts.end());
  return Defer([this, copy = std::move(copy), after] {
    absl::StatusOr<CollectiveTicket> t = inner_->StartAllGather(copy, after);
    return t.ok() ? inner_->WaitFor(*t, after) : t.status();
  });
}

absl::StatusOr<CollectiveTicket> DeferredCommunicator::StartReduceScatter(
    absl::Span<const ReduceScatterPart> parts, Stream* after) {
  std::vector<ReduceScatterPart> copy(parts.begin(), parts.end());
  return Defer([this, copy = std::move(copy), after] {
    absl::StatusOr<CollectiveTicket> t = inner_->StartReduceScatter(copy, after);
    return t.ok() ? inner_->WaitFor(*t, after) : t.status();
  });
}

absl::StatusOr<CollectiveTicket> DeferredCommunicator::StartAllReduce(
    absl::Span<const TensorDesc> bufs, ReduceOp op, Stream* after) {
  std::vector<TensorDesc> copy(bufs.begin(), bufs.end());
  return Defer([this, copy = std::move(copy), op, after] {
    absl::StatusOr<CollectiveTicket> t = inner_->StartAllReduce(copy, op, after);
    return t.ok() ? inner_->WaitFor(*t, after) : t.status();
  });
}

absl::Status DeferredCommunicator::WaitFor(const CollectiveTicket& ticket, Stream* /*stream*/) {
  if (!ticket.queued) return FirstFailure();
  return RunThrough(ticket.sequence);
}

absl::Status DeferredCommunicator::FirstFailure() {
  if (!failure_.ok()) return failure_;
  return inner_->FirstFailure();
}

CommunicatorFactory DeferringFactory(CommunicatorFactory inner) {
  return [inner = std::move(inner)](RendezvousStore* store, int rank, int world_size,
                                    const std::string& host, absl::Duration timeout)
             -> absl::StatusOr<std::unique_ptr<Communicator>> {
    absl::StatusOr<std::unique_ptr<Communicator>> made =
        inner(store, rank, world_size, host, timeout);
    if (!made.ok()) return made.status();
    return std::unique_ptr<Communicator>(new DeferredCommunicator(*std::move(made)));
  };
}

}  // namespace tessera
