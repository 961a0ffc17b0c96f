// CudaOps: the ops API on the GPU (see cuda_ops.h).
#include "worker/engine/cuda/cuda_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/engine/cpu/tensor_access.h"
#include "worker/engine/cuda/attention_args.h"
#include "worker/engine/cuda/captured_work.h"
#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/device_context.h"
#include "worker/engine/cuda/gemm.h"
#include "worker/engine/cuda/kernels.h"
#include "worker/engine/cuda/time_marks.h"

namespace tessera {
namespace {

using cpu::CheckDType;
using cpu::CheckRank;
using cpu::CheckShape;

cudaStream_t S(Stream* stream) { return reinterpret_cast<cudaStream_t>(stream); }

// The FP8 outputs of an op that ends in QuantizeTranspose: `name` [rows,
// cols] e4m3/e5m2 (data may be null) with its scale set, and `name_t`
// [cols, rows].
absl::Status CheckFp8CastOutputs(const char* name, const TensorDesc& out, const char* name_t,
                                 const TensorDesc& out_t, int64_t rows, int64_t cols) {
  RETURN_IF_ERROR(CheckDType(name, out, {DType::kE4M3, DType::kE5M2}));
  if (out.data != nullptr) RETURN_IF_ERROR(CheckShape(name, out, Shape{rows, cols}));
  RETURN_IF_ERROR(CheckShape(name_t, out_t, Shape{cols, rows}));
  if (out.scale == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(name, ".scale: must be set"));
  }
  return absl::OkStatus();
}

class DeviceBuffer : public Buffer {
 public:
  DeviceBuffer(void* data, size_t bytes) : data_(data), bytes_(bytes) {}
  ~DeviceBuffer() override { cudaFree(data_); }
  void* data() const override { return data_; }
  size_t bytes() const override { return bytes_; }

 private:
  void* data_;
  size_t bytes_;
};

// cudaMalloc that leaves no stale error behind: a failed allocation is also
// recorded as the thread's "last error", which the next launch check would
// otherwise report against an innocent kernel.
absl::Status DeviceMalloc(void** p, size_t bytes) {
  const cudaError_t err = cudaMalloc(p, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();
    *p = nullptr;
  }
  CUDA_RETURN_IF_ERROR(err);
  return absl::OkStatus();
}

// Device memory that grows on first use for a larger shape, then is reused.
// Once the engine has captured work (`*captured`), a buffer it outgrows is
// kept until the engine goes, not freed: a captured graph may still point
// at it.
class Scratch {
 public:
  explicit Scratch(const bool* captured) : captured_(captured) {}
  ~Scratch() {
    if (data_ != nullptr) cudaFree(data_);
    for (void* p : retired_) cudaFree(p);
  }
  absl::StatusOr<void*> Get(size_t bytes) {
    if (bytes > bytes_) {
      if (data_ != nullptr) {
        if (*captured_) {
          retired_.push_back(data_);
        } else {
          cudaFree(data_);
        }
      }
      data_ = nullptr;
      bytes_ = 0;
      RETURN_IF_ERROR(DeviceMalloc(&data_, bytes));
      bytes_ = bytes;
    }
    return data_;
  }

 private:
  const bool* captured_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  std::vector<void*> retired_;
};

// The rank's shard table in device memory, built once by CreateAdamPlan:
// one allocation holding [num_shards] DeviceAdamShard, then the block map
// ([num_blocks] shard index, [num_blocks] element offset) and [num_blocks]
// fp32 partial sums for GradSumSquares.
class CudaAdamPlan : public AdamPlan {
 public:
  ~CudaAdamPlan() override {
    if (storage != nullptr) cudaFree(storage);
  }
  void* storage = nullptr;
  cuda::DeviceAdamShard* table = nullptr;
  int* block_shard = nullptr;
  int64_t* block_offset = nullptr;
  float* partials = nullptr;
  int num_shards = 0;
  int num_blocks = 0;
};

size_t RoundUp(size_t bytes) { return (bytes + 255) / 256 * 256; }

class CudaOps : public Ops {
 public:
  explicit CudaOps(std::unique_ptr<cuda::DeviceContext> ctx)
      : ctx_(std::move(ctx)), gemm_(ctx_.get()) {}

  absl::Status Init() {
    RETURN_IF_ERROR(gemm_.Init());
    return time_marks_.Init(kTimeMarks);
  }

  // ---- Memory ----
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t bytes) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    void* p = nullptr;
    RETURN_IF_ERROR(DeviceMalloc(&p, bytes == 0 ? 256 : bytes));
    return std::unique_ptr<Buffer>(new DeviceBuffer(p, bytes));
  }
  absl::Status CopyToDevice(void* dst, const void* src, size_t bytes, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    if (bytes == 0) return absl::OkStatus();
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, S(stream)));
    return absl::OkStatus();
  }
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    if (bytes == 0) return absl::OkStatus();
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, S(stream)));
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(S(stream)));
    return absl::OkStatus();
  }
  absl::Status CopyDeviceToDevice(void* dst, const void* src, size_t bytes, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    if (bytes == 0) return absl::OkStatus();
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, S(stream)));
    return absl::OkStatus();
  }
  absl::Status Memset(void* dst, int value, size_t bytes, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    if (bytes == 0) return absl::OkStatus();
    CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dst, value, bytes, S(stream)));
    return absl::OkStatus();
  }
  absl::Status Synchronize(Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    return ctx_->SynchronizeAndCheckFlag(S(stream));
  }

  // ---- Streams and captured work ----
  absl::StatusOr<Stream*> CreateStream() override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    ASSIGN_OR_RETURN(cudaStream_t stream, streams_.Create());
    return reinterpret_cast<Stream*>(stream);
  }
  absl::Status BeginCapture(Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    return cuda::BeginCapture(S(stream));
  }
  absl::StatusOr<std::unique_ptr<CapturedWork>> EndCapture(Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    absl::StatusOr<std::unique_ptr<CapturedWork>> work = cuda::EndCapture(S(stream));
    if (work.ok()) captured_ = true;
    return work;
  }
  absl::Status Replay(const CapturedWork& work, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    return cuda::Replay(work, S(stream));
  }

  // ---- Step timing ----
  absl::Status MarkTime(int mark, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    return time_marks_.Record(mark, S(stream));
  }
  absl::StatusOr<double> SecondsBetween(int from, int to) override {
    return time_marks_.SecondsBetween(from, to);
  }

  // ---- FP8 ----
  absl::Status Quantize(const TensorDesc& in, const TensorDesc& out, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    RETURN_IF_ERROR(CheckDType("in", in, {DType::kFloat32, DType::kBFloat16}));
    RETURN_IF_ERROR(CheckDType("out", out, {DType::kE4M3, DType::kE5M2}));
    if (out.scale == nullptr) return absl::InvalidArgumentError("out.scale: must be set");
    if (in.NumElements() != out.NumElements()) {
      return absl::InvalidArgumentError("out: element count differs from in");
    }
    return cuda::LaunchQuantize(in, out, nullptr, S(stream));
  }
  absl::Status QuantizeTranspose(const TensorDesc& in, const TensorDesc& out,
                                 const TensorDesc& out_t, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    RETURN_IF_ERROR(CheckDType("in", in, {DType::kFloat32, DType::kBFloat16}));
    RETURN_IF_ERROR(CheckDType("out", out, {DType::kE4M3, DType::kE5M2}));
    RETURN_IF_ERROR(CheckRank("in", in, 2));
    RETURN_IF_ERROR(CheckShape("out_t", out_t, Shape{in.shape[1], in.shape[0]}));
    if (out.scale == nullptr) return absl::InvalidArgumentError("out.scale: must be set");
    return cuda::LaunchQuantize(in, out, &out_t, S(stream));
  }
  absl::Status Dequantize(const TensorDesc& in, const TensorDesc& out, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    RETURN_IF_ERROR(CheckDType("in", in, {DType::kE4M3, DType::kE5M2}));
    RETURN_IF_ERROR(CheckDType("out", out, {DType::kFloat32, DType::kBFloat16}));
    if (in.scale_inv == nullptr) return absl::InvalidArgumentError("in.scale_inv: must be set");
    return cuda::LaunchDequantize(in, out, S(stream));
  }
  absl::Status Amax(const TensorDesc& in, float* amax, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    RETURN_IF_ERROR(CheckDType("in", in, {DType::kFloat32, DType::kBFloat16}));
    return cuda::LaunchAmax(in, amax, S(stream));
  }
  absl::Status UpdateFp8Scales(float* amax, float* history, float* scale, float* scale_inv,
                               int scale_inv_stride, int n, int history_len, float fp8_max,
                               int margin, AmaxAlgo algo, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    RETURN_IF_ERROR(cpu::CheckUpdateFp8ScalesArgs(amax, history, scale, scale_inv,
                                                  scale_inv_stride, n, history_len));
    return cuda::LaunchUpdateFp8Scales(amax, history, scale, scale_inv, scale_inv_stride, n,
                                       history_len, fp8_max, margin, algo, S(stream));
  }
  absl::Status Transpose(const TensorDesc& in, const TensorDesc& out, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    RETURN_IF_ERROR(CheckRank("in", in, 2));
    RETURN_IF_ERROR(CheckShape("out", out, Shape{in.shape[1], in.shape[0]}));
    return cuda::LaunchTranspose(in, out, S(stream));
  }

  // ---- GEMM ----
  absl::Status Gemm(const TensorDesc& a, bool trans_a, const TensorDesc& b, bool trans_b,
                    const TensorDesc& d, bool accumulate, Stream* stream) override {
    return GemmWithAddend(a, trans_a, b, trans_b, d, accumulate, nullptr, stream);
  }
  absl::Status GemmAdd(const TensorDesc& a, bool trans_a, const TensorDesc& b, bool trans_b,
                       const TensorDesc& c, const TensorDesc& d, Stream* stream) override {
    RETURN_IF_ERROR(cpu::CheckGemmAddend(c, d));
    return GemmWithAddend(a, trans_a, b, trans_b, d, /*accumulate=*/true, c.data, stream);
  }

  // ---- Elementwise and normalisation ----
  absl::Status Add(const TensorDesc& a, const TensorDesc& b, const TensorDesc& out,
                   Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    RETURN_IF_ERROR(CheckDType("a", a, {DType::kFloat32, DType::kBFloat16}));
    RETURN_IF_ERROR(CheckDType("b", b, {DType::kFloat32, DType::kBFloat16}));
    RETURN_IF_ERROR(CheckDType("out", out, {DType::kFloat32, DType::kBFloat16}));
    if (a.NumElements() != out.NumElements() || b.NumElements() != out.NumElements()) {
      return absl::InvalidArgumentError("a, b, out: element counts differ");
    }
    return cuda::LaunchAdd(a, b, out, S(stream));
  }
  absl::Status Cast(const TensorDesc& in, const TensorDesc& out, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    RETURN_IF_ERROR(CheckDType("in", in, {DType::kFloat32, DType::kBFloat16}));
    RETURN_IF_ERROR(CheckDType("out", out, {DType::kFloat32, DType::kBFloat16}));
    if (in.NumElements() != out.NumElements()) {
      return absl::InvalidArgumentError("out: element count differs from in");
    }
    return cuda::LaunchCast(in, out, S(stream));
  }
  absl::Status EmbeddingForward(const TensorDesc& ids, const TensorDesc& table,
                                const TensorDesc& out, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    RETURN_IF_ERROR(CheckRank("table", table, 2));
    RETURN_IF_ERROR(CheckShape("out", out, Shape{ids.NumElements(), table.shape[1]}));
    return cuda::LaunchEmbeddingForward(ids, table, out, ctx_->error_flag(), S(stream));
  }
  absl::Status EmbeddingBackward(const TensorDesc& ids, const TensorDesc& grad_out,
                                 const TensorDesc& grad_table, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    RETURN_IF_ERROR(CheckDType("grad_table", grad_table, {DType::kFloat32}));
    return cuda::LaunchEmbeddingBackward(ids, grad_out, grad_table, ctx_->error_flag(), S(stream));
  }
  absl::Status RmsNormForward(const TensorDesc& x, const TensorDesc& weight, float eps,
                              const TensorDesc& out, const TensorDesc& rstd, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    RETURN_IF_ERROR(CheckRank("x", x, 2));
    RETURN_IF_ERROR(CheckShape("weight", weight, Shape{x.shape[1]}));
    RETURN_IF_ERROR(CheckShape("rstd", rstd, Shape{x.shape[0]}));
    return cuda::LaunchRmsNormForward(x, weight, eps, out, rstd, S(stream));
  }
  // One fused pass where cuda::LaunchRmsNormForwardQuantize accepts the
  // shapes; otherwise the two ops through a bf16 scratch tensor (aligned, so
  // RmsNormForward takes the same path as into any allocated bf16 tensor).
  absl::Status RmsNormForwardQuantize(const TensorDesc& x, const TensorDesc& weight, float eps,
                                      const TensorDesc& out, const TensorDesc& out_t,
                                      const TensorDesc& rstd, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    RETURN_IF_ERROR(CheckDType("x", x, {DType::kFloat32, DType::kBFloat16}));
    RETURN_IF_ERROR(CheckRank("x", x, 2));
    const int64_t t = x.shape[0], h = x.shape[1];
    RETURN_IF_ERROR(cpu::CheckData("x", x));
    RETURN_IF_ERROR(CheckDType("weight", weight, {DType::kFloat32, DType::kBFloat16}));
    RETURN_IF_ERROR(CheckShape("weight", weight, Shape{h}));
    RETURN_IF_ERROR(cpu::CheckData("weight", weight));
    RETURN_IF_ERROR(CheckDType("rstd", rstd, {DType::kFloat32}));
    RETURN_IF_ERROR(CheckShape("rstd", rstd, Shape{t}));
    RETURN_IF_ERROR(cpu::CheckData("rstd", rstd));
    if (!(eps >= 0.0f) || std::isinf(eps)) {
      return absl::InvalidArgumentError(absl::StrCat("eps: must be finite and >= 0, got ", eps));
    }
    RETURN_IF_ERROR(CheckFp8CastOutputs("out", out, "out_t", out_t, t, h));
    if (out_t.dtype != out.dtype) {
      return absl::InvalidArgumentError("out_t: dtype must equal out's (it shares out's scale)");
    }
    RETURN_IF_ERROR(cpu::CheckData("out_t", out_t));
    ASSIGN_OR_RETURN(const bool fused, cuda::LaunchRmsNormForwardQuantize(x, weight, eps, out,
                                                                          out_t, rstd, S(stream)));
    if (fused) return absl::OkStatus();
    ASSIGN_OR_RETURN(void* normed, rmsnorm_out_scratch_.Get(std::max<int64_t>(1, t * h) * 2));
    const TensorDesc normed_desc = MakeTensor(normed, DType::kBFloat16, Shape{t, h});
    RETURN_IF_ERROR(cuda::LaunchRmsNormForward(x, weight, eps, normed_desc, rstd, S(stream)));
    return cuda::LaunchQuantize(normed_desc, out, &out_t, S(stream));
  }
  absl::Status RmsNormBackward(const TensorDesc& grad_out, const TensorDesc& x,
                               const TensorDesc& weight, const TensorDesc& rstd,
                               const TensorDesc& grad_x, bool accumulate_grad_x,
                               const TensorDesc& grad_weight, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    RETURN_IF_ERROR(CheckRank("x", x, 2));
    RETURN_IF_ERROR(CheckDType("grad_weight", grad_weight, {DType::kFloat32}));
    RETURN_IF_ERROR(CheckShape("grad_out", grad_out, x.shape));
    RETURN_IF_ERROR(CheckShape("grad_x", grad_x, x.shape));
    RETURN_IF_ERROR(CheckShape("weight", weight, Shape{x.shape[1]}));
    RETURN_IF_ERROR(CheckShape("grad_weight", grad_weight, Shape{x.shape[1]}));
    RETURN_IF_ERROR(CheckShape("rstd", rstd, Shape{x.shape[0]}));
    const int64_t partials = cuda::RmsNormWeightGradScratchFloats(x.shape[0], x.shape[1]);
    ASSIGN_OR_RETURN(void* scratch,
                     rmsnorm_scratch_.Get(std::max<int64_t>(1, partials) * sizeof(float)));
    return cuda::LaunchRmsNormBackward(grad_out, x, weight, rstd, grad_x, accumulate_grad_x,
                                       grad_weight, static_cast<float*>(scratch), S(stream));
  }
  absl::Status RopeForward(const TensorDesc& qkv, int n_kv_heads, float theta,
                           Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    ASSIGN_OR_RETURN(int rotated, cuda::RopeRotatedHeads("qkv", qkv, n_kv_heads));
    return cuda::LaunchRope(qkv, rotated, theta, 1.0f, S(stream));
  }
  absl::Status RopeBackward(const TensorDesc& grad_qkv, int n_kv_heads, float theta,
                            Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    ASSIGN_OR_RETURN(int rotated, cuda::RopeRotatedHeads("grad_qkv", grad_qkv, n_kv_heads));
    return cuda::LaunchRope(grad_qkv, rotated, theta, -1.0f, S(stream));
  }
  absl::Status AttentionForward(const TensorDesc& qkv, int n_kv_heads, const TensorDesc& out,
                                const TensorDesc& lse, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    ASSIGN_OR_RETURN(cuda::AttentionShape shape,
                     cuda::ReadAttentionShape(qkv, n_kv_heads, out, lse));
    return cuda::LaunchFlashAttentionForward(shape, qkv.data, out.data, lse.As<float>(),
                                             S(stream));
  }
  absl::Status AttentionBackward(const TensorDesc& grad_out, const TensorDesc& qkv,
                                 int n_kv_heads, const TensorDesc& out, const TensorDesc& lse,
                                 const TensorDesc& grad_qkv, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    ASSIGN_OR_RETURN(cuda::AttentionShape shape,
                     cuda::ReadAttentionShape(qkv, n_kv_heads, out, lse));
    RETURN_IF_ERROR(cuda::CheckAttentionGradients(grad_out, out, grad_qkv, qkv));
    // D and the log2-domain lse per query, padded to whole tiles.
    const int64_t floats = std::max<int64_t>(1, cuda::FlashAttentionBackwardScratchFloats(shape));
    ASSIGN_OR_RETURN(void* scratch, attention_scratch_.Get(floats * sizeof(float)));
    return cuda::LaunchFlashAttentionBackward(shape, grad_out.data, qkv.data, out.data,
                                              lse.As<float>(), grad_qkv.data,
                                              static_cast<float*>(scratch), S(stream));
  }
  absl::Status SwiGluForward(const TensorDesc& gate_up, const TensorDesc& out, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    RETURN_IF_ERROR(CheckRank("gate_up", gate_up, 2));
    return cuda::LaunchSwiGluForward(gate_up, out, S(stream));
  }
  absl::Status SwiGluBackward(const TensorDesc& grad_out, const TensorDesc& gate_up,
                              const TensorDesc& grad_gate_up, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    RETURN_IF_ERROR(CheckRank("gate_up", gate_up, 2));
    return cuda::LaunchSwiGluBackward(grad_out, gate_up, grad_gate_up, S(stream));
  }
  absl::StatusOr<int64_t> AvailableMemoryBytes() override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
    return static_cast<int64_t>(free_bytes);
  }
  // One fused pass where cuda::LaunchSwiGlu*Quantize accepts the shapes;
  // otherwise the two ops through a bf16 scratch tensor.
  absl::Status SwiGluForwardQuantize(const TensorDesc& gate_up, const TensorDesc& out,
                                     const TensorDesc& out_t, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    RETURN_IF_ERROR(CheckDType("gate_up", gate_up, {DType::kBFloat16}));
    RETURN_IF_ERROR(CheckRank("gate_up", gate_up, 2));
    const int64_t t = gate_up.shape[0], f = gate_up.shape[1] / 2;
    if (gate_up.shape[1] % 2 != 0) return absl::InvalidArgumentError("gate_up: odd width");
    RETURN_IF_ERROR(CheckFp8CastOutputs("out", out, "out_t", out_t, t, f));
    ASSIGN_OR_RETURN(const bool fused,
                     cuda::LaunchSwiGluForwardQuantize(gate_up, out, out_t, S(stream)));
    if (fused) return absl::OkStatus();
    ASSIGN_OR_RETURN(void* act, swiglu_scratch_.Get(std::max<int64_t>(1, t * f) * 2));
    const TensorDesc act_desc = MakeTensor(act, DType::kBFloat16, Shape{t, f});
    RETURN_IF_ERROR(cuda::LaunchSwiGluForward(gate_up, act_desc, S(stream)));
    return cuda::LaunchQuantize(act_desc, out, &out_t, S(stream));
  }
  absl::Status SwiGluBackwardQuantize(const TensorDesc& grad_out, const TensorDesc& gate_up,
                                      const TensorDesc& dgu, const TensorDesc& dgu_t,
                                      Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    RETURN_IF_ERROR(CheckDType("gate_up", gate_up, {DType::kBFloat16}));
    RETURN_IF_ERROR(CheckDType("grad_out", grad_out, {DType::kBFloat16}));
    RETURN_IF_ERROR(CheckRank("gate_up", gate_up, 2));
    const int64_t t = gate_up.shape[0], f = gate_up.shape[1] / 2;
    if (gate_up.shape[1] % 2 != 0) return absl::InvalidArgumentError("gate_up: odd width");
    RETURN_IF_ERROR(CheckShape("grad_out", grad_out, Shape{t, f}));
    RETURN_IF_ERROR(CheckFp8CastOutputs("dgu", dgu, "dgu_t", dgu_t, t, 2 * f));
    ASSIGN_OR_RETURN(const bool fused,
                     cuda::LaunchSwiGluBackwardQuantize(grad_out, gate_up, dgu, dgu_t, S(stream)));
    if (fused) return absl::OkStatus();
    ASSIGN_OR_RETURN(void* grad, swiglu_scratch_.Get(std::max<int64_t>(1, t * 2 * f) * 2));
    const TensorDesc grad_desc = MakeTensor(grad, DType::kBFloat16, Shape{t, 2 * f});
    RETURN_IF_ERROR(cuda::LaunchSwiGluBackward(grad_out, gate_up, grad_desc, S(stream)));
    return cuda::LaunchQuantize(grad_desc, dgu, &dgu_t, S(stream));
  }

  // ---- Fused linear + cross-entropy ----
  // Per chunk of at most chunk_tokens rows: logits [c, V] bf16 = x_c · Wᵀ
  // (as under PyTorch's autocast); one kernel turns each row into its loss
  // (fp32 math, atomically added to *loss_sum and 1 to *valid_tokens:
  // nothing is read back) and writes its bf16 dlogits = softmax - onehot
  // over the logits (zero rows for ignored tokens); grad_x_c = dlogits · W
  // (bf16 out); grad_weight (+)= dlogitsᵀ · x_c (fp32 out, bf16 operands:
  // no [V, H] temporary, no fp32 copy of an operand; beta = 0 for the first
  // chunk unless accumulating, so that GEMM reads no old values). The one
  // chunk buffer (chunk x V bf16) is allocated on the first call for a
  // shape and reused by every later call.
  absl::Status FusedLinearCrossEntropy(const TensorDesc& x, const TensorDesc& weight,
                                       const TensorDesc& targets, int ignore_index,
                                       int chunk_tokens, float* loss_sum, float* valid_tokens,
                                       const TensorDesc& grad_x, const TensorDesc& grad_weight,
                                       bool accumulate_grad_weight, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    RETURN_IF_ERROR(CheckDType("x", x, {DType::kBFloat16}));
    RETURN_IF_ERROR(CheckDType("weight", weight, {DType::kBFloat16}));
    RETURN_IF_ERROR(CheckDType("grad_weight", grad_weight, {DType::kFloat32}));
    RETURN_IF_ERROR(CheckRank("x", x, 2));
    RETURN_IF_ERROR(CheckRank("weight", weight, 2));
    const int64_t tokens = x.shape[0], h = x.shape[1], vocab = weight.shape[0];
    RETURN_IF_ERROR(CheckShape("grad_x", grad_x, Shape{tokens, h}));
    RETURN_IF_ERROR(CheckShape("grad_weight", grad_weight, Shape{vocab, h}));
    if (chunk_tokens < 1) return absl::InvalidArgumentError("chunk_tokens: must be >= 1");
    if (tokens == 0) {  // no chunks: an empty sum
      if (!accumulate_grad_weight) {
        CUDA_RETURN_IF_ERROR(cudaMemsetAsync(grad_weight.data, 0, grad_weight.Bytes(), S(stream)));
      }
      return absl::OkStatus();
    }
    const int64_t chunk = std::min<int64_t>(chunk_tokens, tokens);
    // One bf16 buffer per chunk: the logits, then (in place) the dlogits;
    // and the chunk's row losses, summed in a fixed order.
    ASSIGN_OR_RETURN(void* logits, ce_logits_.Get(chunk * vocab * 2));
    ASSIGN_OR_RETURN(void* row_losses, ce_row_losses_.Get(chunk * sizeof(float)));
    for (int64_t start = 0; start < tokens; start += chunk) {
      const int64_t c = std::min(chunk, tokens - start);
      TensorDesc xc = MakeTensor(static_cast<uint16_t*>(x.data) + start * h, DType::kBFloat16, Shape{c, h});
      TensorDesc gxc = MakeTensor(static_cast<uint16_t*>(grad_x.data) + start * h, DType::kBFloat16, Shape{c, h});
      TensorDesc lg = MakeTensor(logits, DType::kBFloat16, Shape{c, vocab});
      RETURN_IF_ERROR(gemm_.Run(xc, false, weight, true, lg, false, S(stream)));
      RETURN_IF_ERROR(cuda::LaunchCrossEntropyRows(
          logits, static_cast<const int32_t*>(targets.data) + start, static_cast<int>(c),
          static_cast<int>(vocab), ignore_index, static_cast<float*>(row_losses), loss_sum,
          valid_tokens, logits, ctx_->error_flag(), S(stream)));
      RETURN_IF_ERROR(gemm_.Run(lg, false, weight, false, gxc, false, S(stream)));
      RETURN_IF_ERROR(gemm_.Run(lg, true, xc, false, grad_weight,
                                accumulate_grad_weight || start > 0, S(stream)));
    }
    return absl::OkStatus();
  }

  // ---- Optimizer ----
  absl::StatusOr<std::unique_ptr<AdamPlan>> CreateAdamPlan(absl::Span<const AdamShard> shards) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    std::vector<cuda::DeviceAdamShard> table;
    std::vector<int> block_shard;
    std::vector<int64_t> block_offset;
    for (size_t i = 0; i < shards.size(); ++i) {
      const AdamShard& s = shards[i];
      const int64_t n = s.master.NumElements();
      if (s.grad.NumElements() != n || s.exp_avg.NumElements() != n ||
          s.exp_avg_sq.NumElements() != n || s.fp8.NumElements() != n) {
        return absl::InvalidArgumentError(absl::StrCat("shard ", i, ": element counts differ"));
      }
      if (s.fp8.dtype != DType::kE4M3 && s.fp8.dtype != DType::kBFloat16) {
        return absl::InvalidArgumentError(
            absl::StrCat("shard ", i, ": fp8: dtype must be e4m3 or bf16, got ",
                         DTypeName(s.fp8.dtype)));
      }
      const bool fp8 = s.fp8.dtype == DType::kE4M3;
      if (fp8 && s.fp8.scale == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("shard ", i, ": fp8.scale: must be set"));
      }
      table.push_back({static_cast<float*>(s.master.data), static_cast<const float*>(s.grad.data),
                       static_cast<float*>(s.exp_avg.data), static_cast<float*>(s.exp_avg_sq.data),
                       s.fp8.data, s.fp8.scale, s.fp8.scale_inv, s.fp8.amax, n, fp8 ? 1 : 0,
                       s.apply_weight_decay ? 1 : 0});
      for (int64_t off = 0; off < n; off += cuda::kAdamChunk) {
        block_shard.push_back(static_cast<int>(i));
        block_offset.push_back(off);
      }
    }
    auto plan = std::make_unique<CudaAdamPlan>();
    plan->num_shards = static_cast<int>(table.size());
    plan->num_blocks = static_cast<int>(block_shard.size());
    // Host image of the table and block map, uploaded with one copy.
    const size_t table_bytes = RoundUp(table.size() * sizeof(cuda::DeviceAdamShard));
    const size_t shard_bytes = RoundUp(block_shard.size() * sizeof(int));
    const size_t offset_bytes = RoundUp(block_offset.size() * sizeof(int64_t));
    const size_t image_bytes = table_bytes + shard_bytes + offset_bytes;
    const size_t partial_bytes = RoundUp(std::max<size_t>(1, block_shard.size()) * sizeof(float));
    std::vector<uint8_t> image(image_bytes, 0);
    std::memcpy(image.data(), table.data(), table.size() * sizeof(cuda::DeviceAdamShard));
    std::memcpy(image.data() + table_bytes, block_shard.data(), block_shard.size() * sizeof(int));
    std::memcpy(image.data() + table_bytes + shard_bytes, block_offset.data(),
                block_offset.size() * sizeof(int64_t));
    RETURN_IF_ERROR(DeviceMalloc(&plan->storage, image_bytes + partial_bytes));
    uint8_t* base = static_cast<uint8_t*>(plan->storage);
    plan->table = reinterpret_cast<cuda::DeviceAdamShard*>(base);
    plan->block_shard = reinterpret_cast<int*>(base + table_bytes);
    plan->block_offset = reinterpret_cast<int64_t*>(base + table_bytes + shard_bytes);
    plan->partials = reinterpret_cast<float*>(base + image_bytes);
    if (image_bytes > 0) {
      CUDA_RETURN_IF_ERROR(
          cudaMemcpy(plan->storage, image.data(), image_bytes, cudaMemcpyHostToDevice));
    }
    return std::unique_ptr<AdamPlan>(std::move(plan));
  }
  absl::Status GradSumSquares(const AdamPlan& plan, float* sum_sq, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    const auto& p = static_cast<const CudaAdamPlan&>(plan);
    return cuda::LaunchGradSumSquares(p.table, p.block_shard, p.block_offset, p.num_blocks,
                                      p.partials, sum_sq, S(stream));
  }
  absl::Status ComputeGradScale(const float* sum_sq, const float* tokens, float max_norm,
                                float* grad_norm, float* grad_scale, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    return cuda::LaunchComputeGradScale(sum_sq, tokens, max_norm, grad_norm, grad_scale, S(stream));
  }
  absl::Status FusedAdam(const AdamPlan& plan, const AdamHyper& hyper, const float* grad_scale,
                         Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    const auto& p = static_cast<const CudaAdamPlan&>(plan);
    return cuda::LaunchFusedAdam(p.table, p.num_shards, p.block_shard, p.block_offset,
                                 p.num_blocks, hyper, grad_scale, S(stream));
  }

 private:
  // Gemm, and GemmAdd with `addend` as cuBLASLt's C.
  absl::Status GemmWithAddend(const TensorDesc& a, bool trans_a, const TensorDesc& b,
                              bool trans_b, const TensorDesc& d, bool accumulate,
                              const void* addend, Stream* stream) {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    const std::initializer_list<DType> operand = {DType::kBFloat16, DType::kE4M3, DType::kE5M2};
    RETURN_IF_ERROR(CheckDType("a", a, operand));
    RETURN_IF_ERROR(CheckDType("b", b, operand));
    RETURN_IF_ERROR(CheckDType("d", d, {DType::kFloat32, DType::kBFloat16}));
    RETURN_IF_ERROR(CheckRank("a", a, 2));
    RETURN_IF_ERROR(CheckRank("b", b, 2));
    RETURN_IF_ERROR(CheckRank("d", d, 2));
    const bool fp8 = IsFp8(a.dtype);
    if (fp8 != IsFp8(b.dtype)) return absl::InvalidArgumentError("a, b: both bf16 or both FP8");
    if (fp8 && a.dtype == DType::kE5M2 && b.dtype == DType::kE5M2) {
      return absl::InvalidArgumentError("a, b: e5m2 x e5m2 is not supported");
    }
    if (fp8 && (trans_a || !trans_b)) {
      return absl::InvalidArgumentError("FP8 operands must be K-contiguous: trans_a=false, trans_b=true");
    }
    if (fp8 && (a.scale_inv == nullptr || b.scale_inv == nullptr)) {
      return absl::InvalidArgumentError("FP8 operands need scale_inv");
    }
    if (accumulate && d.dtype != DType::kFloat32) {
      return absl::InvalidArgumentError("d: accumulate (beta=1) needs an fp32 output");
    }
    const int64_t m = trans_a ? a.shape[1] : a.shape[0], k = trans_a ? a.shape[0] : a.shape[1];
    const int64_t kb = trans_b ? b.shape[1] : b.shape[0], n = trans_b ? b.shape[0] : b.shape[1];
    if (k != kb) return absl::InvalidArgumentError("a, b: inner dimensions differ");
    RETURN_IF_ERROR(CheckShape("d", d, Shape{m, n}));
    return gemm_.Run(a, trans_a, b, trans_b, d, accumulate, S(stream), addend);
  }

  std::unique_ptr<cuda::DeviceContext> ctx_;
  cuda::OwnedStreams streams_;
  cuda::GemmRunner gemm_;
  cuda::TimeMarks time_marks_;
  bool captured_ = false;  // some EndCapture succeeded: scratch buffers are never freed early
  Scratch attention_scratch_{&captured_}, rmsnorm_scratch_{&captured_}, ce_logits_{&captured_},
      swiglu_scratch_{&captured_};
  Scratch rmsnorm_out_scratch_{&captured_};  // RmsNormForwardQuantize's unfused bf16 [T, H]
  Scratch ce_row_losses_{&captured_};        // the fused loss's [chunk] fp32 row losses
};

}  // namespace

absl::StatusOr<std::unique_ptr<Ops>> CreateCudaOps(int device_index) {
  return CreateCudaOps(device_index, cuda::DeviceContext::kDefaultWorkspaceBytes);
}

absl::StatusOr<std::unique_ptr<Ops>> CreateCudaOps(int device_index,
                                                   size_t cublaslt_workspace_bytes) {
  ASSIGN_OR_RETURN(std::unique_ptr<cuda::DeviceContext> ctx,
                   cuda::DeviceContext::Create(device_index, cublaslt_workspace_bytes));
  auto ops = std::make_unique<CudaOps>(std::move(ctx));
  RETURN_IF_ERROR(ops->Init());
  return std::unique_ptr<Ops>(std::move(ops));
}

}  // namespace tessera
