// NCCL-backed Communicator: queued collectives and a watchdog thread that
// bounds them (see nccl_communicator.h).
#include "worker/engine/cuda/nccl_communicator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/device_context.h"

namespace tessera {
namespace {

// NCCL reads its environment once per process, at its first call: set the
// default before any (see nccl_communicator.h).
void KeepNvlsReductionsOffByDefault() {
  static std::once_flag once;
  std::call_once(once, [] { setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0); });
}

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
    KeepNvlsReductionsOffByDefault();
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
    const AllGatherPart part{send, recv, bytes_per_rank};
    return Blocking(StartAllGather(absl::MakeConstSpan(&part, 1), stream), stream);
  }

  absl::Status ReduceScatter(const TensorDesc& send, const TensorDesc& recv,
                             Stream* stream) override {
    const ReduceScatterPart part{send, recv};
    return Blocking(StartReduceScatter(absl::MakeConstSpan(&part, 1), stream), stream);
  }

  absl::Status AllReduce(const TensorDesc& buf, ReduceOp op, Stream* stream) override {
    return Blocking(StartAllReduce(absl::MakeConstSpan(&buf, 1), op, stream), stream);
  }

  absl::StatusOr<CollectiveTicket> StartAllGather(absl::Span<const AllGatherPart> parts,
                                                  Stream* after) override {
    absl::InlinedVector<AllGatherPart, 8> work;
    for (const AllGatherPart& p : parts) {
      if (p.bytes_per_rank > 0) work.push_back(p);
    }
    return Queue("all-gather", after, work.empty(), [&](ncclComm_t comm) {
      for (const AllGatherPart& p : work) {
        const ncclResult_t r =
            ncclAllGather(p.send, p.recv, p.bytes_per_rank, ncclUint8, comm, stream_);
        if (r != ncclSuccess && r != ncclInProgress) return r;
      }
      return ncclSuccess;
    });
  }

  absl::StatusOr<CollectiveTicket> StartReduceScatter(absl::Span<const ReduceScatterPart> parts,
                                                      Stream* after) override {
    absl::InlinedVector<ReduceScatterPart, 8> work;
    for (const ReduceScatterPart& p : parts) {
      if (p.send.dtype != p.recv.dtype ||
          (p.send.dtype != DType::kFloat32 && p.send.dtype != DType::kBFloat16)) {
        return absl::InvalidArgumentError("send, recv: both fp32 or both bf16");
      }
      if (p.send.NumElements() != p.recv.NumElements() * world_) {
        return absl::InvalidArgumentError(absl::StrCat(
            "send: must hold world_size x recv = ", p.recv.NumElements() * world_,
            " elements, has ", p.send.NumElements()));
      }
      if (p.recv.NumElements() > 0) work.push_back(p);
    }
    return Queue("reduce-scatter", after, work.empty(), [&](ncclComm_t comm) {
      for (const ReduceScatterPart& p : work) {
        const ncclDataType_t type = p.send.dtype == DType::kBFloat16 ? ncclBfloat16 : ncclFloat32;
        const ncclResult_t r = ncclReduceScatter(p.send.data, p.recv.data, p.recv.NumElements(),
                                                 type, ncclSum, comm, stream_);
        if (r != ncclSuccess && r != ncclInProgress) return r;
      }
      return ncclSuccess;
    });
  }

  absl::StatusOr<CollectiveTicket> StartAllReduce(absl::Span<const TensorDesc> bufs, ReduceOp op,
                                                  Stream* after) override {
    absl::InlinedVector<TensorDesc, 8> work;
    for (const TensorDesc& b : bufs) {
      if (b.dtype != DType::kFloat32) return absl::InvalidArgumentError("buf: must be fp32");
      if (b.NumElements() > 0) work.push_back(b);
    }
    return Queue("all-reduce", after, work.empty(), [&](ncclComm_t comm) {
      for (const TensorDesc& b : work) {
        const ncclResult_t r = ncclAllReduce(b.data, b.data, b.NumElements(), ncclFloat32,
                                             op == ReduceOp::kSum ? ncclSum : ncclMax, comm,
                                             stream_);
        if (r != ncclSuccess && r != ncclInProgress) return r;
      }
      return ncclSuccess;
    });
  }

  absl::Status WaitFor(const CollectiveTicket& ticket, Stream* stream) override {
    absl::MutexLock lock(&mu_);
    if (!failure_.ok() || !ticket.queued) return failure_;
    // Its completion event was recorded again for a later collective only
    // once it had been retired, that is, finished.
    if (issued_ >= ticket.sequence + kRingSize) return absl::OkStatus();
    CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(reinterpret_cast<cudaStream_t>(stream),
                                             done_[ticket.sequence % kRingSize], 0));
    return absl::OkStatus();
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

  // The blocking forms: the caller's stream waits for the collective.
  absl::Status Blocking(absl::StatusOr<CollectiveTicket> ticket, Stream* stream) {
    if (!ticket.ok()) return ticket.status();
    return WaitFor(*ticket, stream);
  }

  // Queues one grouped collective (`enqueue` issues its NCCL calls between
  // ncclGroupStart and ncclGroupEnd, so NCCL launches them as one) on the
  // group's stream, after the work queued on `after` so far (event ready_).
  // Its completion is the next event of the ring, which the watchdog then
  // owns and WaitFor makes streams wait on. `empty`: nothing to move.
  template <typename Enqueue>
  absl::StatusOr<CollectiveTicket> Queue(const char* what, Stream* after, bool empty,
                                         Enqueue enqueue) {
    if (empty) {
      RETURN_IF_ERROR(FirstFailure());
      return CollectiveTicket{};
    }
    const cudaStream_t after_stream = reinterpret_cast<cudaStream_t>(after);
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
      CUDA_RETURN_IF_ERROR(cudaEventRecord(ready_, after_stream));
      CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, ready_, 0));
      const ncclResult_t started = ncclGroupStart();
      if (started != ncclSuccess) {
        issued = started;
      } else {
        issued = enqueue(comm_);
        // The group is closed whatever its calls returned.
        const ncclResult_t ended = ncclGroupEnd();
        if (issued == ncclSuccess || issued == ncclInProgress) issued = ended;
      }
      if (issued != ncclSuccess && issued != ncclInProgress) {
        Fail(absl::AbortedError(
            absl::StrCat(what, " on rank ", rank_, ": ", ncclGetErrorString(issued))));
        return failure_;
      }
    }
    if (issued == ncclInProgress) RETURN_IF_ERROR(WaitWhileIssuing(what));
    absl::MutexLock lock(&mu_);
    if (!failure_.ok()) return failure_;
    CollectiveTicket ticket;
    ticket.sequence = issued_++;
    ticket.queued = true;
    cudaEvent_t done = done_[ticket.sequence % kRingSize];
    CUDA_RETURN_IF_ERROR(cudaEventRecord(done, stream_));
    in_flight_.push_back(InFlight{done, what, absl::Now()});
    return ticket;
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
  uint64_t issued_ ABSL_GUARDED_BY(mu_) = 0;  // collectives queued so far
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
