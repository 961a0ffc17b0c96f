// An Ops decorator that forwards every call to the real engine and counts
// the calls that matter for a steady-state step: engine allocations
// (Allocate, CreateAdamPlan, and the bytes Allocate was asked for) and host
// reads (CopyToHost), and Fp8Stats calls (only statistics steps make
// them; fp8_step_stats.h). The trainer runs its engine through it, so "a step
// allocates nothing and reads back one block of scalars" is measured at the
// ops boundary, whoever allocates (the trainer, the model's helpers or the
// FSDP sharding code), rather than being bookkept by hand. The cost is one extra virtual call per op.
#ifndef TESSERA_WORKER_TRAINER_COUNTING_OPS_H_
#define TESSERA_WORKER_TRAINER_COUNTING_OPS_H_

#include <atomic>
#include <memory>
#include <utility>

#include "worker/ops/ops.h"

namespace tessera {

class CountingOps : public Ops {
 public:
  explicit CountingOps(std::unique_ptr<Ops> engine) : engine_(std::move(engine)) {}

  int64_t allocations() const { return allocations_; }
  int64_t allocated_bytes() const { return allocated_bytes_; }  // requested through Allocate
  int64_t host_reads() const { return host_reads_; }
  int64_t fp8_stats_calls() const { return fp8_stats_calls_; }

  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t bytes) override {
    ++allocations_;
    allocated_bytes_ += static_cast<int64_t>(bytes);
    return engine_->Allocate(bytes);
  }
  // Host memory is not device memory: not counted.
  absl::StatusOr<std::unique_ptr<Buffer>> AllocateHost(size_t bytes) override {
    return engine_->AllocateHost(bytes);
  }
  absl::StatusOr<int64_t> AvailableMemoryBytes() override { return engine_->AvailableMemoryBytes(); }
  absl::StatusOr<int64_t> MemoryInUseBytes() override { return engine_->MemoryInUseBytes(); }
  std::string NumericsStack() const override { return engine_->NumericsStack(); }
  absl::Status CopyToDevice(void* dst, const void* src, size_t bytes, Stream* s) override {
    return engine_->CopyToDevice(dst, src, bytes, s);
  }
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes, Stream* s) override {
    ++host_reads_;
    return engine_->CopyToHost(dst, src, bytes, s);
  }
  absl::Status CopyDeviceToDevice(void* dst, const void* src, size_t bytes, Stream* s) override {
    return engine_->CopyDeviceToDevice(dst, src, bytes, s);
  }
  absl::Status Memset(void* dst, int value, size_t bytes, Stream* s) override {
    return engine_->Memset(dst, value, bytes, s);
  }
  absl::Status Synchronize(Stream* s) override { return engine_->Synchronize(s); }
  absl::StatusOr<Stream*> CreateStream() override { return engine_->CreateStream(); }
  absl::Status BeginCapture(Stream* s) override { return engine_->BeginCapture(s); }
  absl::StatusOr<std::unique_ptr<CapturedWork>> EndCapture(Stream* s) override {
    return engine_->EndCapture(s);
  }
  absl::Status Replay(const CapturedWork& work, Stream* s) override {
    return engine_->Replay(work, s);
  }
  absl::Status MarkTime(int mark, Stream* s) override { return engine_->MarkTime(mark, s); }
  absl::StatusOr<double> SecondsBetween(int from, int to) override {
    return engine_->SecondsBetween(from, to);
  }

  absl::Status Quantize(const TensorDesc& in, const TensorDesc& out, Stream* s) override {
    return engine_->Quantize(in, out, s);
  }
  absl::Status QuantizeTranspose(const TensorDesc& in, const TensorDesc& out,
                                 const TensorDesc& out_t, Stream* s) override {
    return engine_->QuantizeTranspose(in, out, out_t, s);
  }
  absl::Status Dequantize(const TensorDesc& in, const TensorDesc& out, Stream* s) override {
    return engine_->Dequantize(in, out, s);
  }
  absl::Status Amax(const TensorDesc& in, float* amax, Stream* s) override {
    return engine_->Amax(in, amax, s);
  }
  absl::Status Fp8Stats(const TensorDesc& in, DType format, const float* scale, int64_t* counts,
                        Stream* s) override {
    ++fp8_stats_calls_;
    return engine_->Fp8Stats(in, format, scale, counts, s);
  }
  absl::Status UpdateFp8Scales(float* amax, float* history, float* scale, float* scale_inv,
                               int scale_inv_stride, int n, int history_len, float fp8_max,
                               int margin, AmaxAlgo algo, Stream* s) override {
    return engine_->UpdateFp8Scales(amax, history, scale, scale_inv, scale_inv_stride, n,
                                    history_len, fp8_max, margin, algo, s);
  }
  absl::Status Transpose(const TensorDesc& in, const TensorDesc& out, Stream* s) override {
    return engine_->Transpose(in, out, s);
  }

  absl::Status Gemm(const TensorDesc& a, bool trans_a, const TensorDesc& b, bool trans_b,
                    const TensorDesc& d, bool accumulate, Stream* s) override {
    return engine_->Gemm(a, trans_a, b, trans_b, d, accumulate, s);
  }
  absl::Status GemmAdd(const TensorDesc& a, bool trans_a, const TensorDesc& b, bool trans_b,
                       const TensorDesc& c, const TensorDesc& d, Stream* s) override {
    return engine_->GemmAdd(a, trans_a, b, trans_b, c, d, s);
  }

  absl::Status Add(const TensorDesc& a, const TensorDesc& b, const TensorDesc& out,
                   Stream* s) override {
    return engine_->Add(a, b, out, s);
  }
  absl::Status Cast(const TensorDesc& in, const TensorDesc& out, Stream* s) override {
    return engine_->Cast(in, out, s);
  }
  absl::Status EmbeddingForward(const TensorDesc& ids, const TensorDesc& table,
                                const TensorDesc& out, Stream* s) override {
    return engine_->EmbeddingForward(ids, table, out, s);
  }
  absl::Status EmbeddingBackward(const TensorDesc& ids, const TensorDesc& grad_out,
                                 const TensorDesc& grad_table, int64_t first_row, int64_t vocab,
                                 Stream* s) override {
    return engine_->EmbeddingBackward(ids, grad_out, grad_table, first_row, vocab, s);
  }
  absl::Status RmsNormForward(const TensorDesc& x, const TensorDesc& weight, float eps,
                              const TensorDesc& out, const TensorDesc& rstd, Stream* s) override {
    return engine_->RmsNormForward(x, weight, eps, out, rstd, s);
  }
  absl::Status RmsNormForwardQuantize(const TensorDesc& x, const TensorDesc& weight, float eps,
                                      const TensorDesc& out, const TensorDesc& out_t,
                                      const TensorDesc& rstd, Stream* s) override {
    return engine_->RmsNormForwardQuantize(x, weight, eps, out, out_t, rstd, s);
  }
  absl::Status RmsNormBackward(const TensorDesc& grad_out, const TensorDesc& x,
                               const TensorDesc& weight, const TensorDesc& rstd,
                               const TensorDesc& grad_x, bool accumulate_grad_x,
                               const TensorDesc& grad_weight, Stream* s) override {
    return engine_->RmsNormBackward(grad_out, x, weight, rstd, grad_x, accumulate_grad_x,
                                    grad_weight, s);
  }
  absl::Status RopeForward(const TensorDesc& qkv, int n_kv_heads, float theta,
                           Stream* s) override {
    return engine_->RopeForward(qkv, n_kv_heads, theta, s);
  }
  absl::Status RopeBackward(const TensorDesc& grad_qkv, int n_kv_heads, float theta,
                            Stream* s) override {
    return engine_->RopeBackward(grad_qkv, n_kv_heads, theta, s);
  }
  absl::Status AttentionForward(const TensorDesc& qkv, int n_kv_heads,
                                const AttentionDocuments& documents, const TensorDesc& out,
                                const TensorDesc& lse, Stream* s) override {
    return engine_->AttentionForward(qkv, n_kv_heads, documents, out, lse, s);
  }
  absl::Status AttentionBackward(const TensorDesc& grad_out, const TensorDesc& qkv, int n_kv_heads,
                                 const AttentionDocuments& documents, const TensorDesc& out,
                                 const TensorDesc& lse, const TensorDesc& grad_qkv,
                                 Stream* s) override {
    return engine_->AttentionBackward(grad_out, qkv, n_kv_heads, documents, out, lse, grad_qkv,
                                      s);
  }
  absl::Status SwiGluForward(const TensorDesc& gate_up, const TensorDesc& out,
                             Stream* s) override {
    return engine_->SwiGluForward(gate_up, out, s);
  }
  absl::Status SwiGluBackward(const TensorDesc& grad_out, const TensorDesc& gate_up,
                              const TensorDesc& grad_gate_up, Stream* s) override {
    return engine_->SwiGluBackward(grad_out, gate_up, grad_gate_up, s);
  }
  absl::Status SwiGluForwardQuantize(const TensorDesc& gate_up, const TensorDesc& out,
                                     const TensorDesc& out_t, Stream* s) override {
    return engine_->SwiGluForwardQuantize(gate_up, out, out_t, s);
  }
  absl::Status SwiGluBackwardQuantize(const TensorDesc& grad_out, const TensorDesc& gate_up,
                                      const TensorDesc& dgu, const TensorDesc& dgu_t,
                                      Stream* s) override {
    return engine_->SwiGluBackwardQuantize(grad_out, gate_up, dgu, dgu_t, s);
  }

  // Null grad_x and grad_weight (loss only) pass through as they are.
  absl::Status FusedLinearCrossEntropy(const TensorDesc& x, const TensorDesc& weight,
                                       const TensorDesc& targets, int ignore_index,
                                       int chunk_tokens, float* loss_sum, float* valid_tokens,
                                       const TensorDesc& grad_x, const TensorDesc& grad_weight,
                                       bool accumulate_grad_weight, Stream* s) override {
    return engine_->FusedLinearCrossEntropy(x, weight, targets, ignore_index, chunk_tokens,
                                            loss_sum, valid_tokens, grad_x, grad_weight,
                                            accumulate_grad_weight, s);
  }

  absl::StatusOr<std::unique_ptr<AdamPlan>> CreateAdamPlan(
      absl::Span<const AdamShard> shards) override {
    ++allocations_;  // the GPU engine builds a device-resident table here
    return engine_->CreateAdamPlan(shards);
  }
  absl::Status GradSumSquares(const AdamPlan& plan, float* sum_sq, Stream* s) override {
    return engine_->GradSumSquares(plan, sum_sq, s);
  }
  absl::Status ComputeGradScale(const float* sum_sq, const float* tokens, float max_norm,
                                float* grad_norm, float* grad_scale, Stream* s) override {
    return engine_->ComputeGradScale(sum_sq, tokens, max_norm, grad_norm, grad_scale, s);
  }
  absl::Status FusedAdam(const AdamPlan& plan, const AdamHyper& hyper, const float* grad_scale,
                         Stream* s) override {
    return engine_->FusedAdam(plan, hyper, grad_scale, s);
  }

 private:
  std::unique_ptr<Ops> engine_;
  std::atomic<int64_t> allocations_{0};
  std::atomic<int64_t> allocated_bytes_{0};
  std::atomic<int64_t> host_reads_{0};
  std::atomic<int64_t> fp8_stats_calls_{0};
};

}  // namespace tessera

#endif  // TESSERA_WORKER_TRAINER_COUNTING_OPS_H_
