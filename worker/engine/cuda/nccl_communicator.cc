// NCCL-backed Communicator: queued collectives and a watchdog thread that
// bounds them (see nccl_communicator.h).
#include "worker/engine/cuda/nccl_communicator.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <string>
#include <thread>
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
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    if (watchdog_.joinable()) watchdog_.join();
    if (!cuda::SetCurrentDevice(device_).ok()) return;
    {
      absl::MutexLock lock(&mu_);
      if (comm_ != nullptr) {
        // A communicator whose last operation did not finish cannot be
        // destroyed cleanly (ncclCommDestroy would wait for its peers).
        if (failure_.ok()) {
          ncclCommDestroy(comm_);
        } else {
          ncclCommAbort(comm_);
        }
        comm_ = nullptr;
      }
    }
    for (cudaEvent_t e : done_) cudaEventDestroy(e);
    if (ready_ != nullptr) cudaEventDestroy(ready_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  absl::Status Init(RendezvousStore* store) {
    RETURN_IF_ERROR(cuda::SetCurrentDevice(device_));
    CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    done_.assign(kRingSize, nullptr);
    for (cudaEvent_t& e : done_) {
      CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    }
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
    config.blocking = 0;  // every call returns at once; the watchdog bounds it
    {
      absl::MutexLock lock(&mu_);
      const ncclResult_t init = ncclCommInitRankConfig(&comm_, world_, id, rank_, &config);
      if (init != ncclSuccess && init != ncclInProgress) {
        if (comm_ != nullptr) ncclCommAbort(comm_);
        comm_ = nullptr;
        NCCL_RETURN_IF_ERROR(init);
      }
    }
    RETURN_IF_ERROR(WaitWhileIssuing("initialising the NCCL communicator"));
    watchdog_ = std::thread([this] { WatchdogLoop(); });
    return absl::OkStatus();
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }

  absl::Status AllGather(const void* send, void* recv, size_t bytes_per_rank,
                         Stream* stream) override {
    if (bytes_per_rank == 0) return FirstFailure();
    return Issue("all-gather", stream, [&](ncclComm_t comm) {
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
    if (recv.NumElements() == 0) return FirstFailure();
    const ncclDataType_t type = send.dtype == DType::kBFloat16 ? ncclBfloat16 : ncclFloat32;
    return Issue("reduce-scatter", stream, [&](ncclComm_t comm) {
      return ncclReduceScatter(send.data, recv.data, recv.NumElements(), type, ncclSum, comm,
                               stream_);
    });
  }

  absl::Status AllReduce(const TensorDesc& buf, ReduceOp op, Stream* stream) override {
    if (buf.dtype != DType::kFloat32) return absl::InvalidArgumentError("buf: must be fp32");
    if (buf.NumElements() == 0) return FirstFailure();
    return Issue("all-reduce", stream, [&](ncclComm_t comm) {
      return ncclAllReduce(buf.data, buf.data, buf.NumElements(), ncclFloat32,
                           op == ReduceOp::kSum ? ncclSum : ncclMax, comm, stream_);
    });
  }

  void Abort() override {
    absl::MutexLock lock(&mu_);
    Fail(absl::AbortedError(absl::StrCat("the collective group of rank ", rank_, " was aborted")));
  }

  absl::Status FirstFailure() override {
    absl::MutexLock lock(&mu_);
    return failure_;
  }

 private:
  static constexpr char kUniqueIdKey[] = "nccl/unique_id";
  // Completion events: more than one step's collectives (a 1.1B model issues
  // about 120), so the ring only fills if the device falls far behind.
  static constexpr int kRingSize = 1024;

  struct InFlight {
    cudaEvent_t done;
    const char* what;
    absl::Time issued;
  };

  // Records the first failure. The watchdog thread then tears the group
  // down (ncclCommAbort, outside the mutex: it waits for the NCCL kernels
  // already queued, which end early once aborted), so a caller asking
  // FirstFailure() or issuing another call is never held up by it.
  void Fail(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (failure_.ok()) failure_ = std::move(status);
    in_flight_.clear();
  }

  // One poll of the group: OK when idle, UNAVAILABLE (meaning "not yet")
  // while an operation is still being issued; a failure aborts the group and
  // comes back as ABORTED.
  absl::Status Poll(const char* what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!failure_.ok()) return failure_;
    ncclResult_t state = ncclSuccess;
    const ncclResult_t query = ncclCommGetAsyncError(comm_, &state);
    if (query != ncclSuccess) state = query;
    if (state == ncclSuccess) return absl::OkStatus();
    if (state == ncclInProgress) return absl::UnavailableError("in progress");
    Fail(absl::AbortedError(
        absl::StrCat(what, " on rank ", rank_, " failed: ", ncclGetErrorString(state))));
    return failure_;
  }

  void FailTimedOut(const char* what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Fail(absl::AbortedError(absl::StrCat(what, " on rank ", rank_, " timed out after ",
                                         absl::FormatDuration(timeout_),
                                         "; a peer is lost or stuck")));
  }

  // Waits on the host while NCCL is still issuing an operation (a
  // non-blocking communicator returns ncclInProgress from init, and from a
  // collective while it sets up connections on first use).
  absl::Status WaitWhileIssuing(const char* what) {
    const absl::Time deadline = absl::Now() + timeout_;
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        absl::Status s = Poll(what);
        if (!absl::IsUnavailable(s)) return s;
        if (absl::Now() > deadline) {
          FailTimedOut(what);
          return failure_;
        }
      }
      absl::SleepFor(absl::Microseconds(50));
    }
  }

  // Queues one collective: after the caller's stream (event ready_), on the
  // group's stream, with the caller's stream ordered after it by the next
  // completion event of the ring, which the watchdog then owns.
  template <typename Enqueue>
  absl::Status Issue(const char* what, Stream* caller, Enqueue enqueue) {
    const cudaStream_t caller_stream = reinterpret_cast<cudaStream_t>(caller);
    RETURN_IF_ERROR(cuda::SetCurrentDevice(device_));
    ncclResult_t issued = ncclSuccess;
    {
      absl::MutexLock lock(&mu_);
      const auto ring_has_room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !failure_.ok() || static_cast<int>(in_flight_.size()) < kRingSize;
      };
      // The watchdog retires or times out the oldest entry well within this.
      if (!mu_.AwaitWithTimeout(absl::Condition(&ring_has_room), 2 * timeout_)) {
        FailTimedOut(what);
      }
      if (!failure_.ok()) return failure_;
      CUDA_RETURN_IF_ERROR(cudaEventRecord(ready_, caller_stream));
      CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, ready_, 0));
      issued = enqueue(comm_);
      if (issued != ncclSuccess && issued != ncclInProgress) {
        Fail(absl::AbortedError(
            absl::StrCat(what, " on rank ", rank_, ": ", ncclGetErrorString(issued))));
        return failure_;
      }
    }
    if (issued == ncclInProgress) RETURN_IF_ERROR(WaitWhileIssuing(what));
    cudaEvent_t done = nullptr;
    {
      absl::MutexLock lock(&mu_);
      if (!failure_.ok()) return failure_;
      done = done_[next_done_];
      next_done_ = (next_done_ + 1) % kRingSize;
      CUDA_RETURN_IF_ERROR(cudaEventRecord(done, stream_));
      in_flight_.push_back(InFlight{done, what, absl::Now()});
    }
    CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(caller_stream, done, 0));
    return absl::OkStatus();
  }

  // Retires finished collectives in issue order, fails the group when the
  // oldest unfinished one errs or outlives its deadline, and carries out the
  // teardown of a failed group.
  void WatchdogLoop() {
    if (!cuda::SetCurrentDevice(device_).ok()) {
      absl::MutexLock lock(&mu_);
      Fail(absl::InternalError("the NCCL watchdog could not select its device"));
      return;
    }
    absl::Time front_since = absl::InfinitePast();  // when the oldest became oldest
    const auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stop_ || !in_flight_.empty() || (!failure_.ok() && comm_ != nullptr);
    };
    while (true) {
      ncclComm_t doomed = nullptr;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(&has_work));
        if (stop_) return;  // the destructor tears down what is left
        while (failure_.ok() && !in_flight_.empty()) {
          const InFlight& oldest = in_flight_.front();
          const cudaError_t e = cudaEventQuery(oldest.done);
          const absl::Time now = absl::Now();
          if (e == cudaSuccess) {
            in_flight_.pop_front();
            front_since = now;
            continue;
          }
          if (e != cudaErrorNotReady) {
            Fail(absl::AbortedError(absl::StrCat(oldest.what, " on rank ", rank_,
                                                 ": CUDA error ", cudaGetErrorString(e))));
            break;
          }
          const absl::Status polled = Poll(oldest.what);  // UNAVAILABLE: still issuing
          if (!polled.ok() && !absl::IsUnavailable(polled)) break;
          if (now > std::max(oldest.issued, front_since) + timeout_) FailTimedOut(oldest.what);
          break;
        }
        if (!failure_.ok()) std::swap(doomed, comm_);
      }
      if (doomed != nullptr) {
        ncclCommAbort(doomed);
        continue;
      }
      absl::SleepFor(absl::Microseconds(100));
    }
  }

  const int rank_;
  const int world_;
  const int device_;
  const absl::Duration timeout_;
  cudaStream_t stream_ = nullptr;     // the group's own stream
  cudaEvent_t ready_ = nullptr;       // caller's work before a collective
  std::vector<cudaEvent_t> done_;     // completion events, used as a ring
  std::thread watchdog_;
  absl::Mutex mu_;
  ncclComm_t comm_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);  // the first failure; OK while healthy
  std::deque<InFlight> in_flight_ ABSL_GUARDED_BY(mu_);  // oldest first
  int next_done_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
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
