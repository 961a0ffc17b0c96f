// Launchers of the CUDA engine's kernels, one .cu file per op. Each has the
// semantics of the Ops method of the same name (worker/ops/ops.h) and of the
// CPU reference (worker/engine/cpu/*.h), takes device pointers, enqueues on
// `stream`, checks the launch, and never synchronizes. Shape and dtype
// validation happens in CudaOps before these are called.
#ifndef TESSERA_WORKER_ENGINE_CUDA_KERNELS_H_
#define TESSERA_WORKER_ENGINE_CUDA_KERNELS_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/ops/ops.h"

namespace tessera {
namespace cuda {

// quantize.cu
absl::Status LaunchQuantize(const TensorDesc& in, const TensorDesc& out, const TensorDesc* out_t,
                            cudaStream_t stream);
absl::Status LaunchDequantize(const TensorDesc& in, const TensorDesc& out, cudaStream_t stream);
absl::Status LaunchAmax(const TensorDesc& in, float* amax, cudaStream_t stream);
// fp8_stats.cu: Ops::Fp8Stats (counts: two int64 in device memory).
absl::Status LaunchFp8Stats(const TensorDesc& in, DType format, const float* scale,
                            int64_t* counts, cudaStream_t stream);
absl::Status LaunchTranspose(const TensorDesc& in, const TensorDesc& out, cudaStream_t stream);
absl::Status LaunchUpdateFp8Scales(float* amax, float* history, float* scale, float* scale_inv,
                                   int scale_inv_stride, int n, int history_len, float fp8_max,
                                   int margin, AmaxAlgo algo, cudaStream_t stream);
// elementwise.cu
absl::Status LaunchAdd(const TensorDesc& a, const TensorDesc& b, const TensorDesc& out,
                       cudaStream_t stream);
absl::Status LaunchCast(const TensorDesc& in, const TensorDesc& out, cudaStream_t stream);
// embedding.cu (bad ids set *error_flag)
absl::Status LaunchEmbeddingForward(const TensorDesc& ids, const TensorDesc& table,
                                    const TensorDesc& out, int* error_flag, cudaStream_t stream);
// The backward's scratch for T tokens, vocabulary V and width H (about
// 16 T + T H / 8 bytes plus the sort's temporary storage); deterministic,
// see embedding.cu.
// rows: the gradient's rows (grad_table.shape[0]), which the scratch scales with.
absl::StatusOr<int64_t> EmbeddingBackwardScratchBytes(int64_t tokens, int64_t rows, int64_t h);
absl::Status LaunchEmbeddingBackward(const TensorDesc& ids, const TensorDesc& grad_out,
                                     const TensorDesc& grad_table, int64_t first_row,
                                     int64_t vocab, void* scratch, int64_t scratch_bytes,
                                     int* error_flag, cudaStream_t stream);
// rmsnorm.cu
absl::Status LaunchRmsNormForward(const TensorDesc& x, const TensorDesc& w, float eps,
                                  const TensorDesc& out, const TensorDesc& rstd,
                                  cudaStream_t stream);
// scratch: RmsNormWeightGradScratchFloats(T, H) fp32 for the grad_weight partials.
int64_t RmsNormWeightGradScratchFloats(int64_t tokens, int64_t h);
absl::Status LaunchRmsNormBackward(const TensorDesc& dy, const TensorDesc& x, const TensorDesc& w,
                                   const TensorDesc& rstd, const TensorDesc& dx, bool accumulate,
                                   const TensorDesc& dw, float* scratch, cudaStream_t stream);
// rmsnorm_quantize.cu: RmsNormForward into a bf16 [T, H] tensor followed by
// QuantizeTranspose of it into out [T, H] and out_t [H, T], in one pass.
// Returns false, launching nothing, when the shapes, dtypes or alignment do
// not fit the fused kernel (the caller then runs the two ops).
absl::StatusOr<bool> LaunchRmsNormForwardQuantize(const TensorDesc& x, const TensorDesc& w,
                                                  float eps, const TensorDesc& out,
                                                  const TensorDesc& out_t, const TensorDesc& rstd,
                                                  cudaStream_t stream);
// rope.cu: rotates heads [0, rotated_heads) of qkv [B, S, heads, hd] in
// place (direction -1 is the inverse rotation).
absl::Status LaunchRope(const TensorDesc& qkv, int rotated_heads, float theta, float direction,
                        cudaStream_t stream);
// swiglu.cu
absl::Status LaunchSwiGluForward(const TensorDesc& gate_up, const TensorDesc& out,
                                 cudaStream_t stream);
absl::Status LaunchSwiGluBackward(const TensorDesc& dy, const TensorDesc& gate_up,
                                  const TensorDesc& dgu, cudaStream_t stream);
// swiglu_quantize.cu: SwiGLU (forward, or backward into dgu [T, 2F])
// followed by QuantizeTranspose of its bf16 result, in one pass. Returns
// false, launching nothing, when the shapes or alignment do not fit the
// tiled kernel (the caller then runs the two ops).
absl::StatusOr<bool> LaunchSwiGluForwardQuantize(const TensorDesc& gate_up, const TensorDesc& out,
                                                 const TensorDesc& out_t, cudaStream_t stream);
absl::StatusOr<bool> LaunchSwiGluBackwardQuantize(const TensorDesc& grad_out,
                                                  const TensorDesc& gate_up, const TensorDesc& dgu,
                                                  const TensorDesc& dgu_t, cudaStream_t stream);
// flash_attention_forward.cu, flash_attention_backward.cu: causal
// grouped-query attention on tensor cores. qkv [B, S, heads + 2 kv_heads,
// head_dim] bf16, out and grad_out [B, S, heads, head_dim] bf16, lse
// [B, heads, S] fp32 (see Ops::AttentionForward). head_dim is 64 or 128.
// doc_starts: [B, S] int32 document starts (Ops::AttentionForward), or
// nullptr when each sequence is one document. The forward and the
// backward's one pass (flash_attention_backward_ordered.cu) copy with TMA,
// which needs qkv, out and grad_out 16-byte aligned:
// INVALID_ARGUMENT otherwise (the engine's buffers always are).
struct AttentionShape {
  int64_t batch = 0, seq = 0;
  int heads = 0, kv_heads = 0, head_dim = 0;
};
// sm_count: the device's SMs (DeviceFacts): the forward keeps one block on
// each, taking query blocks one after another from work_counter (one int
// of device memory, DeviceContext::work_counter, which it zeroes on
// `stream` first). l2_bytes (DeviceFacts) sizes the groups of K/V heads
// whose query blocks run together.
absl::Status LaunchFlashAttentionForward(const AttentionShape& shape, const void* qkv,
                                         const int32_t* doc_starts, void* out, float* lse,
                                         int sm_count, size_t l2_bytes, int* work_counter,
                                         cudaStream_t stream);
// ragged_documents.cu: the table cuDNN's ragged attention reads for the
// documents of a batch of more than `above` and at most `up_to` tokens
// (cudnn_attention.h), from doc_starts [B, S] on the device: per entry
// d < capacity its length (seq_lens, 0 past the last document, at most
// `longest`), and per entry d <= capacity the element offset of its first
// token in qkv rows, out rows and lse ([B, heads, S]). first_tokens: int32
// [B x S] scratch. One block; B x S < 2^31.
struct RaggedDocumentTable {
  int32_t* seq_lens;
  int64_t* qkv_offsets;
  int64_t* out_offsets;
  int64_t* lse_offsets;
};
absl::Status LaunchRaggedDocumentTable(const int32_t* doc_starts, const AttentionShape& shape,
                                       int64_t capacity, int64_t longest, int64_t above,
                                       int64_t up_to, int32_t* first_tokens,
                                       const RaggedDocumentTable& table, cudaStream_t stream);
// key_band_sums.cu: cuDNN's deterministic backward in `bands` key bands
// (cudnn_attention.h) leaves each band's partial dQ for the queries it
// holds, [B, S - c S / bands, heads, hd] bf16 for band c, band after band
// from `partials` (band c at KeyBandPartialOffset(shape, bands, c) bytes;
// the whole area is that of band index `bands`). Sums, for each query, the
// bands whose keys it sees, in band order in fp32, into grad_qkv's query
// columns (written, not accumulated). head_dim a multiple of 8; S a
// multiple of bands.
constexpr int64_t kKeyBandAlignment = 256;
int64_t KeyBandPartialOffset(const AttentionShape& shape, int bands, int band_index);
absl::Status LaunchSumKeyBands(const AttentionShape& shape, int bands, const void* partials,
                               void* grad_qkv, cudaStream_t stream);
// The backward's forms; the first two are bit-identical run to run:
//  * kTwoPass: dK/dV blocks, then dQ blocks that recompute S and dP
//    (flash_attention_backward.cu);
//  * kOrderedDq: one pass whose key blocks add their parts of dQ into an
//    fp32 sum in key-block order (flash_attention_backward_ordered.cu);
//  * kAtomicDq: the same pass, the parts added in the order the blocks get
//    there (nondeterministic_attention_backward: no block waits for another
//    to add its part, and the sums' rounding varies run to run).
// The one-pass forms run at head dims 64 and 128.
enum class FlashBackwardForm { kTwoPass, kOrderedDq, kAtomicDq };
// fp32 scratch the backward needs:
// FlashAttentionBackwardScratchFloats(shape, form), 16-byte aligned.
int64_t FlashAttentionBackwardScratchFloats(const AttentionShape& shape, FlashBackwardForm form);
// sm_count: the device's SMs (DeviceFacts), which order the one-pass
// form's grid (flash_attention_backward_ordered.cu).
absl::Status LaunchFlashAttentionBackward(const AttentionShape& shape, const void* grad_out,
                                          const void* qkv, const int32_t* doc_starts,
                                          const void* out, const float* lse, void* grad_qkv,
                                          float* scratch, FlashBackwardForm form, int sm_count,
                                          cudaStream_t stream);
// fused_linear_cross_entropy.cu: the per-row softmax/loss/dlogits step on
// bf16 logits; dlogits_bf16 may be logits_bf16 (written in place).
// row_losses: [rows] fp32 scratch for the per-row losses, summed in a fixed
// order into *loss_sum (and the valid rows into *valid_tokens).
absl::Status LaunchCrossEntropyRows(const void* logits_bf16, const int32_t* targets, int rows,
                                    int vocab, int ignore_index, float* row_losses,
                                    float* loss_sum, float* valid_tokens, void* dlogits_bf16,
                                    int* error_flag, cudaStream_t stream);
// fused_adam.cu
struct DeviceAdamShard {
  float* master;
  const float* grad;
  float* m;
  float* v;
  void* fp8;          // e4m3 bytes or bf16
  const float* scale; // null for bf16
  float* scale_inv;
  float* amax;
  int64_t numel;
  int is_fp8;
  int decay;
};
absl::Status LaunchFusedAdam(const DeviceAdamShard* table, int num_shards,
                             const int* block_shard, const int64_t* block_offset, int num_blocks,
                             const AdamHyper& hyper, const float* grad_scale, cudaStream_t stream);
absl::Status LaunchGradSumSquares(const DeviceAdamShard* table, const int* block_shard,
                                  const int64_t* block_offset, int num_blocks, float* partials,
                                  float* sum_sq, cudaStream_t stream);
absl::Status LaunchComputeGradScale(const float* sum_sq, const float* tokens, float max_norm,
                                    float* grad_norm, float* grad_scale, cudaStream_t stream);
inline constexpr int kAdamChunk = 4096;  // elements per FusedAdam block

}  // namespace cuda
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CUDA_KERNELS_H_
