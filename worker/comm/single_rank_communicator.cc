// The one-rank communicator (see single_rank_communicator.h).
#include "worker/comm/single_rank_communicator.h"

#include "absl/strings/str_cat.h"

namespace tessera {

absl::Status SingleRankCommunicator::CheckNotAborted() const {
  return aborted_ ? absl::AbortedError("collective group aborted") : absl::OkStatus();
}

absl::Status SingleRankCommunicator::AllGather(const void* send, void* recv,
                                               size_t bytes_per_rank, Stream* stream) {
  if (absl::Status s = CheckNotAborted(); !s.ok()) return s;
  if (send == recv || bytes_per_rank == 0) return absl::OkStatus();
  return ops_.CopyDeviceToDevice(recv, send, bytes_per_rank, stream);
}

absl::Status SingleRankCommunicator::ReduceScatter(const TensorDesc& send, const TensorDesc& recv,
                                                   Stream* stream) {
  if (absl::Status s = CheckNotAborted(); !s.ok()) return s;
  if (send.dtype != recv.dtype || send.NumElements() != recv.NumElements()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reduce-scatter over one rank: send has ", send.NumElements(), " elements of dtype ",
        static_cast<int>(send.dtype), ", recv ", recv.NumElements(), " of dtype ",
        static_cast<int>(recv.dtype), "; they must match"));
  }
  if (send.data == recv.data || send.Bytes() == 0) return absl::OkStatus();
  return ops_.CopyDeviceToDevice(recv.data, send.data, send.Bytes(), stream);
}

absl::Status SingleRankCommunicator::AllReduce(const TensorDesc&, ReduceOp, Stream*) {
  return CheckNotAborted();
}

}  // namespace tessera
