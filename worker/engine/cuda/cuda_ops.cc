// CudaOps: the ops API on the GPU (see cuda_ops.h). A dispatcher: each
// method checks its arguments with the rules both engines share
// (worker/ops/op_checks.h), makes the engine's device current and calls the
// op's launcher. The math lives in the kernel files; the scratch-memory
// rule under captured work in scratch_buffer.h; the fused loss's chunk loop
// in fused_linear_cross_entropy_launcher.cc; the FusedAdam plan's layout in
// fused_adam_plan.cc.
#include "worker/engine/cuda/cuda_ops.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/cudnn_attention_workspace.h"
#include "common/status_macros.h"
#include "worker/engine/cuda/attention_args.h"
#include "worker/engine/cuda/cudnn_attention.h"
#include "worker/engine/cuda/captured_work.h"
#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/device_context.h"
#include "worker/engine/cuda/device_memory.h"
#include "worker/engine/cuda/fused_adam_plan.h"
#include "worker/engine/cuda/fused_linear_cross_entropy_launcher.h"
#include "worker/engine/cuda/gemm.h"
#include "worker/engine/cuda/kernels.h"
#include "worker/engine/cuda/scratch_buffer.h"
#include "worker/engine/cuda/time_marks.h"
#include "worker/ops/op_checks.h"

namespace tessera {
namespace {

cudaStream_t S(Stream* stream) { return reinterpret_cast<cudaStream_t>(stream); }

class CudaOps : public Ops {
 public:
  CudaOps(std::unique_ptr<cuda::DeviceContext> ctx, cuda::GemmAlgoSelection gemm_selection,
          const CudaEngineOptions& options)
      : ctx_(std::move(ctx)),
        gemm_(ctx_.get(), gemm_selection),
        attention_choice_(options.attention),
        attention_atomic_backward_(options.attention_atomic_backward),
        attention_key_bands_(options.attention_key_bands),
        backward_passes_(options.attention_backward_passes) {}

  absl::Status Init() {
    RETURN_IF_ERROR(gemm_.Init());
    if (attention_choice_ != CudaEngineOptions::Attention::kTessera) {
      RETURN_IF_ERROR(ctx_->MakeCurrent());  // the cuDNN handle binds the current device
      absl::StatusOr<std::unique_ptr<cuda::CudnnAttention>> cudnn =
          cuda::CudnnAttention::Create();
      if (cudnn.ok()) {
        cudnn_attention_ = *std::move(cudnn);
      } else if (attention_choice_ == CudaEngineOptions::Attention::kCudnn) {
        return cudnn.status();
      }  // kAuto without a working cuDNN: Tessera's kernels throughout
    }
    return time_marks_.Init(kTimeMarks);
  }

  // ---- Memory ----
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t bytes) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    void* p = nullptr;
    RETURN_IF_ERROR(cuda::DeviceMalloc(&p, bytes == 0 ? 256 : bytes));
    return std::unique_ptr<Buffer>(new cuda::DeviceBuffer(p, bytes));
  }
  absl::StatusOr<std::unique_ptr<Buffer>> AllocateHost(size_t bytes) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    return cuda::AllocatePinnedHost(bytes);
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
    if (work.ok()) capture_record_.NoteCapture();
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
    RETURN_IF_ERROR(CheckQuantizeArgs(in, out));
    return cuda::LaunchQuantize(in, out, nullptr, S(stream));
  }
  absl::Status QuantizeTranspose(const TensorDesc& in, const TensorDesc& out,
                                 const TensorDesc& out_t, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    RETURN_IF_ERROR(CheckQuantizeTransposeArgs(in, out, out_t));
    return cuda::LaunchQuantize(in, out, &out_t, S(stream));
  }
  absl::Status Dequantize(const TensorDesc& in, const TensorDesc& out, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    RETURN_IF_ERROR(CheckDequantizeArgs(in, out));
    return cuda::LaunchDequantize(in, out, S(stream));
  }
  absl::Status Amax(const TensorDesc& in, float* amax, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    RETURN_IF_ERROR(CheckAmaxArgs(in, amax));
    return cuda::LaunchAmax(in, amax, S(stream));
  }
  absl::Status Fp8Stats(const TensorDesc& in, DType format, const float* scale, int64_t* counts,
                        Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    RETURN_IF_ERROR(CheckFp8StatsArgs(in, format, scale, counts));
    return cuda::LaunchFp8Stats(in, format, scale, counts, S(stream));
  }
  absl::Status UpdateFp8Scales(float* amax, float* history, float* scale, float* scale_inv,
                               int scale_inv_stride, int n, int history_len, float fp8_max,
                               int margin, AmaxAlgo algo, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    RETURN_IF_ERROR(
        CheckUpdateFp8ScalesArgs(amax, history, scale, scale_inv, scale_inv_stride, n, history_len));
    return cuda::LaunchUpdateFp8Scales(amax, history, scale, scale_inv, scale_inv_stride, n,
                                       history_len, fp8_max, margin, algo, S(stream));
  }
  absl::Status Transpose(const TensorDesc& in, const TensorDesc& out, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    RETURN_IF_ERROR(CheckTransposeArgs(in, out));
    return cuda::LaunchTranspose(in, out, S(stream));
  }

  // ---- GEMM ----
  absl::Status Gemm(const TensorDesc& a, bool trans_a, const TensorDesc& b, bool trans_b,
                    const TensorDesc& d, bool accumulate, Stream* stream) override {
    return GemmWithAddend(a, trans_a, b, trans_b, d, accumulate, nullptr, stream);
  }
  absl::Status GemmAdd(const TensorDesc& a, bool trans_a, const TensorDesc& b, bool trans_b,
                       const TensorDesc& c, const TensorDesc& d, Stream* stream) override {
    RETURN_IF_ERROR(CheckGemmAddend(c, d));
    return GemmWithAddend(a, trans_a, b, trans_b, d, /*accumulate=*/true, c.data, stream);
  }

  // ---- Elementwise and normalisation ----
  absl::Status Add(const TensorDesc& a, const TensorDesc& b, const TensorDesc& out,
                   Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    RETURN_IF_ERROR(CheckAddArgs(a, b, out));
    return cuda::LaunchAdd(a, b, out, S(stream));
  }
  absl::Status Cast(const TensorDesc& in, const TensorDesc& out, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    RETURN_IF_ERROR(CheckCastArgs(in, out));
    return cuda::LaunchCast(in, out, S(stream));
  }
  absl::Status EmbeddingForward(const TensorDesc& ids, const TensorDesc& table,
                                const TensorDesc& out, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    RETURN_IF_ERROR(CheckEmbeddingForwardArgs(ids, table, out));
    return cuda::LaunchEmbeddingForward(ids, table, out, ctx_->error_flag(), S(stream));
  }
  absl::Status EmbeddingBackward(const TensorDesc& ids, const TensorDesc& grad_out,
                                 const TensorDesc& grad_table, int64_t first_row, int64_t vocab,
                                 Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    RETURN_IF_ERROR(CheckEmbeddingBackwardArgs(ids, grad_out, grad_table, first_row, vocab));
    ASSIGN_OR_RETURN(const int64_t bytes,
                     cuda::EmbeddingBackwardScratchBytes(ids.NumElements(), grad_table.shape[0],
                                                         grad_table.shape[1]));
    ASSIGN_OR_RETURN(void* scratch, embedding_scratch_.Get(std::max<int64_t>(1, bytes)));
    return cuda::LaunchEmbeddingBackward(ids, grad_out, grad_table, first_row, vocab, scratch,
                                         bytes, ctx_->error_flag(), S(stream));
  }
  absl::Status RmsNormForward(const TensorDesc& x, const TensorDesc& weight, float eps,
                              const TensorDesc& out, const TensorDesc& rstd, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    RETURN_IF_ERROR(CheckRmsNormForwardArgs(x, weight, eps, out, rstd));
    return cuda::LaunchRmsNormForward(x, weight, eps, out, rstd, S(stream));
  }
  // One fused pass where cuda::LaunchRmsNormForwardQuantize accepts the
  // shapes; otherwise the two ops through a bf16 scratch tensor (aligned, so
  // RmsNormForward takes the same path as into any allocated bf16 tensor).
  absl::Status RmsNormForwardQuantize(const TensorDesc& x, const TensorDesc& weight, float eps,
                                      const TensorDesc& out, const TensorDesc& out_t,
                                      const TensorDesc& rstd, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    RETURN_IF_ERROR(CheckRmsNormForwardQuantizeArgs(x, weight, eps, out, out_t, rstd));
    const int64_t t = x.shape[0], h = x.shape[1];
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
    RETURN_IF_ERROR(CheckRmsNormBackwardArgs(grad_out, x, weight, rstd, grad_x, grad_weight));
    const int64_t partials = cuda::RmsNormWeightGradScratchFloats(x.shape[0], x.shape[1]);
    ASSIGN_OR_RETURN(void* scratch,
                     rmsnorm_scratch_.Get(std::max<int64_t>(1, partials) * sizeof(float)));
    return cuda::LaunchRmsNormBackward(grad_out, x, weight, rstd, grad_x, accumulate_grad_x,
                                       grad_weight, static_cast<float*>(scratch), S(stream));
  }
  absl::Status RopeForward(const TensorDesc& qkv, int n_kv_heads, float theta,
                           Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    ASSIGN_OR_RETURN(int rotated, cuda::RopeRotatedHeads("qkv", qkv, n_kv_heads, theta));
    return cuda::LaunchRope(qkv, rotated, theta, 1.0f, S(stream));
  }
  absl::Status RopeBackward(const TensorDesc& grad_qkv, int n_kv_heads, float theta,
                            Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    ASSIGN_OR_RETURN(int rotated,
                     cuda::RopeRotatedHeads("grad_qkv", grad_qkv, n_kv_heads, theta));
    return cuda::LaunchRope(grad_qkv, rotated, theta, -1.0f, S(stream));
  }
  absl::Status AttentionForward(const TensorDesc& qkv, int n_kv_heads,
                                const AttentionDocuments& documents, const TensorDesc& out,
                                const TensorDesc& lse, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    ASSIGN_OR_RETURN(cuda::AttentionShape shape,
                     cuda::ReadAttentionShape(qkv, n_kv_heads, out, lse));
    ASSIGN_OR_RETURN(const int32_t* starts, cuda::ReadDocStarts(documents.starts, shape));
    if (const CudnnCalls calls = CudnnCallsFor(shape, starts, documents); calls.use) {
      ASSIGN_OR_RETURN(
          const bool ran,
          RunCudnn(
              calls,
              [&](const cuda::CudnnAttention::Documents* d) {
                return cudnn_attention_->ForwardWorkspaceBytes(shape, d);
              },
              [&](const cuda::CudnnAttention::Documents* d, void* workspace) {
                return cudnn_attention_->Forward(shape, qkv.data, out.data, lse.As<float>(),
                                                 workspace, S(stream), d);
              }));
      if (ran) return absl::OkStatus();
    }
    return cuda::LaunchFlashAttentionForward(shape, qkv.data, starts, out.data, lse.As<float>(),
                                             ctx_->facts().sm_count, ctx_->facts().l2_bytes,
                                             ctx_->work_counter(), S(stream));
  }
  absl::Status AttentionBackward(const TensorDesc& grad_out, const TensorDesc& qkv,
                                 int n_kv_heads, const AttentionDocuments& documents,
                                 const TensorDesc& out, const TensorDesc& lse,
                                 const TensorDesc& grad_qkv, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    ASSIGN_OR_RETURN(cuda::AttentionShape shape,
                     cuda::ReadAttentionBackwardShape(grad_out, qkv, n_kv_heads, out, lse,
                                                      grad_qkv));
    ASSIGN_OR_RETURN(const int32_t* starts, cuda::ReadDocStarts(documents.starts, shape));
    if (const CudnnCalls calls = CudnnCallsFor(shape, starts, documents); calls.use) {
      const bool deterministic = !attention_atomic_backward_;
      const int bands = KeyBandsFor(shape, calls);
      ASSIGN_OR_RETURN(
          const bool ran,
          RunCudnn(
              calls,
              [&](const cuda::CudnnAttention::Documents* d) {
                return cudnn_attention_->BackwardWorkspaceBytes(shape, deterministic, d, bands);
              },
              [&](const cuda::CudnnAttention::Documents* d, void* workspace) {
                return cudnn_attention_->Backward(shape, deterministic, grad_out.data, qkv.data,
                                                  out.data, lse.As<float>(), grad_qkv.data,
                                                  workspace, S(stream), d, bands);
              }));
      if (ran) return absl::OkStatus();
    }
    // D, the log2-domain lse and the document start per query, padded to
    // whole tiles; the one-pass form's dQ sums.
    const cuda::FlashBackwardForm form = BackwardForm();
    const int64_t floats =
        std::max<int64_t>(1, cuda::FlashAttentionBackwardScratchFloats(shape, form));
    ASSIGN_OR_RETURN(void* scratch, attention_scratch_.Get(floats * sizeof(float)));
    return cuda::LaunchFlashAttentionBackward(shape, grad_out.data, qkv.data, starts, out.data,
                                              lse.As<float>(), grad_qkv.data,
                                              static_cast<float*>(scratch), form,
                                              ctx_->facts().sm_count, S(stream));
  }
  absl::Status SwiGluForward(const TensorDesc& gate_up, const TensorDesc& out, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    RETURN_IF_ERROR(CheckSwiGluForwardArgs(gate_up, out));
    return cuda::LaunchSwiGluForward(gate_up, out, S(stream));
  }
  absl::Status SwiGluBackward(const TensorDesc& grad_out, const TensorDesc& gate_up,
                              const TensorDesc& grad_gate_up, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    RETURN_IF_ERROR(CheckSwiGluBackwardArgs(grad_out, gate_up, grad_gate_up));
    return cuda::LaunchSwiGluBackward(grad_out, gate_up, grad_gate_up, S(stream));
  }
  absl::StatusOr<int64_t> AvailableMemoryBytes() override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
    return static_cast<int64_t>(free_bytes);
  }
  std::string NumericsStack() const override {
    int runtime = 0, driver = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    const cuda::DeviceFacts& facts = ctx_->facts();
    return absl::StrCat("CUDA runtime ", runtime, ", driver ", driver, ", cuBLASLt ",
                        cublasLtGetVersion(), ", cuDNN ",
                        cudnn_attention_ != nullptr
                            ? absl::StrCat(cuda::CudnnAttention::Version())
                            : std::string("not used"),
                        ", ", facts.name, " (sm_", facts.compute_major, facts.compute_minor, ")");
  }
  absl::StatusOr<int64_t> MemoryInUseBytes() override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
    return static_cast<int64_t>(total_bytes - free_bytes);
  }
  // One fused pass where cuda::LaunchSwiGlu*Quantize accepts the shapes;
  // otherwise the two ops through a bf16 scratch tensor.
  absl::Status SwiGluForwardQuantize(const TensorDesc& gate_up, const TensorDesc& out,
                                     const TensorDesc& out_t, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    RETURN_IF_ERROR(CheckSwiGluForwardQuantizeArgs(gate_up, out, out_t));
    const int64_t t = gate_up.shape[0], f = gate_up.shape[1] / 2;
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
    RETURN_IF_ERROR(CheckSwiGluBackwardQuantizeArgs(grad_out, gate_up, dgu, dgu_t));
    const int64_t t = gate_up.shape[0], f = gate_up.shape[1] / 2;
    ASSIGN_OR_RETURN(const bool fused,
                     cuda::LaunchSwiGluBackwardQuantize(grad_out, gate_up, dgu, dgu_t, S(stream)));
    if (fused) return absl::OkStatus();
    ASSIGN_OR_RETURN(void* grad, swiglu_scratch_.Get(std::max<int64_t>(1, t * 2 * f) * 2));
    const TensorDesc grad_desc = MakeTensor(grad, DType::kBFloat16, Shape{t, 2 * f});
    RETURN_IF_ERROR(cuda::LaunchSwiGluBackward(grad_out, gate_up, grad_desc, S(stream)));
    return cuda::LaunchQuantize(grad_desc, dgu, &dgu_t, S(stream));
  }

  // ---- Fused linear + cross-entropy ----
  absl::Status FusedLinearCrossEntropy(const TensorDesc& x, const TensorDesc& weight,
                                       const TensorDesc& targets, int ignore_index,
                                       int chunk_tokens, float* loss_sum, float* valid_tokens,
                                       const TensorDesc& grad_x, const TensorDesc& grad_weight,
                                       bool accumulate_grad_weight, Stream* stream) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    ASSIGN_OR_RETURN(const FusedLossOutputs outputs,
                     CheckFusedLinearCrossEntropyArgs(x, weight, targets, chunk_tokens, loss_sum,
                                                      valid_tokens, grad_x, grad_weight));
    return cuda::LaunchFusedLinearCrossEntropy(
        gemm_, {&ce_logits_, &ce_row_losses_}, x, weight, targets, ignore_index, chunk_tokens,
        loss_sum, valid_tokens, outputs == FusedLossOutputs::kLossAndGradients, grad_x,
        grad_weight, accumulate_grad_weight, ctx_->error_flag(), S(stream));
  }

  // ---- Optimizer ----
  absl::StatusOr<std::unique_ptr<AdamPlan>> CreateAdamPlan(absl::Span<const AdamShard> shards) override {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    ASSIGN_OR_RETURN(const cuda::AdamPlanImage image, cuda::BuildAdamPlanImage(shards));
    ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaAdamPlan> plan, cuda::UploadAdamPlan(image));
    return std::unique_ptr<AdamPlan>(std::move(plan));
  }
  absl::Status GradSumSquares(const AdamPlan& plan, float* sum_sq, Stream* stream) override {
    RETURN_IF_ERROR(CheckGradSumSquaresArgs(sum_sq));
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    const auto& p = static_cast<const cuda::CudaAdamPlan&>(plan);
    return cuda::LaunchGradSumSquares(p.table, p.block_shard, p.block_offset, p.num_blocks,
                                      p.partials, sum_sq, S(stream));
  }
  absl::Status ComputeGradScale(const float* sum_sq, const float* tokens, float max_norm,
                                float* grad_norm, float* grad_scale, Stream* stream) override {
    RETURN_IF_ERROR(CheckComputeGradScaleArgs(sum_sq, tokens, grad_norm, grad_scale));
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    return cuda::LaunchComputeGradScale(sum_sq, tokens, max_norm, grad_norm, grad_scale, S(stream));
  }
  absl::Status FusedAdam(const AdamPlan& plan, const AdamHyper& hyper, const float* grad_scale,
                         Stream* stream) override {
    RETURN_IF_ERROR(CheckFusedAdamArgs(hyper, grad_scale));
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    const auto& p = static_cast<const cuda::CudaAdamPlan&>(plan);
    return cuda::LaunchFusedAdam(p.table, p.num_shards, p.block_shard, p.block_offset,
                                 p.num_blocks, hyper, grad_scale, S(stream));
  }

 private:
  // Gemm, and GemmAdd with `addend` as cuBLASLt's C.
  absl::Status GemmWithAddend(const TensorDesc& a, bool trans_a, const TensorDesc& b,
                              bool trans_b, const TensorDesc& d, bool accumulate,
                              const void* addend, Stream* stream) {
    RETURN_IF_ERROR(ctx_->MakeCurrent());
    RETURN_IF_ERROR(CheckGemmArgs(a, trans_a, b, trans_b, d, accumulate));
    return gemm_.Run(a, trans_a, b, trans_b, d, accumulate, S(stream), addend);
  }

  std::unique_ptr<cuda::DeviceContext> ctx_;
  cuda::OwnedStreams streams_;
  cuda::GemmRunner gemm_;
  cuda::TimeMarks time_marks_;
  // Engine scratch: kept, not freed, once some EndCapture succeeded (a
  // captured graph may still point at it; scratch_buffer.h).
  cuda::DeviceScratchAllocator scratch_allocator_;
  cuda::CaptureRecord capture_record_;
  // Whether whole-sequence attention of `shape` goes to cuDNN: always under
  // kCudnn; under kAuto by the rule the memory estimate counts by
  // (common/cudnn_attention_workspace.h), so the forward and the backward of
  // a shape choose alike. (Under kAuto, a shape cuDNN planned one way but
  // not the other would run cuDNN's forward with our backward, which reads
  // the same out and lse; cuDNN 9.14 planned every shape tried both ways.)
  // The cuDNN calls an attention call makes: one for whole sequences (no
  // documents), one per group of documents (CudnnAttention::GroupDocuments);
  // `use` false where our kernels run. Whole sequences: AUTO's rule
  // (common/cudnn_attention_workspace.h), or always under CUDNN. Documents:
  // only where the host counted them (AttentionDocuments); only where they
  // average at least kCudnnDocumentTokens tokens (shorter ones run faster
  // in our kernels, bench/RESULTS.md); and only where each group's plan
  // stays within CudnnDocumentsWorkspaceLimit (what the memory estimate
  // counted) in at most kMaxDocumentGroups groups. With documents the
  // choice follows each batch's documents, so it can change from step to
  // step and differ between ranks; the same data makes the same choices,
  // so runs still repeat their bits.
  struct CudnnCalls {
    bool use = false;
    int count = 0;  // groups of documents; 0: whole sequences
    cuda::CudnnAttention::Documents documents[cuda::CudnnAttention::kMaxDocumentGroups];
  };
  CudnnCalls CudnnCallsFor(const cuda::AttentionShape& shape, const int32_t* starts,
                           const AttentionDocuments& documents) const {
    CudnnCalls calls;
    if (cudnn_attention_ == nullptr || shape.batch == 0) return calls;
    const bool deterministic = !attention_atomic_backward_;
    if (attention_choice_ != CudaEngineOptions::Attention::kCudnn &&
        !AutoAttentionPicksCudnn(deterministic)) {
      return calls;
    }
    if (starts == nullptr) {
      calls.use = true;
      return calls;
    }
    const CudnnAttentionShape whole{shape.batch, shape.heads, shape.kv_heads, shape.seq,
                                    shape.head_dim};
    const DocumentCounts& c = documents.counts;
    const int64_t tokens = shape.batch * shape.seq;
    if (!documents.Counted() || c.longest < 1 || c.longest > shape.seq || c.count > tokens ||
        tokens < kCudnnDocumentTokens * c.count) {
      return calls;
    }
    const int64_t limit = CudnnDocumentsWorkspaceLimit(whole, deterministic);
    const cuda::CudnnAttention::DocumentGroups groups = cuda::CudnnAttention::GroupDocuments(
        c, [&](const cuda::CudnnAttention::PlannedDocuments& plan) {
          return CudnnAttentionWorkspaceBound({plan.capacity, shape.heads, shape.kv_heads,
                                               plan.longest, shape.head_dim},
                                              deterministic) <= limit;
        });
    if (groups.count == 0) return calls;
    calls.use = true;
    calls.count = groups.count;
    for (int i = 0; i < groups.count; ++i) calls.documents[i] = {starts, groups.group[i]};
    return calls;
  }

  // Which form Tessera's backward takes (CudaEngineOptions::BackwardPasses,
  // attention_atomic_backward).
  cuda::FlashBackwardForm BackwardForm() const {
    using Passes = CudaEngineOptions::BackwardPasses;
    if (backward_passes_ == Passes::kTwoPass) return cuda::FlashBackwardForm::kTwoPass;
    return attention_atomic_backward_ ? cuda::FlashBackwardForm::kAtomicDq
                                      : cuda::FlashBackwardForm::kOrderedDq;
  }
  // The key bands of the deterministic backward of whole sequences
  // (cudnn_attention.h): CudnnKeyBands, or what the engine's options fix
  // (benchmarks compare counts). 1 for the atomic form and for documents.
  int KeyBandsFor(const cuda::AttentionShape& shape, const CudnnCalls& calls) const {
    if (attention_atomic_backward_ || calls.count > 0) return 1;
    if (attention_key_bands_ > 0) return attention_key_bands_;
    return CudnnKeyBands(
        {shape.batch, shape.heads, shape.kv_heads, shape.seq, shape.head_dim});
  }

  // Plans every call of `calls` (each plan's workspace through `bytes_of`),
  // then runs them (`run`) in one workspace large enough for each. false,
  // running nothing, where a plan cannot be made and AUTO may fall back.
  template <typename BytesOf, typename Run>
  absl::StatusOr<bool> RunCudnn(const CudnnCalls& calls, BytesOf bytes_of, Run run) {
    const int n = std::max(1, calls.count);
    size_t most = 256;
    for (int i = 0; i < n; ++i) {
      absl::StatusOr<size_t> bytes = bytes_of(calls.count > 0 ? &calls.documents[i] : nullptr);
      if (!bytes.ok()) {
        if (CudnnMayFallBack(bytes.status())) return false;
        return bytes.status();
      }
      most = std::max(most, *bytes);
    }
    ASSIGN_OR_RETURN(void* workspace, cudnn_workspace_.Get(most));
    for (int i = 0; i < n; ++i) {
      RETURN_IF_ERROR(run(calls.count > 0 ? &calls.documents[i] : nullptr, workspace));
    }
    return true;
  }

  // Documents shorter than this on average run Tessera's kernels: at 256
  // tokens and head dim 64 cuDNN's ragged batch was the slower
  // (bench/RESULTS.md).
  static constexpr int64_t kCudnnDocumentTokens = 512;

  // Under kAuto, a shape cuDNN has no plan for (UNIMPLEMENTED, or a shape
  // it refuses) runs Tessera's kernels; anything else is an error. The
  // choice depends on the shape and the library only, so every rank and
  // every run makes the same one.
  bool CudnnMayFallBack(const absl::Status& status) const {
    return attention_choice_ == CudaEngineOptions::Attention::kAuto &&
           (absl::IsUnimplemented(status) || absl::IsInvalidArgument(status));
  }

  cuda::ScratchBuffer attention_scratch_{&scratch_allocator_, &capture_record_};
  // cuDNN's attention (CudaEngineOptions::attention) and its workspace.
  CudaEngineOptions::Attention attention_choice_;
  bool attention_atomic_backward_;
  int attention_key_bands_;
  CudaEngineOptions::BackwardPasses backward_passes_;
  std::unique_ptr<cuda::CudnnAttention> cudnn_attention_;
  cuda::ScratchBuffer cudnn_workspace_{&scratch_allocator_, &capture_record_};
  // The embedding backward's sort and chunk partials (embedding.cu).
  cuda::ScratchBuffer embedding_scratch_{&scratch_allocator_, &capture_record_};
  cuda::ScratchBuffer rmsnorm_scratch_{&scratch_allocator_, &capture_record_};
  cuda::ScratchBuffer swiglu_scratch_{&scratch_allocator_, &capture_record_};
  // RmsNormForwardQuantize's unfused bf16 [T, H].
  cuda::ScratchBuffer rmsnorm_out_scratch_{&scratch_allocator_, &capture_record_};
  // The fused loss's [chunk, V] bf16 logits and [chunk] fp32 row losses.
  cuda::ScratchBuffer ce_logits_{&scratch_allocator_, &capture_record_};
  cuda::ScratchBuffer ce_row_losses_{&scratch_allocator_, &capture_record_};
};

}  // namespace

absl::StatusOr<std::unique_ptr<Ops>> CreateCudaOps(int device_index,
                                                   const CudaEngineOptions& options) {
  const size_t workspace_bytes = options.cublaslt_workspace_bytes > 0
                                     ? options.cublaslt_workspace_bytes
                                     : cuda::DeviceContext::kDefaultWorkspaceBytes;
  ASSIGN_OR_RETURN(std::unique_ptr<cuda::DeviceContext> ctx,
                   cuda::DeviceContext::Create(device_index, workspace_bytes));
  auto ops = std::make_unique<CudaOps>(std::move(ctx),
                                       options.time_gemm_algorithms
                                           ? cuda::GemmAlgoSelection::kTimed
                                           : cuda::GemmAlgoSelection::kDeterministic,
                                       options);
  RETURN_IF_ERROR(ops->Init());
  return std::unique_ptr<Ops>(std::move(ops));
}

}  // namespace tessera
