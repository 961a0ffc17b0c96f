// FP8 / bf16 linear layers of a block (see fp8_linear.h).
#include "worker/model/fp8_linear.h"

#include "common/status_macros.h"

namespace tessera {
namespace {

TensorDesc View(const DeviceTensor& t, DType dtype, Shape shape) {
  TensorDesc d = t.desc;
  d.dtype = dtype;
  d.shape = shape;
  return d;
}

}  // namespace

absl::Status AllocateLinearSaved(Ops& ops, const LinearSpec& spec, LinearSaved& saved) {
  if (!spec.fp8) return absl::OkStatus();
  ASSIGN_OR_RETURN(saved.x_t, AllocateTensor(ops, DType::kE4M3, Shape{spec.in, spec.tokens}));
  return absl::OkStatus();
}

Fp8Operand Fp8Input(const Fp8Meta& meta, const LinearSpec& spec, const LinearScratch& scratch,
                    const LinearSaved& saved) {
  const E4m3Slot slot = meta.layout().InputSlot(spec.linear);
  Fp8Operand x8;
  x8.codes = View(scratch.x_fp8, DType::kE4M3, Shape{spec.tokens, spec.in});
  x8.codes.scale = meta.scale(slot);
  x8.codes.scale_inv = meta.scale_inv(slot);
  x8.codes.amax = meta.amax(slot);
  // [in, tokens]: the transpose of the batch passed, a prefix of x_t when
  // that batch is smaller than the micro-batch x_t was allocated for.
  x8.codes_t = View(saved.x_t, DType::kE4M3, Shape{spec.in, spec.tokens});
  return x8;
}

Fp8Operand Fp8Grad(const Fp8Meta& meta, const LinearSpec& spec, const LinearScratch& scratch) {
  const E5m2Slot slot = meta.layout().GradSlot(spec.linear);
  Fp8Operand dy8;
  dy8.codes = View(scratch.dy_fp8, DType::kE5M2, Shape{spec.tokens, spec.out});
  dy8.codes.scale = meta.scale(slot);
  dy8.codes.scale_inv = meta.scale_inv(slot);
  dy8.codes.amax = meta.amax(slot);
  dy8.codes_t = View(scratch.dy_fp8_t, DType::kE5M2, Shape{spec.out, spec.tokens});
  dy8.codes_t.scale_inv = meta.scale_inv(slot);
  return dy8;
}

absl::Status LinearForward(Ops& ops, Fp8Meta& meta, const LinearSpec& spec,
                           const TensorDesc& weight, const TensorDesc& x, const TensorDesc& y,
                           LinearScratch& scratch, LinearSaved& saved, Stream* stream,
                           const TensorDesc* residual, InputScaling scaling) {
  if (!spec.fp8) {
    const TensorDesc w = Reshaped(weight, Shape{spec.out, spec.in});
    if (residual != nullptr) return ops.GemmAdd(x, false, w, true, *residual, y, stream);
    return ops.Gemm(x, false, w, true, y, false, stream);
  }
  if (meta.current_scaling() && scaling == InputScaling::kMeasure) {
    const E4m3Slot slot = meta.layout().InputSlot(spec.linear);
    RETURN_IF_ERROR(ops.Amax(x, meta.amax(slot), stream));
    RETURN_IF_ERROR(meta.UpdateScale(ops, slot, stream));
  }
  const Fp8Operand x8 = Fp8Input(meta, spec, scratch, saved);
  RETURN_IF_ERROR(ops.QuantizeTranspose(x, x8.codes, x8.codes_t, stream));
  return LinearForwardFromFp8(ops, meta, spec, weight, x8, y, stream, residual);
}

absl::Status RequantizeInput(Ops& ops, const Fp8Meta& meta, const LinearSpec& spec,
                             const TensorDesc& x, const LinearScratch& scratch,
                             LinearSaved& saved, Stream* stream) {
  if (!spec.fp8) return absl::OkStatus();
  const Fp8Operand x8 = Fp8Input(meta, spec, scratch, saved);
  return ops.QuantizeTranspose(x, x8.codes, x8.codes_t, stream);
}

absl::Status LinearForwardFromFp8(Ops& ops, Fp8Meta& meta, const LinearSpec& spec,
                                  const TensorDesc& weight, const Fp8Operand& x8,
                                  const TensorDesc& y, Stream* stream,
                                  const TensorDesc* residual) {
  TensorDesc w8 = Reshaped(weight, Shape{spec.out, spec.in});
  w8.scale_inv = meta.weight_data_scale_inv(spec.linear);
  if (residual != nullptr) return ops.GemmAdd(x8.codes, false, w8, true, *residual, y, stream);
  return ops.Gemm(x8.codes, false, w8, true, y, false, stream);
}

absl::Status LinearBackward(Ops& ops, Fp8Meta& meta, const LinearSpec& spec,
                            const TensorDesc& weight, const TensorDesc& x, const TensorDesc& dy,
                            const TensorDesc& dx, const TensorDesc& grad_w,
                            LinearScratch& scratch, LinearSaved& saved, Stream* stream) {
  if (!spec.fp8) {
    const TensorDesc w = Reshaped(weight, Shape{spec.out, spec.in});
    const TensorDesc gw = Reshaped(grad_w, Shape{spec.out, spec.in});
    if (dx.data != nullptr) RETURN_IF_ERROR(ops.Gemm(dy, false, w, false, dx, false, stream));
    return ops.Gemm(dy, true, x, false, gw, false, stream);
  }
  if (meta.current_scaling()) {
    const E5m2Slot slot = meta.layout().GradSlot(spec.linear);
    RETURN_IF_ERROR(ops.Amax(dy, meta.amax(slot), stream));
    RETURN_IF_ERROR(meta.UpdateScale(ops, slot, stream));
  }
  const Fp8Operand dy8 = Fp8Grad(meta, spec, scratch);
  RETURN_IF_ERROR(ops.QuantizeTranspose(dy, dy8.codes, dy8.codes_t, stream));
  return LinearBackwardFromFp8(ops, meta, spec, weight, dy8, dx, grad_w, scratch, saved, stream);
}

absl::Status LinearBackwardFromFp8(Ops& ops, Fp8Meta& meta, const LinearSpec& spec,
                                   const TensorDesc& weight, const Fp8Operand& dy8,
                                   const TensorDesc& dx, const TensorDesc& grad_w,
                                   LinearScratch& scratch, LinearSaved& saved, Stream* stream) {
  if (dx.data != nullptr) {
    TensorDesc w8 = Reshaped(weight, Shape{spec.out, spec.in});
    w8.scale_inv = meta.weight_data_scale_inv(spec.linear);
    TensorDesc w8_t = View(scratch.w_t, DType::kE4M3, Shape{spec.in, spec.out});
    w8_t.scale_inv = meta.weight_data_scale_inv(spec.linear);
    RETURN_IF_ERROR(ops.Transpose(w8, w8_t, stream));
    RETURN_IF_ERROR(ops.Gemm(dy8.codes, false, w8_t, true, dx, false, stream));
  }
  TensorDesc x8_t = saved.x_t.desc;
  x8_t.scale_inv = meta.scale_inv(meta.layout().InputSlot(spec.linear));
  return ops.Gemm(dy8.codes_t, false, x8_t, true, Reshaped(grad_w, Shape{spec.out, spec.in}),
                  false, stream);
}

}  // namespace tessera
