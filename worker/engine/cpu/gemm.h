// GEMM for the CPU engine, with the semantics of Ops::Gemm: row-major,
// bf16 or FP8 operands (FP8 only K-contiguous, as on cuBLASLt), fp32
// accumulation, fp32 or bf16 output, beta = 1 accumulation into fp32, and
// an fp32 addend (GemmAdd).
// Operands are widened to fp32 in reusable scratch (bf16 and FP8 values are
// exact in fp32, so each product is exact, as on the tensor cores) and
// multiplied by OpenBLAS sgemm.
#ifndef TESSERA_WORKER_ENGINE_CPU_GEMM_H_
#define TESSERA_WORKER_ENGINE_CPU_GEMM_H_

#include "absl/status/status.h"
#include "worker/ops/ops.h"

namespace tessera {
namespace cpu {

absl::Status Gemm(const TensorDesc& a, bool trans_a, const TensorDesc& b, bool trans_b,
                  const TensorDesc& d, bool accumulate);

// d = op(a) · op(b) + c (Ops::GemmAdd): c copied into d, then accumulated.
absl::Status GemmAdd(const TensorDesc& a, bool trans_a, const TensorDesc& b, bool trans_b,
                     const TensorDesc& c, const TensorDesc& d);

}  // namespace cpu
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CPU_GEMM_H_
