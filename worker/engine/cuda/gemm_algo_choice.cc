// The GEMM candidate rule (see gemm_algo_choice.h).
#include "worker/engine/cuda/gemm_algo_choice.h"

namespace tessera {
namespace cuda {

bool HasFixedReductionOrder(const GemmCandidate& candidate) {
  if (candidate.split_k <= 1) return true;
  switch (candidate.reduction_scheme) {
    case kReductionInPlace:
    case kReductionComputeType:
    case kReductionOutputType:
      return true;
    default:  // kReductionNone with several splits, or a scheme not documented
      return false;
  }
}

std::vector<int> GemmCandidatesToTry(absl::Span<const GemmCandidate> candidates,
                                     GemmAlgoSelection selection) {
  std::vector<int> kept;
  for (int i = 0; i < static_cast<int>(candidates.size()); ++i) {
    const GemmCandidate& c = candidates[i];
    if (!c.usable) continue;
    if (selection == GemmAlgoSelection::kDeterministic && !HasFixedReductionOrder(c)) continue;
    kept.push_back(i);
  }
  return kept;
}

uint32_t PointerAlignmentBytes(const void* p) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

}  // namespace cuda
}  // namespace tessera
