// NCCL-backed Communicator with a timeout watchdog (see nccl_communicator.h).
#include "worker/engine/cuda/nccl_communicator.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/device_context.h"

namespace tessera {
namespace {

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(int rank, int world, int device, absl::Duration timeout)
      : rank_(rank), world_(world), device_(device), timeout_(timeout) {}
  ~NcclCommunicator() override {
    if (!cuda::SetCurrentDevice(device_).ok()) return;
    {
      absl::MutexLock lock(&mu_);
      if (comm_ != nullptr) {
        // A communicator whose last operation did not finish cannot be
        // destroyed cleanly (ncclCommDestroy would wait for its peers).
        if (healthy_) {
          ncclCommDestroy(comm_);
        } else {
          ncclCommAbort(comm_);
        }
        comm_ = nullptr;
      }
    }
    if (ready_ != nullptr) cudaEventDestroy(ready_);
    if (done_ != nullptr) cudaEventDestroy(done_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  absl::Status Init(RendezvousStore* store) {
    RETURN_IF_ERROR(cuda::SetCurrentDevice(device_));
    CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    if (rank_ == 0) NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
    if (world_ > 1) {  // a group of one needs no rendezvous
      if (store == nullptr) return absl::InvalidArgumentError("store: required when world_size > 1");
      if (rank_ == 0) {
        RETURN_IF_ERROR(store->Set(kUniqueIdKey, std::string(id.internal, sizeof(id.internal))));
      }
      absl::StatusOr<std::vector<std::string>> values = store->Get({kUniqueIdKey}, timeout_);
      if (!values.ok()) {
        return absl::AbortedError(absl::StrCat("rank ", rank_, ": NCCL rendezvous failed: ",
                                               values.status().message()));
      }
      if ((*values)[0].size() != sizeof(id.internal)) {
        return absl::AbortedError("rendezvous returned a malformed NCCL unique id");
      }
      std::memcpy(id.internal, (*values)[0].data(), sizeof(id.internal));
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // every call returns at once; WaitForComm bounds it
    {
      absl::MutexLock lock(&mu_);
      const ncclResult_t init = ncclCommInitRankConfig(&comm_, world_, id, rank_, &config);
      if (init != ncclSuccess && init != ncclInProgress) {
        if (comm_ != nullptr) ncclCommAbort(comm_);
        comm_ = nullptr;
        NCCL_RETURN_IF_ERROR(init);
      }
    }
    return WaitForComm("initialising the NCCL communicator");
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }

  absl::Status AllGather(const void* send, void* recv, size_t bytes_per_rank,
                         Stream* stream) override {
    if (bytes_per_rank == 0) return absl::OkStatus();
    return Run("all-gather", stream, [&](ncclComm_t comm) {
      return ncclAllGather(send, recv, bytes_per_rank, ncclUint8, comm, stream_);
    });
  }

  absl::Status ReduceScatter(const TensorDesc& send, const TensorDesc& recv,
                             Stream* stream) override {
    if (send.dtype != recv.dtype ||
        (send.dtype != DType::kFloat32 && send.dtype != DType::kBFloat16)) {
      return absl::InvalidArgumentError("send, recv: both fp32 or both bf16");
    }
    if (send.NumElements() != recv.NumElements() * world_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "send: must hold world_size x recv = ", recv.NumElements() * world_,
          " elements, has ", send.NumElements()));
    }
    if (recv.NumElements() == 0) return absl::OkStatus();
    const ncclDataType_t type = send.dtype == DType::kBFloat16 ? ncclBfloat16 : ncclFloat32;
    return Run("reduce-scatter", stream, [&](ncclComm_t comm) {
      return ncclReduceScatter(send.data, recv.data, recv.NumElements(), type, ncclSum, comm,
                               stream_);
    });
  }

  absl::Status AllReduce(const TensorDesc& buf, ReduceOp op, Stream* stream) override {
    if (buf.dtype != DType::kFloat32) return absl::InvalidArgumentError("buf: must be fp32");
    if (buf.NumElements() == 0) return absl::OkStatus();
    return Run("all-reduce", stream, [&](ncclComm_t comm) {
      return ncclAllReduce(buf.data, buf.data, buf.NumElements(), ncclFloat32,
                           op == ReduceOp::kSum ? ncclSum : ncclMax, comm, stream_);
    });
  }

  void Abort() override {
    absl::MutexLock lock(&mu_);
    AbortLocked();
  }

 private:
  static constexpr char kUniqueIdKey[] = "nccl/unique_id";

  // Tears the group down; operations in flight on any thread see comm_ ==
  // nullptr at their next poll and return ABORTED.
  void AbortLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
    healthy_ = false;
  }

  // One poll of the group: OK when idle, UNAVAILABLE (meaning "not yet")
  // while an operation is still being issued, ABORTED when it failed or
  // was aborted.
  absl::Status Poll(const char* what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (comm_ == nullptr) return absl::AbortedError(absl::StrCat(what, ": the group was aborted"));
    ncclResult_t state = ncclSuccess;
    const ncclResult_t query = ncclCommGetAsyncError(comm_, &state);
    if (query != ncclSuccess) state = query;
    if (state == ncclSuccess) return absl::OkStatus();
    if (state == ncclInProgress) return absl::UnavailableError("in progress");
    AbortLocked();
    return absl::AbortedError(absl::StrCat(what, " on rank ", rank_, " failed: ",
                                           ncclGetErrorString(state)));
  }

  absl::Status TimedOut(const char* what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    AbortLocked();
    return absl::AbortedError(absl::StrCat(what, " on rank ", rank_, " timed out after ",
                                           absl::FormatDuration(timeout_),
                                           "; a peer is lost or stuck"));
  }

  // Waits until the group has no operation being issued (non-blocking
  // communicators return ncclInProgress from init and enqueue calls).
  absl::Status WaitForComm(const char* what) {
    const absl::Time deadline = absl::Now() + timeout_;
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        absl::Status s = Poll(what);
        if (!absl::IsUnavailable(s)) return s;
        if (absl::Now() > deadline) return TimedOut(what);
      }
      absl::SleepFor(absl::Microseconds(50));
    }
  }

  // Orders the collective after the caller's stream (event ready_), issues
  // it on the group's stream, waits for it with the timeout (the watchdog),
  // and orders the caller's stream after it (event done_).
  template <typename Enqueue>
  absl::Status Run(const char* what, Stream* caller, Enqueue enqueue) {
    const cudaStream_t caller_stream = reinterpret_cast<cudaStream_t>(caller);
    RETURN_IF_ERROR(cuda::SetCurrentDevice(device_));
    {
      absl::MutexLock lock(&mu_);
      if (comm_ == nullptr) return absl::AbortedError(absl::StrCat(what, ": the group was aborted"));
      CUDA_RETURN_IF_ERROR(cudaEventRecord(ready_, caller_stream));
      CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, ready_, 0));
      const ncclResult_t issued = enqueue(comm_);
      if (issued != ncclSuccess && issued != ncclInProgress) {
        AbortLocked();
        NCCL_RETURN_IF_ERROR(issued);
      }
    }
    RETURN_IF_ERROR(WaitForComm(what));
    CUDA_RETURN_IF_ERROR(cudaEventRecord(done_, stream_));
    const absl::Time deadline = absl::Now() + timeout_;
    while (true) {
      const cudaError_t e = cudaEventQuery(done_);
      if (e == cudaSuccess) break;
      if (e != cudaErrorNotReady) CUDA_RETURN_IF_ERROR(e);
      {
        absl::MutexLock lock(&mu_);
        absl::Status s = Poll(what);
        if (!s.ok() && !absl::IsUnavailable(s)) return s;
        if (absl::Now() > deadline) return TimedOut(what);
      }
      absl::SleepFor(absl::Microseconds(20));
    }
    CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(caller_stream, done_, 0));
    return absl::OkStatus();
  }

  const int rank_;
  const int world_;
  const int device_;
  const absl::Duration timeout_;
  cudaStream_t stream_ = nullptr;  // the group's own stream
  cudaEvent_t ready_ = nullptr;    // caller's work before the collective
  cudaEvent_t done_ = nullptr;     // the collective itself
  absl::Mutex mu_;
  ncclComm_t comm_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool healthy_ ABSL_GUARDED_BY(mu_) = true;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(RendezvousStore* store,
                                                                     int rank, int world_size,
                                                                     int device_index,
                                                                     absl::Duration timeout) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " of world ", world_size));
  }
  auto comm = std::make_unique<NcclCommunicator>(rank, world_size, device_index, timeout);
  RETURN_IF_ERROR(comm->Init(store));
  return std::unique_ptr<Communicator>(std::move(comm));
}

}  // namespace tessera
