// One linear layer y = x · Wᵀ of a transformer block, in FP8 (the hybrid
// recipe) or in bf16 when FP8 is off. W is the all-gathered [out, in]
// compute weight.
//
// FP8 forward:  x (bf16 [T, in]) -> e4m3 x and its transpose xᵀ (saved for
//               wgrad) with the input slot's scale; y = x8 · W8ᵀ -> bf16, or
//               -> fp32 with the residual stream added in the same GEMM.
// FP8 backward: dy (bf16 [T, out]) -> e5m2 dy and dyᵀ with the gradient
//               slot's scale; Wᵀ by a byte transpose of the gathered weight;
//               dx = dy8 · (Wᵀ)8ᵀ -> bf16;  dW = dyᵀ8 · xᵀ8ᵀ -> fp32 (beta 0).
// bf16: the same three GEMMs on the bf16 tensors (x itself is saved).
// Every GEMM is in the K-contiguous form cuBLASLt needs for FP8.
#ifndef TESSERA_WORKER_MODEL_FP8_LINEAR_H_
#define TESSERA_WORKER_MODEL_FP8_LINEAR_H_

#include "absl/status/status.h"
#include "worker/model/fp8_meta.h"
#include "worker/ops/device_tensor.h"

namespace tessera {

// Scratch shared by all linears (sized for the largest), allocated once.
struct LinearScratch {
  DeviceTensor x_fp8;     // [T * max_in] e4m3
  DeviceTensor dy_fp8;    // [T * max_out] e5m2
  DeviceTensor dy_fp8_t;  // [max_out * T] e5m2
  DeviceTensor w_t;       // [max_in * max_out] e4m3
};

struct LinearSpec {
  // tokens: the rows of the batch passed, at most the tokens the scratch
  // and saved tensors were allocated for (a smaller batch uses a prefix).
  int64_t in = 0, out = 0, tokens = 0;
  LinearId linear;  // which linear of the model: its FP8 slots in Fp8Meta
  bool fp8 = true;
};

// Per-layer saved state: FP8 xᵀ ([in, T] e4m3) when fp8, unused otherwise.
struct LinearSaved {
  DeviceTensor x_t;
};

absl::Status AllocateLinearSaved(Ops& ops, const LinearSpec& spec, LinearSaved& saved);

// How a forward quantizes its input under current scaling. kMeasure (the
// step's forward) takes the amax of x and sets the input slot's scale from
// it; kReuse (the same forward recomputed in the backward, job.proto's
// MemoryConfig) quantizes with the scale kMeasure set, so it writes the
// same codes and the slot's amax and history move once per step. Delayed
// scaling measures nothing before the cast: both are the same there.
enum class InputScaling { kMeasure, kReuse };

// With `residual` (fp32 [T, out]), y is fp32 and y = x · Wᵀ + residual: the
// GEMM adds the block's residual stream as it writes (Ops::GemmAdd), so the
// residual connection costs no pass of its own.
absl::Status LinearForward(Ops& ops, Fp8Meta& meta, const LinearSpec& spec,
                           const TensorDesc& weight, const TensorDesc& x, const TensorDesc& y,
                           LinearScratch& scratch, LinearSaved& saved, Stream* stream,
                           const TensorDesc* residual = nullptr,
                           InputScaling scaling = InputScaling::kMeasure);

// The part of an FP8 LinearForward the backward reads, without the GEMM:
// writes saved.x_t (the transposed e4m3 input) again from x with the input
// slot's scale as the step's forward left it (InputScaling::kReuse). For a
// recomputation that keeps the linear's output but not its saved input.
// Nothing to do for a bf16 linear, whose backward reads x itself.
absl::Status RequantizeInput(Ops& ops, const Fp8Meta& meta, const LinearSpec& spec,
                             const TensorDesc& x, const LinearScratch& scratch,
                             LinearSaved& saved, Stream* stream);

// dx may have data == nullptr to skip it. x is the bf16 input (used when
// fp8 is off). grad_w is fp32 [out, in], overwritten.
absl::Status LinearBackward(Ops& ops, Fp8Meta& meta, const LinearSpec& spec,
                            const TensorDesc& weight, const TensorDesc& x, const TensorDesc& dy,
                            const TensorDesc& dx, const TensorDesc& grad_w,
                            LinearScratch& scratch, LinearSaved& saved, Stream* stream);

// The same FP8 linear for a producer that writes the FP8 operands itself
// (e.g. SwiGluForwardQuantize, SwiGluBackwardQuantize): Fp8Input and
// Fp8Grad name the e4m3 input (its transpose is saved.x_t) and the e5m2
// gradient with its transpose, carrying the slot's scale, scale_inv and
// amax, exactly as LinearForward/LinearBackward would quantize into them.
// Only for delayed scaling (current scaling needs the amax before the cast).
struct Fp8Operand {
  TensorDesc codes, codes_t;
};
Fp8Operand Fp8Input(const Fp8Meta& meta, const LinearSpec& spec, const LinearScratch& scratch,
                    const LinearSaved& saved);
Fp8Operand Fp8Grad(const Fp8Meta& meta, const LinearSpec& spec, const LinearScratch& scratch);
// y = x8 · W8ᵀ (+ residual) for x8 = Fp8Input(...) already written.
absl::Status LinearForwardFromFp8(Ops& ops, Fp8Meta& meta, const LinearSpec& spec,
                                  const TensorDesc& weight, const Fp8Operand& x8,
                                  const TensorDesc& y, Stream* stream,
                                  const TensorDesc* residual = nullptr);
// dx and grad_w for dy8 = Fp8Grad(...) already written.
absl::Status LinearBackwardFromFp8(Ops& ops, Fp8Meta& meta, const LinearSpec& spec,
                                   const TensorDesc& weight, const Fp8Operand& dy8,
                                   const TensorDesc& dx, const TensorDesc& grad_w,
                                   LinearScratch& scratch, LinearSaved& saved, Stream* stream);

}  // namespace tessera

#endif  // TESSERA_WORKER_MODEL_FP8_LINEAR_H_
