// Which cuBLASLt algorithms a GEMM plan may run, decided from the
// heuristic's answer alone, so the rule can be tested without a GPU.
//
// Why it matters: cuBLASLt gives the same bits every run for one algorithm
// on one GPU model (same SM count, same library version, a workspace of our
// own, one stream), but two algorithms for the same shape add their partial
// products in different orders and so differ in the last bits. A plan that
// picks its algorithm by timing can pick another one on the next run or
// after a resume; a plan that picks by this rule cannot.
//
// Deterministic selection keeps, in the heuristic's order, the candidates
// the heuristic marked usable whose partial sums are combined in a fixed
// order: no split of K, or a split-K whose reduction scheme is one cuBLASLt
// documents as ordered (in place through counters that serialise the
// splits, or a separate reduction pass over partials in the workspace). A
// scheme value cuBLASLt does not document is left out. The plan runs the
// first kept candidate that launches; one refused at launch is skipped for
// good, which is the same on every run because the plan's key includes the
// operands' pointer alignments (PointerAlignmentBytes).
//
// Timed selection keeps every usable candidate; the plan times them on its
// first run and keeps the fastest.
#ifndef TESSERA_WORKER_ENGINE_CUDA_GEMM_ALGO_CHOICE_H_
#define TESSERA_WORKER_ENGINE_CUDA_GEMM_ALGO_CHOICE_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace tessera {
namespace cuda {

enum class GemmAlgoSelection {
  kDeterministic,  // the first fixed-order candidate, the same every run
  kTimed,          // the fastest on the first run; may differ run to run
};

// cublasLtReductionScheme_t's values (gemm.cu checks that they match).
inline constexpr uint32_t kReductionNone = 0;
inline constexpr uint32_t kReductionInPlace = 1;
inline constexpr uint32_t kReductionComputeType = 2;
inline constexpr uint32_t kReductionOutputType = 4;

// What the rule reads of one heuristic result.
struct GemmCandidate {
  bool usable = false;            // the heuristic's state for it was success
  int32_t split_k = 1;            // CUBLASLT_ALGO_CONFIG_SPLITK_NUM
  uint32_t reduction_scheme = 0;  // CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME
};

// True when the candidate adds its partial products in an order fixed by
// the shape: split_k <= 1, or a documented ordered reduction scheme.
bool HasFixedReductionOrder(const GemmCandidate& candidate);

// Indices into `candidates` (the heuristic's order, best first) that the
// plan may run, in the order it tries them.
std::vector<int> GemmCandidatesToTry(absl::Span<const GemmCandidate> candidates,
                                     GemmAlgoSelection selection);

// The largest power of two, at most 256 (cuBLASLt's default assumption),
// that divides the address; 256 for null.
uint32_t PointerAlignmentBytes(const void* p);

}  // namespace cuda
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CUDA_GEMM_ALGO_CHOICE_H_
