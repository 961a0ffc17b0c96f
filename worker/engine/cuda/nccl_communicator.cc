// NCCL-backed Communicator with a timeout watchdog (see nccl_communicator.h).
#include "worker/engine/cuda/nccl_communicator.h"

#include <atomic>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "worker/engine/cuda/cuda_check.h"

namespace tessera {
namespace {

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(int rank, int world, absl::Duration timeout)
      : rank_(rank), world_(world), timeout_(timeout) {}
  ~NcclCommunicator() override {
    if (comm_ != nullptr) {
      if (aborted_) {
        ncclCommAbort(comm_);
      } else {
        ncclCommDestroy(comm_);
      }
    }
    if (ready_ != nullptr) cudaEventDestroy(ready_);
    if (done_ != nullptr) cudaEventDestroy(done_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  absl::Status Init(RendezvousStore* store, int device) {
    CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
    CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    ncclUniqueId id;
    if (rank_ == 0) NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
    if (world_ > 1) {  // a group of one needs no rendezvous
      if (store == nullptr) return absl::InvalidArgumentError("a rendezvous store is required");
      if (rank_ == 0) {
        RETURN_IF_ERROR(store->Set("nccl/unique_id", std::string(id.internal, sizeof(id.internal))));
      }
      ASSIGN_OR_RETURN(std::vector<std::string> values, store->Get({"nccl/unique_id"}, timeout_));
      if (values[0].size() != sizeof(id.internal)) {
        return absl::AbortedError("rendezvous returned a malformed NCCL unique id");
      }
      std::memcpy(id.internal, values[0].data(), sizeof(id.internal));
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    NCCL_RETURN_IF_ERROR(ncclCommInitRankConfig(&comm_, world_, id, rank_, &config));
    return WaitForComm("initialising the NCCL communicator");
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }

  absl::Status AllGather(const void* send, void* recv, size_t bytes_per_rank, Stream* stream) override {
    if (bytes_per_rank == 0) return absl::OkStatus();
    return Run("all-gather", stream, [&] {
      return ncclAllGather(send, recv, bytes_per_rank, ncclUint8, comm_, stream_);
    });
  }

  absl::Status ReduceScatter(const TensorDesc& send, const TensorDesc& recv, Stream* stream) override {
    if (send.NumElements() != recv.NumElements() * world_ || send.dtype != recv.dtype) {
      return absl::InvalidArgumentError("reduce-scatter: send must hold world_size x recv elements");
    }
    if (recv.NumElements() == 0) return absl::OkStatus();
    ncclDataType_t type = send.dtype == DType::kBFloat16 ? ncclBfloat16 : ncclFloat32;
    return Run("reduce-scatter", stream, [&] {
      return ncclReduceScatter(send.data, recv.data, recv.NumElements(), type, ncclSum, comm_, stream_);
    });
  }

  absl::Status AllReduce(const TensorDesc& buf, ReduceOp op, Stream* stream) override {
    if (buf.dtype != DType::kFloat32) return absl::InvalidArgumentError("all-reduce: fp32 only");
    if (buf.NumElements() == 0) return absl::OkStatus();
    return Run("all-reduce", stream, [&] {
      return ncclAllReduce(buf.data, buf.data, buf.NumElements(), ncclFloat32,
                           op == ReduceOp::kSum ? ncclSum : ncclMax, comm_, stream_);
    });
  }

  void Abort() override {
    if (!aborted_.exchange(true) && comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
  }

 private:
  // Polls the communicator until no operation is in progress, or aborts it.
  absl::Status WaitForComm(const char* what) {
    absl::Time deadline = absl::Now() + timeout_;
    while (true) {
      if (aborted_) return absl::AbortedError(absl::StrCat(what, ": group aborted"));
      ncclResult_t state;
      NCCL_RETURN_IF_ERROR(ncclCommGetAsyncError(comm_, &state));
      if (state == ncclSuccess) return absl::OkStatus();
      if (state != ncclInProgress) {
        Abort();
        return absl::AbortedError(absl::StrCat(what, " failed: ", ncclGetErrorString(state)));
      }
      if (absl::Now() > deadline) {
        Abort();
        return absl::AbortedError(absl::StrCat(what, " timed out after ", absl::FormatDuration(timeout_)));
      }
      absl::SleepFor(absl::Microseconds(50));
    }
  }

  template <typename Fn>
  absl::Status Run(const char* what, Stream* caller, Fn enqueue) {
    if (aborted_ || comm_ == nullptr) return absl::AbortedError("collective group was aborted");
    cudaStream_t caller_stream = reinterpret_cast<cudaStream_t>(caller);
    CUDA_RETURN_IF_ERROR(cudaEventRecord(ready_, caller_stream));
    CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, ready_, 0));
    NCCL_RETURN_IF_ERROR(enqueue());
    RETURN_IF_ERROR(WaitForComm(what));
    CUDA_RETURN_IF_ERROR(cudaEventRecord(done_, stream_));
    absl::Time deadline = absl::Now() + timeout_;
    while (true) {
      cudaError_t e = cudaEventQuery(done_);
      if (e == cudaSuccess) break;
      if (e != cudaErrorNotReady) CUDA_RETURN_IF_ERROR(e);
      if (absl::Now() > deadline) {
        Abort();
        return absl::AbortedError(absl::StrCat(what, " on rank ", rank_, " timed out after ",
                                               absl::FormatDuration(timeout_), "; peer lost?"));
      }
      ncclResult_t state;
      if (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state != ncclSuccess &&
          state != ncclInProgress) {
        Abort();
        return absl::AbortedError(absl::StrCat(what, " failed: ", ncclGetErrorString(state)));
      }
      absl::SleepFor(absl::Microseconds(20));
    }
    CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(caller_stream, done_, 0));
    return absl::OkStatus();
  }

  int rank_;
  int world_;
  absl::Duration timeout_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
  std::atomic<bool> aborted_{false};
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(RendezvousStore* store,
                                                                     int rank, int world_size,
                                                                     int device_index,
                                                                     absl::Duration timeout) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " of world ", world_size));
  }
  auto comm = std::make_unique<NcclCommunicator>(rank, world_size, timeout);
  RETURN_IF_ERROR(comm->Init(store, device_index));
  return std::unique_ptr<Communicator>(std::move(comm));
}

}  // namespace tessera
