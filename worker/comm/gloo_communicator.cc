// Gloo-backed Communicator (see gloo_communicator.h).
//
// ReduceScatter is an all-reduce of the whole send buffer followed by taking
// this rank's slice. It moves about twice the bytes of a ring reduce-scatter,
// which the CPU engine can afford, and its result is by construction "fp32
// sum over ranks, then slice". Both dtypes go through one fp32 scratch buffer
// that grows on first use and is reused by later calls (send is const, so
// the all-reduce cannot run in place on it); bf16 inputs are widened into it,
// summed in fp32 and rounded to bf16 once at the end.
//
// Abort() sets a flag that every collective checks first. The Gloo release
// this builds against cannot cancel an operation that is already waiting
// (its pairs' close() only changes linger settings and the wait buffers are
// internal to the algorithms), so a collective already in flight when
// Abort() is called ends at its timeout, also with ABORTED.
#include "worker/comm/gloo_communicator.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/shutdown_signal.h"
#include "common/status_macros.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/common/error.h"
#include "gloo/common/logging.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/transport/tcp/device.h"
#include "worker/comm/gloo_store.h"
#include "worker/engine/cpu/bf16.h"

namespace tessera {
namespace {

// Gloo's elementwise reductions, picked out of their overload sets.
using ReduceFn = void (*)(void*, const void*, const void*, size_t);
const ReduceFn kSum = &gloo::sum<float>;
const ReduceFn kMax = &gloo::max<float>;

std::chrono::milliseconds ToChrono(absl::Duration d) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
}

// Runs one Gloo call and turns whatever it throws into ABORTED; nothing
// thrown by Gloo leaves this function.
template <typename Fn>
absl::Status CatchGloo(const std::string& what, Fn&& fn) {
  try {
    fn();
    return absl::OkStatus();
  } catch (const gloo::IoException& e) {
    return absl::AbortedError(absl::StrCat(what, ": I/O failure (peer lost or timed out): ",
                                           e.what()));
  } catch (const gloo::EnforceNotMet& e) {
    return absl::AbortedError(absl::StrCat(what, ": Gloo check failed: ", e.what()));
  } catch (const std::exception& e) {
    return absl::AbortedError(absl::StrCat(what, ": ", e.what()));
  } catch (...) {
    return absl::AbortedError(absl::StrCat(what, ": unknown Gloo failure"));
  }
}

class GlooCommunicator : public Communicator {
 public:
  // context is null for a group of one rank.
  GlooCommunicator(int rank, int world, std::shared_ptr<gloo::Context> context,
                   absl::Duration timeout)
      : rank_(rank), world_(world), context_(std::move(context)), timeout_(ToChrono(timeout)) {}

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }

  absl::Status AllGather(const void* send, void* recv, size_t bytes_per_rank, Stream*) override {
    if (aborted_) return AbortedStatus();
    if (bytes_per_rank == 0) return absl::OkStatus();
    if (send == nullptr || recv == nullptr) {
      return absl::InvalidArgumentError("all-gather: send and recv must not be null");
    }
    if (world_ == 1) {
      std::memmove(recv, send, bytes_per_rank);
      return absl::OkStatus();
    }
    return Run("all-gather", [&] {
      gloo::AllgatherOptions opts(context_);
      opts.setInput(const_cast<uint8_t*>(static_cast<const uint8_t*>(send)), bytes_per_rank);
      opts.setOutput(static_cast<uint8_t*>(recv), bytes_per_rank * world_);
      opts.setTimeout(timeout_);
      gloo::allgather(opts);
    });
  }

  absl::Status ReduceScatter(const TensorDesc& send, const TensorDesc& recv, Stream*) override {
    if (aborted_) return AbortedStatus();
    if (send.dtype != recv.dtype) {
      return absl::InvalidArgumentError("reduce-scatter: send and recv dtypes differ");
    }
    if (send.dtype != DType::kFloat32 && send.dtype != DType::kBFloat16) {
      return absl::InvalidArgumentError("reduce-scatter: dtype must be fp32 or bf16");
    }
    const int64_t n = recv.NumElements();
    if (send.NumElements() != n * world_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "reduce-scatter: send holds ", send.NumElements(), " elements, want world_size (",
          world_, ") x recv (", n, ")"));
    }
    if (n == 0) return absl::OkStatus();
    if (send.data == nullptr || recv.data == nullptr) {
      return absl::InvalidArgumentError("reduce-scatter: send and recv must not be null");
    }
    const size_t total = static_cast<size_t>(send.NumElements());
    if (scratch_.size() < total) scratch_.resize(total);
    if (send.dtype == DType::kFloat32) {
      std::memcpy(scratch_.data(), send.data, total * sizeof(float));
    } else {
      const uint16_t* in = static_cast<const uint16_t*>(send.data);
      for (size_t i = 0; i < total; ++i) scratch_[i] = cpu::Bf16ToFloat(in[i]);
    }
    RETURN_IF_ERROR(AllReduceFloats("reduce-scatter", scratch_.data(), total, kSum));
    const float* slice = scratch_.data() + static_cast<size_t>(rank_) * n;
    if (recv.dtype == DType::kFloat32) {
      std::memcpy(recv.data, slice, static_cast<size_t>(n) * sizeof(float));
    } else {
      uint16_t* out = static_cast<uint16_t*>(recv.data);
      for (int64_t i = 0; i < n; ++i) out[i] = cpu::FloatToBf16(slice[i]);
    }
    return absl::OkStatus();
  }

  absl::Status AllReduce(const TensorDesc& buf, ReduceOp op, Stream*) override {
    if (aborted_) return AbortedStatus();
    if (buf.dtype != DType::kFloat32) {
      return absl::InvalidArgumentError("all-reduce: dtype must be fp32");
    }
    if (op != ReduceOp::kSum && op != ReduceOp::kMax) {
      return absl::InvalidArgumentError("all-reduce: op must be sum or max");
    }
    const size_t count = static_cast<size_t>(buf.NumElements());
    if (count == 0) return absl::OkStatus();
    if (buf.data == nullptr) return absl::InvalidArgumentError("all-reduce: buf must not be null");
    return AllReduceFloats("all-reduce", static_cast<float*>(buf.data), count,
                           op == ReduceOp::kSum ? kSum : kMax);
  }

  void Abort() override { aborted_ = true; }
  // Gloo collectives finish before they return, so a failure was already
  // returned by its call; this repeats the first one.
  absl::Status FirstFailure() override {
    absl::MutexLock lock(&failure_mu_);
    if (!first_failure_.ok()) return first_failure_;
    return aborted_ ? AbortedStatus() : absl::OkStatus();
  }

 private:
  absl::Status AbortedStatus() const {
    return absl::AbortedError(
        absl::StrCat("collective group of rank ", rank_, " was aborted; build a new group"));
  }

  absl::Status AllReduceFloats(const char* what, float* data, size_t count,
                               ReduceFn reduce) {
    if (world_ == 1) return absl::OkStatus();
    return Run(what, [&] {
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(data, count);
      opts.setReduceFunction(reduce);
      opts.setTimeout(timeout_);
      gloo::allreduce(opts);
    });
  }

  // A Gloo context that failed once cannot be trusted again (the peers are
  // out of step), so any failure also aborts the group.
  template <typename Fn>
  absl::Status Run(const char* what, Fn&& fn) {
    absl::Status status = CatchGloo(absl::StrCat(what, " on rank ", rank_, " of ", world_),
                                    std::forward<Fn>(fn));
    if (!status.ok()) {
      aborted_ = true;
      absl::MutexLock lock(&failure_mu_);
      if (first_failure_.ok()) first_failure_ = status;
    }
    return status;
  }

  const int rank_;
  const int world_;
  // Held until destruction: tearing a context down right after a ring
  // collective can break a peer that is still finishing it.
  std::shared_ptr<gloo::Context> context_;
  const std::chrono::milliseconds timeout_;
  std::atomic<bool> aborted_{false};
  absl::Mutex failure_mu_;
  absl::Status first_failure_ ABSL_GUARDED_BY(failure_mu_);
  std::vector<float> scratch_;  // [world_size * n] fp32 reduce-scatter staging
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(RendezvousStore* store,
                                                                     int rank, int world_size,
                                                                     const std::string& host,
                                                                     absl::Duration timeout) {
  // A peer that dies mid-collective closes its sockets; the next write here
  // must fail with EPIPE (reported as ABORTED), not raise SIGPIPE, which
  // would kill this process before it could report anything.
  IgnoreBrokenPipeSignals();
  if (world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("world_size: must be >= 1, got ", world_size));
  }
  if (rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank: must lie in [0, ", world_size, "), got ", rank));
  }
  if (timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("timeout: must be positive");
  }
  if (world_size == 1) {
    return std::unique_ptr<Communicator>(new GlooCommunicator(rank, 1, nullptr, timeout));
  }
  if (store == nullptr) {
    return absl::InvalidArgumentError("store: a group of more than one rank needs a store");
  }
  std::shared_ptr<gloo::rendezvous::Context> context;
  absl::Status joined = CatchGloo(
      absl::StrCat("joining the Gloo group as rank ", rank, " of ", world_size), [&] {
        gloo::transport::tcp::attr attr;
        attr.hostname = host.empty() ? "127.0.0.1" : host;
        std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
        context = std::make_shared<gloo::rendezvous::Context>(rank, world_size);
        context->setTimeout(ToChrono(timeout));
        GlooStore gloo_store(store, timeout);
        context->connectFullMesh(gloo_store, device);
      });
  if (!joined.ok()) return joined;
  return std::unique_ptr<Communicator>(
      new GlooCommunicator(rank, world_size, std::move(context), timeout));
}

}  // namespace tessera
