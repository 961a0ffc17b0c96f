// Argument checks for the ops API (ops.h), shared by the CPU reference engine
// and the CUDA engine so that both accept and refuse exactly the same calls.
// Each returns OK or INVALID_ARGUMENT whose message starts with the name of
// the offending argument ("x: ...", "out.scale: ...") and says what is wrong.
//
// The checks read descriptors only (dtype, shape, the presence of data and
// FP8 metadata pointers), never tensor contents, so they run the same on
// host and device memory. Rules that need the data itself (an embedding id
// or a loss target outside the vocabulary) stay with each engine: the CPU
// engine returns INVALID_ARGUMENT, the CUDA engine raises its sticky flag.
#ifndef TESSERA_WORKER_OPS_OP_CHECKS_H_
#define TESSERA_WORKER_OPS_OP_CHECKS_H_

#include <cstdint>
#include <initializer_list>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/ops/ops.h"
#include "worker/ops/tensor.h"

namespace tessera {

// ---- Building blocks --------------------------------------------------------
absl::Status CheckDType(const char* name, const TensorDesc& t,
                        std::initializer_list<DType> allowed);
absl::Status CheckShape(const char* name, const TensorDesc& t, const Shape& want);
absl::Status CheckRank(const char* name, const TensorDesc& t, int rank);
// Data may be null only for a tensor with no elements.
absl::Status CheckData(const char* name, const TensorDesc& t);

// ---- FP8 --------------------------------------------------------------------
absl::Status CheckQuantizeArgs(const TensorDesc& in, const TensorDesc& out);
absl::Status CheckQuantizeTransposeArgs(const TensorDesc& in, const TensorDesc& out,
                                        const TensorDesc& out_t);
absl::Status CheckDequantizeArgs(const TensorDesc& in, const TensorDesc& out);
absl::Status CheckAmaxArgs(const TensorDesc& in, const float* amax);
absl::Status CheckFp8StatsArgs(const TensorDesc& in, DType format, const float* scale,
                               const int64_t* counts);
absl::Status CheckUpdateFp8ScalesArgs(const float* amax, const float* history, const float* scale,
                                      const float* scale_inv, int scale_inv_stride, int n,
                                      int history_len);
absl::Status CheckTransposeArgs(const TensorDesc& in, const TensorDesc& out);
// The FP8 pair an op ending in QuantizeTranspose writes: `name` [rows, cols]
// e4m3/e5m2 (data may be null) with its scale set, and `name_t` [cols, rows]
// of the same dtype with data.
absl::Status CheckFp8CastOutputs(const char* name, const TensorDesc& out, const char* name_t,
                                 const TensorDesc& out_t, int64_t rows, int64_t cols);

// ---- GEMM -------------------------------------------------------------------
absl::Status CheckGemmArgs(const TensorDesc& a, bool trans_a, const TensorDesc& b, bool trans_b,
                           const TensorDesc& d, bool accumulate);
// GemmAdd's addend: c and d fp32 of one shape, c with data, and c either d
// itself or not overlapping it. (The product is checked by CheckGemmArgs
// with accumulate.)
absl::Status CheckGemmAddend(const TensorDesc& c, const TensorDesc& d);

// ---- Elementwise and normalisation ------------------------------------------
absl::Status CheckAddArgs(const TensorDesc& a, const TensorDesc& b, const TensorDesc& out);
absl::Status CheckCastArgs(const TensorDesc& in, const TensorDesc& out);
// The shapes and dtypes only: the ids' range is each engine's (see above).
absl::Status CheckEmbeddingForwardArgs(const TensorDesc& ids, const TensorDesc& table,
                                       const TensorDesc& out);
absl::Status CheckEmbeddingBackwardArgs(const TensorDesc& ids, const TensorDesc& grad_out,
                                        const TensorDesc& grad_table, int64_t first_row,
                                        int64_t vocab);
absl::Status CheckRmsNormForwardArgs(const TensorDesc& x, const TensorDesc& weight, float eps,
                                     const TensorDesc& out, const TensorDesc& rstd);
absl::Status CheckRmsNormForwardQuantizeArgs(const TensorDesc& x, const TensorDesc& weight,
                                             float eps, const TensorDesc& out,
                                             const TensorDesc& out_t, const TensorDesc& rstd);
absl::Status CheckRmsNormBackwardArgs(const TensorDesc& grad_out, const TensorDesc& x,
                                      const TensorDesc& weight, const TensorDesc& rstd,
                                      const TensorDesc& grad_x, const TensorDesc& grad_weight);
absl::Status CheckSwiGluForwardArgs(const TensorDesc& gate_up, const TensorDesc& out);
absl::Status CheckSwiGluBackwardArgs(const TensorDesc& grad_out, const TensorDesc& gate_up,
                                     const TensorDesc& grad_gate_up);
absl::Status CheckSwiGluForwardQuantizeArgs(const TensorDesc& gate_up, const TensorDesc& out,
                                            const TensorDesc& out_t);
absl::Status CheckSwiGluBackwardQuantizeArgs(const TensorDesc& grad_out, const TensorDesc& gate_up,
                                             const TensorDesc& dgu, const TensorDesc& dgu_t);

// ---- Attention and RoPE ------------------------------------------------------
// The packed grouped-query layout of ops.h: qkv [B, S, nh + 2*nkv, hd] bf16,
// out [B, S, nh, hd] bf16, lse [B, nh, S] fp32, with nkv >= 1 dividing nh.
// Engines add their own limits after these (the CUDA kernels: hd 64 or 128,
// 16-byte aligned data).
struct AttentionDims {
  int64_t batch = 0, seq = 0, heads = 0, kv_heads = 0, head_dim = 0;
};
absl::StatusOr<AttentionDims> CheckAttentionForwardArgs(const TensorDesc& qkv, int n_kv_heads,
                                                        const TensorDesc& out,
                                                        const TensorDesc& lse);
// The forward's arguments, then grad_out shaped like out and grad_qkv like
// qkv (bf16, with data).
absl::StatusOr<AttentionDims> CheckAttentionBackwardArgs(const TensorDesc& grad_out,
                                                         const TensorDesc& qkv, int n_kv_heads,
                                                         const TensorDesc& out,
                                                         const TensorDesc& lse,
                                                         const TensorDesc& grad_qkv);
// Attention's document starts (ops.h): no data means whole sequences (false);
// otherwise int32 [B, S] with data (true). Their values are the engine's to
// check.
absl::StatusOr<bool> CheckDocStartsArgs(const TensorDesc& doc_starts, const AttentionDims& d);
// RoPE in place over `name` (qkv or grad_qkv) in the packed layout: hd even
// and >= 2, theta finite and > 0. (heads is nh; RoPE turns the nh + nkv
// query and key heads.)
absl::StatusOr<AttentionDims> CheckRopeArgs(const char* name, const TensorDesc& qkv,
                                            int n_kv_heads, float theta);

// ---- Optimizer ---------------------------------------------------------------
// A FusedAdam plan's shards: master, grad, exp_avg and exp_avg_sq fp32 and
// fp8 e4m3 (with its scale) or bf16, all of one element count, with data
// unless empty. Messages start "shard I: FIELD:".
absl::Status CheckAdamShards(absl::Span<const AdamShard> shards);
absl::Status CheckGradSumSquaresArgs(const float* sum_sq);
absl::Status CheckComputeGradScaleArgs(const float* sum_sq, const float* tokens,
                                       const float* grad_norm, const float* grad_scale);
absl::Status CheckFusedAdamArgs(const AdamHyper& hyper, const float* grad_scale);

// ---- Fused linear + cross-entropy -------------------------------------------
// Which outputs a FusedLinearCrossEntropy call asked for.
enum class FusedLossOutputs {
  kLossAndGradients,
  kLossOnly,  // grad_x.data and grad_weight.data both null: no gradient is computed
};
absl::StatusOr<FusedLossOutputs> CheckFusedLinearCrossEntropyArgs(
    const TensorDesc& x, const TensorDesc& weight, const TensorDesc& targets, int chunk_tokens,
    const float* loss_sum, const float* valid_tokens, const TensorDesc& grad_x,
    const TensorDesc& grad_weight);

}  // namespace tessera

#endif  // TESSERA_WORKER_OPS_OP_CHECKS_H_
