// Elementwise ops of the CPU reference engine: Add (the residual
// connections) and Cast (fp32 <-> bf16, e.g. the fp32 residual gradient to
// the bf16 input of a GEMM).
//
// Semantics the CUDA engine matches exactly:
//  * Add: out_i = a_i + b_i, computed in fp32 from the stored values, then
//    rounded to out's dtype (bf16: round to nearest even). a, b and out may
//    each be fp32 or bf16 and are read as flat arrays with the same element
//    count (their shapes may differ). out may alias a or b.
//  * Cast: out_i = in_i rounded to out's dtype (fp32 -> bf16 rounds to
//    nearest even, NaN stays NaN; bf16 -> fp32 is exact). Same dtype is a
//    bit-exact copy. Same element count, shapes may differ.
// Errors: INVALID_ARGUMENT naming the argument for a dtype other than fp32 /
// bf16, a mismatched element count, or null data.
#ifndef TESSERA_WORKER_ENGINE_CPU_ELEMENTWISE_H_
#define TESSERA_WORKER_ENGINE_CPU_ELEMENTWISE_H_

#include "absl/status/status.h"
#include "worker/ops/tensor.h"

namespace tessera {
namespace cpu {

absl::Status Add(const TensorDesc& a, const TensorDesc& b, const TensorDesc& out);
absl::Status Cast(const TensorDesc& in, const TensorDesc& out);

}  // namespace cpu
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CPU_ELEMENTWISE_H_
