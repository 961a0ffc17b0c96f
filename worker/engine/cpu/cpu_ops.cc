// CpuOps: the ops API wired to the CPU reference kernels (see cpu_ops.h).
#include "worker/engine/cpu/cpu_ops.h"

#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/host_memory.h"
#include "common/status_macros.h"
#include "worker/engine/cpu/attention.h"
#include "worker/engine/cpu/elementwise.h"
#include "worker/engine/cpu/embedding.h"
#include "worker/engine/cpu/fused_adam.h"
#include "worker/engine/cpu/fused_linear_cross_entropy.h"
#include "worker/engine/cpu/gemm.h"
#include "worker/engine/cpu/fp8_stats.h"
#include "worker/engine/cpu/quantize.h"
#include "worker/engine/cpu/rmsnorm.h"
#include "worker/engine/cpu/rope.h"
#include "worker/engine/cpu/swiglu.h"
#include "worker/ops/op_checks.h"

namespace tessera {
namespace {

// The host's count of a batch's documents against the starts themselves
// (which cpu::AttentionForward has checked for form): a count the CUDA
// engine would plan cuDNN's ragged batch from must describe the starts.
absl::Status CheckDocumentCounts(const AttentionDocuments& documents) {
  const DocumentCounts& given = documents.counts;
  if (given == DocumentCounts{}) return absl::OkStatus();
  const TensorDesc& starts = documents.starts;
  if (starts.shape.rank != 2 || starts.data == nullptr) {
    return absl::InvalidArgumentError(
        "documents.counts: counted documents need doc_starts [B, S] int32 data");
  }
  const DocumentCounts counted = CountDocuments(
      absl::MakeConstSpan(starts.As<const int32_t>(), starts.NumElements()), starts.shape[1]);
  if (given.count != counted.count) {
    return absl::InvalidArgumentError(absl::StrCat("documents.counts.count: ", given.count,
                                                   ", but doc_starts holds ", counted.count,
                                                   " documents"));
  }
  if (given.longest != counted.longest) {
    return absl::InvalidArgumentError(absl::StrCat("documents.counts.longest: ", given.longest,
                                                   ", but the longest document in doc_starts has ",
                                                   counted.longest, " tokens"));
  }
  for (int c = 0; c < kDocumentLengthClasses; ++c) {
    if (given.per_length_class[c] != counted.per_length_class[c]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "documents.counts.per_length_class[", c, "]: ", given.per_length_class[c],
          ", but doc_starts holds ", counted.per_length_class[c], " documents of ",
          c == 0 ? int64_t{1} : (int64_t{1} << (c - 1)) + 1, "..", int64_t{1} << c, " tokens"));
    }
  }
  return absl::OkStatus();
}

// Counts itself in `live` (the engine's bytes in use) while it exists.
class HostBuffer : public Buffer {
 public:
  HostBuffer(void* data, size_t bytes, std::shared_ptr<std::atomic<int64_t>> live)
      : data_(data), bytes_(bytes), live_(std::move(live)) {
    *live_ += static_cast<int64_t>(bytes_);
  }
  ~HostBuffer() override {
    *live_ -= static_cast<int64_t>(bytes_);
    std::free(data_);
  }
  void* data() const override { return data_; }
  size_t bytes() const override { return bytes_; }

 private:
  void* data_;
  size_t bytes_;
  std::shared_ptr<std::atomic<int64_t>> live_;
};

class CpuOps : public Ops {
 public:
  CpuOps() { openblas_set_num_threads(1); }

 private:
  // Bytes of the buffers this engine allocated and that still exist (shared
  // with them: a buffer may outlive its engine).
  std::shared_ptr<std::atomic<int64_t>> live_bytes_ = std::make_shared<std::atomic<int64_t>>(0);

 public:

  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t bytes) override {
    if (bytes > SIZE_MAX - 64) {
      return absl::ResourceExhaustedError(
          absl::StrCat("host allocation of ", bytes, " bytes failed"));
    }
    size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat("host allocation of ", bytes, " bytes failed"));
    }
    std::memset(p, 0, rounded == 0 ? 64 : rounded);
    return std::unique_ptr<Buffer>(new HostBuffer(p, bytes, live_bytes_));
  }
  // The engine's memory is host memory already.
  absl::StatusOr<std::unique_ptr<Buffer>> AllocateHost(size_t bytes) override {
    return Allocate(bytes);
  }
  absl::Status CopyToDevice(void* dst, const void* src, size_t bytes, Stream*) override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes, Stream*) override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status CopyDeviceToDevice(void* dst, const void* src, size_t bytes, Stream*) override {
    if (bytes > 0) std::memmove(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status Memset(void* dst, int value, size_t bytes, Stream*) override {
    if (bytes > 0) std::memset(dst, value, bytes);
    return absl::OkStatus();
  }
  absl::Status Synchronize(Stream*) override { return absl::OkStatus(); }

  // Work runs as it is queued: there is one (implicit) stream and nothing to
  // capture.
  absl::StatusOr<Stream*> CreateStream() override { return nullptr; }
  absl::Status BeginCapture(Stream*) override {
    return absl::UnimplementedError("the CPU engine runs work as it is queued: nothing to capture");
  }
  absl::StatusOr<std::unique_ptr<CapturedWork>> EndCapture(Stream*) override {
    return absl::FailedPreconditionError("EndCapture without BeginCapture");
  }
  absl::Status Replay(const CapturedWork&, Stream*) override {
    return absl::FailedPreconditionError("the CPU engine has no captured work to replay");
  }

  absl::Status MarkTime(int mark, Stream*) override {
    if (mark < 0 || mark >= kTimeMarks) {
      return absl::InvalidArgumentError(
          absl::StrCat("time mark ", mark, " is outside [0, ", kTimeMarks, ")"));
    }
    marks_[mark] = std::chrono::steady_clock::now();
    marked_[mark] = true;
    return absl::OkStatus();
  }
  absl::StatusOr<double> SecondsBetween(int from, int to) override {
    for (int mark : {from, to}) {
      if (mark < 0 || mark >= kTimeMarks || !marked_[mark]) {
        return absl::FailedPreconditionError(absl::StrCat("time mark ", mark, " was not recorded"));
      }
    }
    return std::chrono::duration<double>(marks_[to] - marks_[from]).count();
  }

  absl::Status Quantize(const TensorDesc& in, const TensorDesc& out, Stream*) override {
    return cpu::Quantize(in, out);
  }
  absl::Status QuantizeTranspose(const TensorDesc& in, const TensorDesc& out,
                                 const TensorDesc& out_t, Stream*) override {
    return cpu::QuantizeTranspose(in, out, out_t);
  }
  absl::Status Dequantize(const TensorDesc& in, const TensorDesc& out, Stream*) override {
    return cpu::Dequantize(in, out);
  }
  absl::Status Amax(const TensorDesc& in, float* amax, Stream*) override {
    return cpu::Amax(in, amax);
  }
  absl::Status Fp8Stats(const TensorDesc& in, DType format, const float* scale, int64_t* counts,
                        Stream*) override {
    return cpu::Fp8Stats(in, format, scale, counts);
  }
  absl::Status UpdateFp8Scales(float* amax, float* history, float* scale, float* scale_inv,
                               int scale_inv_stride, int n, int history_len, float fp8_max,
                               int margin, AmaxAlgo algo, Stream*) override {
    return cpu::UpdateFp8Scales(amax, history, scale, scale_inv, scale_inv_stride, n, history_len,
                                fp8_max, margin, algo);
  }
  absl::Status Transpose(const TensorDesc& in, const TensorDesc& out, Stream*) override {
    return cpu::Transpose(in, out);
  }
  absl::Status Gemm(const TensorDesc& a, bool trans_a, const TensorDesc& b, bool trans_b,
                    const TensorDesc& d, bool accumulate, Stream*) override {
    return cpu::Gemm(a, trans_a, b, trans_b, d, accumulate);
  }
  absl::Status GemmAdd(const TensorDesc& a, bool trans_a, const TensorDesc& b, bool trans_b,
                       const TensorDesc& c, const TensorDesc& d, Stream*) override {
    return cpu::GemmAdd(a, trans_a, b, trans_b, c, d);
  }
  absl::Status Add(const TensorDesc& a, const TensorDesc& b, const TensorDesc& out,
                   Stream*) override {
    return cpu::Add(a, b, out);
  }
  absl::Status Cast(const TensorDesc& in, const TensorDesc& out, Stream*) override {
    return cpu::Cast(in, out);
  }
  absl::Status EmbeddingForward(const TensorDesc& ids, const TensorDesc& table,
                                const TensorDesc& out, Stream*) override {
    return cpu::EmbeddingForward(ids, table, out);
  }
  absl::Status EmbeddingBackward(const TensorDesc& ids, const TensorDesc& grad_out,
                                 const TensorDesc& grad_table, int64_t first_row, int64_t vocab,
                                 Stream*) override {
    return cpu::EmbeddingBackward(ids, grad_out, grad_table, first_row, vocab);
  }
  absl::Status RmsNormForward(const TensorDesc& x, const TensorDesc& weight, float eps,
                              const TensorDesc& out, const TensorDesc& rstd, Stream*) override {
    return cpu::RmsNormForward(x, weight, eps, out, rstd);
  }
  // The reference composes the two ops through a bf16 temporary.
  absl::Status RmsNormForwardQuantize(const TensorDesc& x, const TensorDesc& weight, float eps,
                                      const TensorDesc& out, const TensorDesc& out_t,
                                      const TensorDesc& rstd, Stream*) override {
    RETURN_IF_ERROR(CheckRmsNormForwardQuantizeArgs(x, weight, eps, out, out_t, rstd));
    TensorDesc normed = Bf16Temporary(norm_temp_, x.shape);
    RETURN_IF_ERROR(cpu::RmsNormForward(x, weight, eps, normed, rstd));
    return cpu::QuantizeTranspose(normed, out, out_t);
  }
  absl::Status RmsNormBackward(const TensorDesc& grad_out, const TensorDesc& x,
                               const TensorDesc& weight, const TensorDesc& rstd,
                               const TensorDesc& grad_x, bool accumulate_grad_x,
                               const TensorDesc& grad_weight, Stream*) override {
    return cpu::RmsNormBackward(grad_out, x, weight, rstd, grad_x, accumulate_grad_x, grad_weight);
  }
  absl::Status RopeForward(const TensorDesc& qkv, int n_kv_heads, float theta, Stream*) override {
    return cpu::RopeForward(qkv, n_kv_heads, theta);
  }
  absl::Status RopeBackward(const TensorDesc& grad_qkv, int n_kv_heads, float theta,
                            Stream*) override {
    return cpu::RopeBackward(grad_qkv, n_kv_heads, theta);
  }
  absl::Status AttentionForward(const TensorDesc& qkv, int n_kv_heads,
                                const AttentionDocuments& documents, const TensorDesc& out,
                                const TensorDesc& lse, Stream*) override {
    RETURN_IF_ERROR(cpu::AttentionForward(qkv, n_kv_heads, out, lse, documents.starts));
    return CheckDocumentCounts(documents);
  }
  absl::Status AttentionBackward(const TensorDesc& grad_out, const TensorDesc& qkv, int n_kv_heads,
                                 const AttentionDocuments& documents, const TensorDesc& out,
                                 const TensorDesc& lse, const TensorDesc& grad_qkv,
                                 Stream*) override {
    RETURN_IF_ERROR(CheckDocumentCounts(documents));
    return cpu::AttentionBackward(grad_out, qkv, n_kv_heads, out, lse, grad_qkv,
                                  documents.starts);
  }
  absl::Status SwiGluForward(const TensorDesc& gate_up, const TensorDesc& out, Stream*) override {
    return cpu::SwiGluForward(gate_up, out);
  }
  absl::Status SwiGluBackward(const TensorDesc& grad_out, const TensorDesc& gate_up,
                              const TensorDesc& grad_gate_up, Stream*) override {
    return cpu::SwiGluBackward(grad_out, gate_up, grad_gate_up);
  }
  // MemAvailable of /proc/meminfo (what the kernel can give without
  // swapping), else the free pages.
  absl::StatusOr<int64_t> AvailableMemoryBytes() override { return AvailableHostMemoryBytes(); }
  absl::StatusOr<int64_t> MemoryInUseBytes() override { return live_bytes_->load(); }
  std::string NumericsStack() const override {
    // OpenBLAS's configuration line: its version and the kernel set it
    // chose for this CPU, both of which decide the GEMMs' summation order.
    const char* config = openblas_get_config();
    return absl::StrCat("CPU engine, ", config != nullptr ? config : "OpenBLAS");
  }
  // The reference composes the two ops through a bf16 temporary.
  absl::Status SwiGluForwardQuantize(const TensorDesc& gate_up, const TensorDesc& out,
                                     const TensorDesc& out_t, Stream*) override {
    RETURN_IF_ERROR(CheckSwiGluForwardQuantizeArgs(gate_up, out, out_t));
    TensorDesc act = Bf16Temporary(swiglu_temp_, Shape{gate_up.shape[0], gate_up.shape[1] / 2});
    RETURN_IF_ERROR(cpu::SwiGluForward(gate_up, act));
    return cpu::QuantizeTranspose(act, out, out_t);
  }
  absl::Status SwiGluBackwardQuantize(const TensorDesc& grad_out, const TensorDesc& gate_up,
                                      const TensorDesc& dgu, const TensorDesc& dgu_t,
                                      Stream*) override {
    RETURN_IF_ERROR(CheckSwiGluBackwardQuantizeArgs(grad_out, gate_up, dgu, dgu_t));
    TensorDesc grad = Bf16Temporary(swiglu_temp_, gate_up.shape);
    RETURN_IF_ERROR(cpu::SwiGluBackward(grad_out, gate_up, grad));
    return cpu::QuantizeTranspose(grad, dgu, dgu_t);
  }
  absl::Status FusedLinearCrossEntropy(const TensorDesc& x, const TensorDesc& weight,
                                       const TensorDesc& targets, int ignore_index,
                                       int chunk_tokens, float* loss_sum, float* valid_tokens,
                                       const TensorDesc& grad_x, const TensorDesc& grad_weight,
                                       bool accumulate_grad_weight, Stream*) override {
    return cpu::FusedLinearCrossEntropy(x, weight, targets, ignore_index, chunk_tokens, loss_sum,
                                        valid_tokens, grad_x, grad_weight, accumulate_grad_weight);
  }
  absl::StatusOr<std::unique_ptr<AdamPlan>> CreateAdamPlan(
      absl::Span<const AdamShard> shards) override {
    return cpu::CreateAdamPlan(shards);
  }
  absl::Status GradSumSquares(const AdamPlan& plan, float* sum_sq, Stream*) override {
    return cpu::GradSumSquares(plan, sum_sq);
  }
  absl::Status ComputeGradScale(const float* sum_sq, const float* tokens, float max_norm,
                                float* grad_norm, float* grad_scale, Stream*) override {
    return cpu::ComputeGradScale(sum_sq, tokens, max_norm, grad_norm, grad_scale);
  }
  absl::Status FusedAdam(const AdamPlan& plan, const AdamHyper& hyper, const float* grad_scale,
                         Stream*) override {
    return cpu::FusedAdam(plan, hyper, grad_scale);
  }

 private:
  // A bf16 tensor of `shape` over `storage`, grown as needed (kept between
  // calls, so a steady state allocates nothing).
  static TensorDesc Bf16Temporary(std::vector<uint16_t>& storage, Shape shape) {
    storage.resize(static_cast<size_t>(std::max<int64_t>(shape.NumElements(), 1)));
    return MakeTensor(storage.data(), DType::kBFloat16, shape);
  }

  std::vector<uint16_t> swiglu_temp_;
  std::vector<uint16_t> norm_temp_;  // RmsNormForwardQuantize's bf16 [T, H]
  std::array<std::chrono::steady_clock::time_point, kTimeMarks> marks_{};
  std::array<bool, kTimeMarks> marked_{};
};

}  // namespace

std::unique_ptr<Ops> CreateCpuOps() { return std::make_unique<CpuOps>(); }

}  // namespace tessera
