// GEMM on cuBLASLt with the semantics of Ops::Gemm: row-major operands,
// fp32 accumulation, bf16 or FP8 operands (e4m3 x e4m3, e5m2 x e4m3,
// e4m3 x e5m2) with per-tensor scales read from device memory, bf16 or fp32
// output, and beta = 1 accumulation into fp32.
//
// Mapping: row-major D = op(A)·op(B) is the column-major Dᵀ = op(B)ᵀ·op(A)ᵀ,
// so cuBLASLt's "A" is our b and its "B" is our a. FP8 needs cuBLASLt's TN
// layout, which is exactly our trans_a = false, trans_b = true (both
// operands K-contiguous); other FP8 layouts are INVALID_ARGUMENT.
//
// Plans: the matmul descriptor, the three layouts and the heuristic's
// candidate algorithms are built once per key and cached: (m, n, k, dtypes,
// transposes, accumulate) and the alignment of each operand's pointer, which
// the heuristic is told (so it offers only algorithms that run on such
// pointers, and a plan's choice never depends on which call came first). A
// steady-state step makes no heuristic query and creates no descriptor;
// plans_built() and plan_hits() count both paths so tests can prove it.
//
// Algorithm choice (gemm_algo_choice.h), set per runner:
//  * Deterministic (the default): the plan runs the heuristic's first
//    candidate whose partial sums are combined in a fixed order and that
//    launches. Nothing is timed, so the same job on the same GPU model
//    gives the same bits run to run and across a resume.
//  * Timed (JobSpec.nondeterministic_gemm_tuning): on a plan's first run
//    every usable candidate is timed (a few launches each, between events)
//    and the fastest is kept. Plans that accumulate (beta = 1) are timed
//    too, without changing their output: their timed launches add a
//    product with an all-zero operand. The fused loss's grad_weight GEMM is
//    one (K is only a chunk of tokens, so its fp32 read-modify-write of D
//    weighs as much as its math, and the kernels differ in how well they
//    hide it). Timings vary, so two runs may keep different algorithms.
//
// Accumulation: e4m3 x e4m3 products (the forward) use cuBLASLt's fast
// FP8 accumulation; products with an e5m2 operand (the gradients) do not.
//
// FP8 scales: cuBLASLt reads each operand's scale through a pointer set in
// the matmul descriptor, and rejects pointers that are not 16-byte aligned.
// Each run points its plan's descriptor at the operands' own scale_inv
// (a host-side attribute write, only when the pointer changed), so no
// kernel runs for the scales: the trainer's FP8 metadata keeps every
// scale_inv on its own 16 bytes (fp8_meta.h). A caller whose scale_inv is
// not 16-byte aligned still works: that run first copies the two values,
// on its stream, into two aligned slots owned by the runner. The runner is
// meant for one stream at a time (the compute stream): descriptors and
// slots are shared by every run of a key.
#ifndef TESSERA_WORKER_ENGINE_CUDA_GEMM_H_
#define TESSERA_WORKER_ENGINE_CUDA_GEMM_H_

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "worker/engine/cuda/device_context.h"
#include "worker/engine/cuda/gemm_algo_choice.h"
#include "worker/ops/tensor.h"

namespace tessera {
namespace cuda {

class GemmRunner {
 public:
  // `ctx` provides the cuBLASLt handle and workspace; it must outlive this.
  explicit GemmRunner(const DeviceContext* ctx,
                      GemmAlgoSelection selection = GemmAlgoSelection::kDeterministic)
      : ctx_(ctx), selection_(selection) {}
  ~GemmRunner();
  GemmRunner(const GemmRunner&) = delete;
  GemmRunner& operator=(const GemmRunner&) = delete;

  // Allocates the FP8 scale slots (for unaligned scale_inv). Call once
  // before Run.
  absl::Status Init();

  // Shapes and dtypes must already be validated (CudaOps::Gemm does); Run
  // itself only rejects what cuBLASLt cannot do (FP8 with K % 16 != 0, or
  // no algorithm for the key).
  // With accumulate, `addend` (fp32, d's shape; null: d itself) is the C
  // that cuBLASLt adds: D = A·B + C out of place (Ops::GemmAdd).
  absl::Status Run(const TensorDesc& a, bool trans_a, const TensorDesc& b, bool trans_b,
                   const TensorDesc& d, bool accumulate, cudaStream_t stream,
                   const void* addend = nullptr);

  GemmAlgoSelection selection() const { return selection_; }
  int plans_built() const { return plans_built_; }  // heuristic queries made
  int64_t plan_hits() const { return plan_hits_; }  // runs served from the cache
  // FP8 runs whose scale_inv had to be copied to aligned slots first.
  int64_t scale_copies() const { return scale_copies_; }
  // One line per plan that has run, sorted: its shape and the algorithm it
  // runs now, as cuBLASLt's configuration attributes ("1024x768x512 bf16 x
  // bf16 -> fp32: algo 66 tile 20 stages 8 split-k 1 reduction 0 ..."). Two
  // runners that made the same choices give the same lines.
  std::vector<std::string> ChosenAlgorithms() const;

 private:
  // What a plan depends on. Pointers are not part of it (they are passed
  // to every cublasLtMatmul call), but their alignments are.
  struct Key {
    int64_t m, n, k;
    DType a, b, d;
    bool trans_a, trans_b, accumulate;
    // PointerAlignmentBytes of cuBLASLt's A (our b), B (our a), C and D.
    uint32_t align_lt_a, align_lt_b, align_c, align_d;
    bool operator==(const Key& o) const {
      return m == o.m && n == o.n && k == o.k && a == o.a && b == o.b && d == o.d &&
             trans_a == o.trans_a && trans_b == o.trans_b && accumulate == o.accumulate &&
             align_lt_a == o.align_lt_a && align_lt_b == o.align_lt_b && align_c == o.align_c &&
             align_d == o.align_d;
    }
  };
  struct KeyHash {
    size_t operator()(const Key& key) const;
  };
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t lt_a = nullptr, lt_b = nullptr, lt_d = nullptr;
    // The candidates the selection keeps (gemm_algo_choice.h), in the
    // heuristic's order. `chosen` is the one that runs: the first that
    // launched (a candidate cuBLASLt refuses at launch is skipped for
    // good), or under timed selection the fastest.
    std::vector<cublasLtMatmulAlgo_t> algos;
    size_t chosen = 0;
    bool needs_timing = false;  // timed selection, before the plan's first run
    std::string description;    // the key, for errors and ChosenAlgorithms
    // FP8: the scale pointers the descriptor holds now (cuBLASLt's A, B).
    const float* lt_a_scale = nullptr;
    const float* lt_b_scale = nullptr;
  };
  // Points an FP8 plan's descriptor at a's and b's scale_inv, through the
  // aligned slots if either is not 16-byte aligned.
  absl::Status SetScales(Plan& plan, const TensorDesc& a, const TensorDesc& b,
                         cudaStream_t stream);
  // Times every candidate of `plan` on these operands and makes the
  // fastest the chosen one. Without `accumulate` each launch rewrites d
  // with the same product; with it, each adds a product with the smaller
  // operand replaced by zeros, so d keeps its values.
  absl::Status ChooseFastest(Plan& plan, const TensorDesc& a, const TensorDesc& b, void* d,
                             bool accumulate, cudaStream_t stream);
  absl::Status BuildPlan(const Key& key, const TensorDesc& a, bool trans_a, const TensorDesc& b,
                         bool trans_b, const TensorDesc& d, bool accumulate, Plan& plan);

  const DeviceContext* ctx_;
  const GemmAlgoSelection selection_;
  std::unordered_map<Key, std::unique_ptr<Plan>, KeyHash> plans_;
  int plans_built_ = 0;
  int64_t plan_hits_ = 0;
  int64_t scale_copies_ = 0;
  float* scale_slots_ = nullptr;  // [8] fp32: [0] cuBLASLt A's scale, [4] B's
};

}  // namespace cuda
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CUDA_GEMM_H_
