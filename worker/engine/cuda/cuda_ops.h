// The CUDA engine for Hopper: the Ops interface (worker/ops/ops.h) over the
// kernels in this directory and cuBLASLt, with the same semantics as the CPU
// reference engine (worker/engine/cpu).
//
// Host-side discipline: CreateCudaOps builds the DeviceContext (device facts
// queried once, the cuBLASLt handle and its one workspace, the device error
// flag) and every op first makes its device current for the calling thread
// (a thread_local check; cudaSetDevice runs once per thread). GEMM plans are
// built once per shape; scratch for attention backward and the fused loss
// is allocated on the first call for a shape and reused. Memory comes from
// cudaMalloc at setup only. Nothing on the step path reads back to the
// host: bad token ids or targets raise the device flag, which the next
// Synchronize reports as INVALID_ARGUMENT. CUDA failures come back through
// cuda_check.h (sticky ones as INTERNAL, out-of-memory as RESOURCE_EXHAUSTED).
//
// Determinism: with the default options every op gives the same bits on
// every run on the same GPU model and library versions. No kernel adds
// floats through atomics (amax is combined with an atomic maximum, which is
// order-free); every reduction runs in an order fixed by the shapes; every
// kernel or tile choice depends on shapes, pointer alignment (fixed by the
// allocation order) and the device, never on timing; GEMM algorithms are
// chosen by a fixed rule (gemm_algo_choice.h). Each kernel file says how.
// cuDNN's attention, when chosen, runs its deterministic backward.
// CudaEngineOptions::time_gemm_algorithms trades that for GEMM speed, and
// attention_atomic_backward for attention speed.
#ifndef TESSERA_WORKER_ENGINE_CUDA_CUDA_OPS_H_
#define TESSERA_WORKER_ENGINE_CUDA_CUDA_OPS_H_

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "worker/engine/cuda/describe_device.h"  // DescribeCudaDevice, for callers
#include "worker/ops/ops.h"

namespace tessera {

// How one engine runs, fixed when it is created (one engine per job).
struct CudaEngineOptions {
  // The cuBLASLt workspace; 0: the default (32 MiB). Benchmarks compare
  // sizes; the algorithms a GEMM plan may choose depend on it.
  size_t cublaslt_workspace_bytes = 0;
  // false: every GEMM shape runs the first fixed-order algorithm cuBLASLt's
  // heuristic ranks for it, the same on every run (bit-reproducible jobs).
  // true: each shape's candidates are timed on its first run and the
  // fastest is kept, which may differ run to run
  // (JobSpec.nondeterministic_gemm_tuning).
  bool time_gemm_algorithms = false;
  // Which implementation runs causal attention (JobSpec.attention_kernels).
  // Under kCudnn and kAuto, document-masked calls whose documents the host
  // counted run as cuDNN's ragged batches where the engine's rule takes
  // them (cuda_ops.cc, CudnnCallsFor), else Tessera's kernels.
  //  * kTessera: flash_attention_*.cu.
  //  * kCudnn: cuDNN's fused attention (cudnn_attention.h); a shape cuDNN
  //    cannot plan is an error.
  //  * kAuto: the rule in common/cudnn_attention_workspace.h
  //    (AutoAttentionPicksCudnn, which the memory estimate counts by):
  //    today Tessera's kernels for both backward forms; where the rule
  //    takes cuDNN, Tessera's kernels still run the shapes cuDNN cannot
  //    plan, and every shape if cuDNN does not start.
  enum class Attention { kTessera, kCudnn, kAuto };
  Attention attention = Attention::kTessera;
  // The backward adds dQ in whatever order its blocks get there: faster,
  // and its bits vary between runs
  // (JobSpec.nondeterministic_attention_backward). cuDNN's adds with fp32
  // atomics instead of keeping dS in its workspace; Tessera's one pass adds
  // its blocks' parts out of key-block order
  // (FlashBackwardForm::kAtomicDq). false: the deterministic forms.
  bool attention_atomic_backward = false;
  // The deterministic backward's key bands (cudnn_attention.h): 0, the
  // engine's rule (CudnnKeyBands, what the memory estimate counts); n > 0,
  // n bands for every whole-sequence call, for benchmarks that compare
  // counts (1: the whole sequence in one call).
  int attention_key_bands = 0;
  // Tessera's own backward (kTessera, and kAuto where cuDNN does not run)
  // has two forms, both bit-identical run to run: two passes (the dQ blocks
  // recompute S and dP) and one pass whose key blocks add their parts of dQ
  // in key-block order. kRule: one pass, whole sequences and documents
  // alike (measured faster each way since its warp-specialised form:
  // bench/RESULTS.md). kOnePass and kTwoPass are for benchmarks and tests
  // that compare the forms.
  enum class BackwardPasses { kRule, kOnePass, kTwoPass };
  BackwardPasses attention_backward_passes = BackwardPasses::kRule;
};

// The engine for GPU `device_index`; NOT_FOUND if there is no such GPU.
absl::StatusOr<std::unique_ptr<Ops>> CreateCudaOps(int device_index,
                                                   const CudaEngineOptions& options = {});

}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CUDA_CUDA_OPS_H_
