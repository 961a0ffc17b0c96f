// Causal grouped-query attention through cuDNN's fused flash-attention
// engines, as a second implementation beside our own kernels
// (flash_attention_forward.cu, flash_attention_backward.cu) with the same
// contract: qkv [B, S, heads + 2 kv_heads, hd] bf16 read in place, out
// [B, S, heads, hd] bf16, lse [B, heads, S] fp32 natural-log log-sum-exp of
// the scaled scores, grad_qkv written whole (not accumulated).
//
// cuDNN is reached through its backend graph API: the forward and the
// backward are each one operation graph (matmuls, pointwise ops and
// reductions in the pattern cuDNN's attention engines recognise), built
// and planned once per shape and cached. Plans are built on first use, so
// the first call of a shape takes longer (the engine may compile kernels);
// a captured step must therefore run each shape once eagerly first, which
// the trainer's first eager step already does.
//
// Determinism: the forward has no cross-block reduction. The backward has
// two forms. The deterministic one lets cuDNN keep dS in its workspace
// (b * heads * S^2 * 2 bytes, planned here) and computes dQ with a plain
// product. The other accumulates dQ with fp32 atomics (bits vary in the last
// places between runs) and needs only b * heads * S * hd * 4 bytes.
//
// Key bands: the deterministic backward of whole sequences may run as n
// calls, band c holding the keys [c S/n, (c+1) S/n) and the queries that
// see them, [c S/n, S), rows and columns both counted from the band's
// first key, so the mask is the ordinary causal one. The backward splits
// exactly over keys: P comes from the saved lse and D from O and dO, so a
// band needs no other keys. cuDNN keeps dS for every query and key of a
// call: S^2 in one call, S^2 / n in the largest band. A band's dK and dV
// are whole and go straight into grad_qkv; its dQ is a partial sum over its
// keys, written to the workspace and then added in band order
// (key_band_sums.cu), so the bits still repeat. The engine takes
// CudnnKeyBands (common/cudnn_attention_workspace.h).
//
// Documents (document masking): a batch whose sequences pack several
// documents runs them as the entries of ragged batches, each document one
// causal sequence. From what the host counted (DocumentCounts), the
// documents are split by length into a few groups (GroupDocuments), each
// one call planned for a capacity of documents and its longest length,
// both rounded up; a kernel picks each group's documents from the device's
// starts and builds each entry's length and row offsets before every call
// (ragged_documents.cu), so the outputs and lse land in the usual layouts.
// Entries past a group's documents are empty.
//
// This header uses only standard and CUDA runtime types; cudnn.h stays in
// the .cc.
#ifndef TESSERA_WORKER_ENGINE_CUDA_CUDNN_ATTENTION_H_
#define TESSERA_WORKER_ENGINE_CUDA_CUDNN_ATTENTION_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/functional/function_ref.h"
#include "worker/engine/cuda/kernels.h"

namespace tessera {
namespace cuda {

class CudnnAttention {
 public:
  // A cuDNN handle on the current device. UNAVAILABLE when cuDNN cannot
  // start (no library, no device, a cuDNN too old for the graph API).
  static absl::StatusOr<std::unique_ptr<CudnnAttention>> Create();
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // cuDNN's version as an integer (9.14.0 -> 91400).
  static int64_t Version();

  // The ragged plan a call runs under: `capacity` entries of at most
  // `longest` tokens. {0, 0} for whole sequences.
  struct PlannedDocuments {
    int64_t capacity = 0;
    int64_t longest = 0;
  };
  // One call's documents: those of more than `above` and at most `up_to`
  // tokens, under `plan`.
  struct DocumentGroup {
    PlannedDocuments plan;
    int64_t above = 0;
    int64_t up_to = 0;
  };
  // A batch's documents for one call: the device's starts ([B, S],
  // Ops::AttentionForward) and the group this call runs.
  struct Documents {
    const int32_t* doc_starts = nullptr;
    DocumentGroup group;
  };
  // Splits a batch's documents into groups of whole length classes, the
  // shortest first, each as large as `fits` allows its plan (the caller's
  // workspace rule): one group where one plan fits them all. A plan's
  // capacity is its count rounded up to a power of two up to 16, then to a
  // multiple of 16; its longest is its longest class's upper end (at least
  // 64), so a job's batches share a few plans. Returns no groups where a
  // single length class does not fit, or more than kMaxDocumentGroups
  // would be needed.
  static constexpr int kMaxDocumentGroups = 4;
  struct DocumentGroups {
    DocumentGroup group[kMaxDocumentGroups];
    int count = 0;
  };
  static DocumentGroups GroupDocuments(const DocumentCounts& counts,
                                       absl::FunctionRef<bool(const PlannedDocuments&)> fits);

  // Device workspace each call needs, 256-byte aligned; builds the plan on
  // first use. Errors (INVALID_ARGUMENT or UNIMPLEMENTED) mean cuDNN has no
  // engine for this shape: use our kernels. `documents` null: each
  // sequence is one document.
  absl::StatusOr<size_t> ForwardWorkspaceBytes(const AttentionShape& shape,
                                               const Documents* documents = nullptr);
  // `key_bands` > 1 (deterministic, whole sequences only; S a multiple
  // of 64 x key_bands): the backward in that many key bands.
  absl::StatusOr<size_t> BackwardWorkspaceBytes(const AttentionShape& shape, bool deterministic,
                                                const Documents* documents = nullptr,
                                                int key_bands = 1);

  absl::Status Forward(const AttentionShape& shape, const void* qkv, void* out, float* lse,
                       void* workspace, cudaStream_t stream,
                       const Documents* documents = nullptr);
  absl::Status Backward(const AttentionShape& shape, bool deterministic, const void* grad_out,
                        const void* qkv, const void* out, const float* lse, void* grad_qkv,
                        void* workspace, cudaStream_t stream,
                        const Documents* documents = nullptr, int key_bands = 1);

  // For tuning (bench/cudnn_attention_plans.cc). The graphs of one shape:
  enum Kind { kForward = 0, kBackwardDeterministic = 1, kBackwardAtomic = 2 };
  // The engine configurations a graph can be planned with, described as
  // "heuristics: engine E knobs T=V ..." (what cuDNN's heuristics list,
  // modes A then FALLBACK; the first that finalizes is the default plan)
  // followed by "variant: ..." (the first one's engine with one knob set to
  // each other value it admits, at most 64).
  absl::StatusOr<std::vector<std::string>> ListPlanCandidates(const AttentionShape& shape,
                                                              int kind);
  // Replaces the cached plan of this shape and kind with candidate `index`
  // of that list and returns its description. A candidate that cuDNN
  // cannot finalize returns its error and leaves the cached plan as it was.
  absl::StatusOr<std::string> UsePlanCandidate(const AttentionShape& shape, int kind, int index);
  // The description of the plan calls of this shape and kind run.
  absl::StatusOr<std::string> PlanDescription(const AttentionShape& shape, int kind);

  struct Plan;  // defined in the .cc
  // One key band's call: `keys` keys and the last `rows` queries of the
  // sequence, from the band's first key on. {0, 0}: every query and key.
  struct KeyBand {
    int64_t rows = 0;
    int64_t keys = 0;
  };

 private:
  explicit CudnnAttention(void* handle);
  // kind, B, S, H, KV, hd, document capacity, longest document, band rows,
  // band keys
  using Key = std::tuple<int, int64_t, int64_t, int, int, int, int64_t, int64_t, int64_t, int64_t>;
  static Key KeyOf(const AttentionShape& shape, int kind, const PlannedDocuments& documents,
                   const KeyBand& band);
  static absl::Status CheckShape(const AttentionShape& shape, int kind);
  static absl::Status CheckKeyBands(const AttentionShape& shape, bool deterministic,
                                    const Documents* documents, int key_bands);
  // pinned < 0: the first configuration that finalizes.
  absl::StatusOr<std::unique_ptr<Plan>> BuildPlan(const AttentionShape& shape, int kind,
                                                  int pinned, const PlannedDocuments& documents,
                                                  const KeyBand& band);
  absl::StatusOr<Plan*> GetPlan(const AttentionShape& shape, int kind,
                                const PlannedDocuments& documents, const KeyBand& band);
  // Where the bands' partial dQ start in the workspace of a backward in
  // `bands` key bands: after the largest band's own workspace.
  absl::StatusOr<size_t> BandPartialsOffset(const AttentionShape& shape, int bands);
  absl::Status BackwardInBands(const AttentionShape& shape, int bands, const void* grad_out,
                               const void* qkv, const void* out, const float* lse,
                               void* grad_qkv, void* workspace, cudaStream_t stream);

  void* handle_;  // cudnnHandle_t
  std::map<Key, std::unique_ptr<Plan>> plans_;
  std::map<Key, absl::Status> unplannable_;  // asked once, kept: the answer does not change
};

}  // namespace cuda
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CUDA_CUDNN_ATTENTION_H_
