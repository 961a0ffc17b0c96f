// Token embedding of the CPU reference engine.
//
//  * EmbeddingForward: out[t, :] = table[ids[t], :] for ids [T] int32,
//    table [V, H] fp32 or bf16, out [T, H] fp32 or bf16 (each value
//    converted to out's dtype: exact, or rounded to nearest even for
//    fp32 -> bf16).
//  * EmbeddingBackward: grad_table [R, H] fp32 (rows [first_row,
//    first_row + R) of a [vocab, H] table's gradient) += scatter-add of the
//    rows of grad_out [T, H] (fp32 or bf16) by ids, skipping ids outside
//    those rows, in token order t = 0, 1, ..., each add in fp32. The order is fixed, so the result is deterministic
//    (the CUDA engine reproduces it up to fp32 summation order).
// Every id is checked before anything is written: an id outside [0, V) is
// INVALID_ARGUMENT naming its position and value, and the output is left
// untouched. (The CUDA engine instead writes zeros for such a row and raises
// its sticky error flag; see worker/ops/ops.h.)
#ifndef TESSERA_WORKER_ENGINE_CPU_EMBEDDING_H_
#define TESSERA_WORKER_ENGINE_CPU_EMBEDDING_H_

#include "absl/status/status.h"
#include "worker/ops/tensor.h"

namespace tessera {
namespace cpu {

absl::Status EmbeddingForward(const TensorDesc& ids, const TensorDesc& table, const TensorDesc& out);
absl::Status EmbeddingBackward(const TensorDesc& ids, const TensorDesc& grad_out,
                               const TensorDesc& grad_table, int64_t first_row, int64_t vocab);

}  // namespace cpu
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CPU_EMBEDDING_H_
