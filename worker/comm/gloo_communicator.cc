// Gloo-backed Communicator (see gloo_communicator.h).
//
// ReduceScatter is an all-reduce followed by taking this rank's slice: it
// moves twice the bytes of a ring reduce-scatter, which is fine for the CPU
// engine, and its result is exactly "sum over ranks, then slice". bf16 data
// is widened to fp32 in a scratch buffer that is reused across calls, summed
// in fp32 and rounded back once.
#include "worker/comm/gloo_communicator.h"

#include <atomic>
#include <cstring>
#include <exception>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/device.h"
#include "worker/engine/cpu/bf16.h"

namespace tessera {
namespace {

// Gloo's store interface over a RendezvousStore; keys live under "gloo/".
class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(RendezvousStore* store, absl::Duration timeout)
      : store_(store), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    absl::Status s = store_->Set("gloo/" + key, std::string(data.begin(), data.end()));
    if (!s.ok()) throw std::runtime_error(s.ToString());
  }
  std::vector<char> get(const std::string& key) override {
    absl::StatusOr<std::vector<std::string>> v = store_->Get({"gloo/" + key}, timeout_);
    if (!v.ok()) throw std::runtime_error(v.status().ToString());
    return std::vector<char>((*v)[0].begin(), (*v)[0].end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, ToChrono(timeout_)); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> prefixed;
    for (const std::string& k : keys) prefixed.push_back("gloo/" + k);
    absl::StatusOr<std::vector<std::string>> v =
        store_->Get(prefixed, absl::Milliseconds(timeout.count()));
    if (!v.ok()) throw std::runtime_error(v.status().ToString());
  }

 private:
  static std::chrono::milliseconds ToChrono(absl::Duration d) {
    return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
  }
  RendezvousStore* store_;
  absl::Duration timeout_;
};

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(int rank, int world, std::shared_ptr<gloo::Context> context,
                   std::shared_ptr<gloo::transport::Device> device, absl::Duration timeout)
      : rank_(rank), world_(world), context_(std::move(context)), device_(std::move(device)),
        timeout_(std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout))) {}

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }

  absl::Status AllGather(const void* send, void* recv, size_t bytes_per_rank, Stream*) override {
    if (aborted_) return Aborted();
    if (world_ == 1 || bytes_per_rank == 0) {
      if (bytes_per_rank > 0) std::memmove(recv, send, bytes_per_rank);
      return absl::OkStatus();
    }
    return Guard("all-gather", [&] {
      gloo::AllgatherOptions opts(context_);
      opts.setInput(const_cast<uint8_t*>(static_cast<const uint8_t*>(send)), bytes_per_rank);
      opts.setOutput(static_cast<uint8_t*>(recv), bytes_per_rank * world_);
      opts.setTimeout(timeout_);
      gloo::allgather(opts);
    });
  }

  absl::Status ReduceScatter(const TensorDesc& send, const TensorDesc& recv, Stream*) override {
    if (aborted_) return Aborted();
    const int64_t n = recv.NumElements();
    if (send.NumElements() != n * world_ || send.dtype != recv.dtype) {
      return absl::InvalidArgumentError("reduce-scatter: send must hold world_size x recv elements");
    }
    if (send.dtype != DType::kFloat32 && send.dtype != DType::kBFloat16) {
      return absl::InvalidArgumentError("reduce-scatter: fp32 or bf16 only");
    }
    scratch_.resize(send.NumElements());
    for (int64_t i = 0; i < send.NumElements(); ++i) {
      scratch_[i] = send.dtype == DType::kFloat32
                        ? static_cast<const float*>(send.data)[i]
                        : cpu::Bf16ToFloat(static_cast<const uint16_t*>(send.data)[i]);
    }
    if (absl::Status s = SumInPlace(scratch_.data(), scratch_.size()); !s.ok()) return s;
    const float* slice = scratch_.data() + rank_ * n;
    for (int64_t i = 0; i < n; ++i) {
      if (recv.dtype == DType::kFloat32) {
        static_cast<float*>(recv.data)[i] = slice[i];
      } else {
        static_cast<uint16_t*>(recv.data)[i] = cpu::FloatToBf16(slice[i]);
      }
    }
    return absl::OkStatus();
  }

  absl::Status AllReduce(const TensorDesc& buf, ReduceOp op, Stream*) override {
    if (aborted_) return Aborted();
    if (buf.dtype != DType::kFloat32) return absl::InvalidArgumentError("all-reduce: fp32 only");
    if (world_ == 1 || buf.NumElements() == 0) return absl::OkStatus();
    float* data = static_cast<float*>(buf.data);
    const size_t count = static_cast<size_t>(buf.NumElements());
    if (op == ReduceOp::kSum) return SumInPlace(data, count);
    return Guard("all-reduce", [&] {
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(data, count);
      opts.setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::max<float>));
      opts.setTimeout(timeout_);
      gloo::allreduce(opts);
    });
  }

  void Abort() override { aborted_ = true; }

 private:
  absl::Status Aborted() const {
    return absl::AbortedError("collective group was aborted");
  }

  absl::Status SumInPlace(float* data, size_t count) {
    if (world_ == 1 || count == 0) return absl::OkStatus();
    return Guard("all-reduce", [&] {
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(data, count);
      opts.setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      opts.setTimeout(timeout_);
      gloo::allreduce(opts);
    });
  }

  template <typename Fn>
  absl::Status Guard(const char* what, Fn fn) {
    try {
      fn();
      return absl::OkStatus();
    } catch (const std::exception& e) {
      aborted_ = true;  // a failed Gloo context cannot be trusted again
      return absl::AbortedError(absl::StrCat(what, " failed on rank ", rank_, ": ", e.what()));
    }
  }

  int rank_;
  int world_;
  std::shared_ptr<gloo::Context> context_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::chrono::milliseconds timeout_;
  std::atomic<bool> aborted_{false};
  std::vector<float> scratch_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(RendezvousStore* store,
                                                                     int rank, int world_size,
                                                                     const std::string& host,
                                                                     absl::Duration timeout) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " of world ", world_size));
  }
  if (world_size == 1) {
    return std::unique_ptr<Communicator>(new GlooCommunicator(rank, 1, nullptr, nullptr, timeout));
  }
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = host.empty() ? "127.0.0.1" : host;
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, world_size);
    context->setTimeout(std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout)));
    GlooStoreAdapter adapter(store, timeout);
    context->connectFullMesh(adapter, device);
    return std::unique_ptr<Communicator>(
        new GlooCommunicator(rank, world_size, std::move(context), std::move(device), timeout));
  } catch (const std::exception& e) {
    return absl::AbortedError(absl::StrCat("joining the Gloo group as rank ", rank, " of ",
                                           world_size, " failed: ", e.what()));
  }
}

}  // namespace tessera
