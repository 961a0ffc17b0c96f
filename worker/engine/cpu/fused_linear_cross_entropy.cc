// Chunked linear + cross-entropy for the CPU engine (see
// fused_linear_cross_entropy.h).
#include "worker/engine/cpu/fused_linear_cross_entropy.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/engine/cpu/tensor_access.h"
#include "worker/ops/op_checks.h"

namespace tessera {
namespace cpu {

absl::Status FusedLinearCrossEntropy(const TensorDesc& x, const TensorDesc& weight,
                                     const TensorDesc& targets, int ignore_index, int chunk_tokens,
                                     float* loss_sum, float* valid_tokens,
                                     const TensorDesc& grad_x, const TensorDesc& grad_weight,
                                     bool accumulate_grad_weight) {
  absl::StatusOr<FusedLossOutputs> outputs = CheckFusedLinearCrossEntropyArgs(
      x, weight, targets, chunk_tokens, loss_sum, valid_tokens, grad_x, grad_weight);
  if (!outputs.ok()) return outputs.status();
  const bool gradients = *outputs == FusedLossOutputs::kLossAndGradients;
  const int64_t tokens = x.shape[0], h = x.shape[1], vocab = weight.shape[0];
  const int32_t* target = static_cast<const int32_t*>(targets.data);
  for (int64_t t = 0; t < tokens; ++t) {
    if (target[t] != ignore_index && (target[t] < 0 || target[t] >= vocab)) {
      return absl::InvalidArgumentError(absl::StrCat("targets: token ", t, " has target ",
                                                     target[t], " outside [0, ", vocab, ")"));
    }
  }
  // The weight widened to fp32 once per call (exact), and chunk-sized
  // scratch; reused across calls.
  thread_local std::vector<float> w32, x32, logits, dx32;
  LoadAll(weight, w32);
  float* gw = static_cast<float*>(grad_weight.data);
  if (gradients && tokens == 0 && !accumulate_grad_weight) std::fill(gw, gw + vocab * h, 0.f);
  double loss = 0.0;
  int64_t valid = 0;
  for (int64_t start = 0; start < tokens; start += chunk_tokens) {
    const int64_t c = std::min<int64_t>(chunk_tokens, tokens - start);
    x32.resize(c * h);
    logits.resize(c * vocab);
    for (int64_t i = 0; i < c * h; ++i) x32[i] = Load(x, start * h + i);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, c, vocab, h, 1.0f, x32.data(), h,
                w32.data(), h, 0.0f, logits.data(), vocab);
    for (int64_t r = 0; r < c; ++r) {
      float* row = logits.data() + r * vocab;
      const int32_t tgt = target[start + r];
      if (tgt == ignore_index) {
        std::fill(row, row + vocab, 0.f);
        continue;
      }
      float m = -INFINITY;
      for (int64_t v = 0; v < vocab; ++v) m = std::max(m, row[v]);
      float sum = 0.f;
      for (int64_t v = 0; v < vocab; ++v) sum += std::exp(row[v] - m);
      const float lse = std::log(sum) + m;
      loss += static_cast<double>(lse - row[tgt]);
      ++valid;
      if (!gradients) continue;
      for (int64_t v = 0; v < vocab; ++v) {
        float grad = std::exp(row[v] - lse) - (v == tgt ? 1.0f : 0.0f);
        row[v] = RoundToBf16(grad);  // dlogits as the bf16 GEMM operand
      }
    }
    if (!gradients) continue;  // loss only: the dlogits are not used
    // grad_x chunk = dlogits [c, V] · W [V, H].
    dx32.resize(c * h);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, c, h, vocab, 1.0f, logits.data(), vocab,
                w32.data(), h, 0.0f, dx32.data(), h);
    for (int64_t i = 0; i < c * h; ++i) Store(grad_x, start * h + i, dx32[i]);
    // grad_W [V, H] (+)= dlogitsᵀ [V, c] · x_c [c, H], in place.
    const float beta = accumulate_grad_weight || start > 0 ? 1.0f : 0.0f;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, vocab, h, c, 1.0f, logits.data(), vocab,
                x32.data(), h, beta, gw, h);
  }
  *loss_sum += static_cast<float>(loss);
  *valid_tokens += static_cast<float>(valid);
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace tessera
