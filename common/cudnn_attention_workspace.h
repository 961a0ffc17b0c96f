// How much device memory cuDNN's fused attention takes beside its inputs
// and outputs (worker/engine/cuda/cudnn_attention.h), and the rule by which
// JobSpec.attention_kernels AUTO chooses it. Both live here because two
// sides must agree on them: the CUDA engine decides by the rule, and the
// memory estimate (common/memory_estimate.h) counts the workspace of the
// choice the engine will make, so that a job is admitted on what it will
// really allocate. cudnn_attention_test holds the bound to the workspace
// cuDNN asks for.
#ifndef TESSERA_COMMON_CUDNN_ATTENTION_WORKSPACE_H_
#define TESSERA_COMMON_CUDNN_ATTENTION_WORKSPACE_H_

#include <cstdint>

namespace tessera {

// One attention call: `batch` sequences of `seq` tokens, `heads` query
// heads sharing `kv_heads` key/value heads of `head_dim`.
struct CudnnAttentionShape {
  int64_t batch = 0, heads = 0, kv_heads = 0, seq = 0, head_dim = 0;
};

// The deterministic backward of whole sequences can run in key bands:
// band c of n holds the keys [c S/n, (c+1) S/n) and the queries that see
// them, [c S/n, S), both counted from the band's first key, so its mask is
// the ordinary causal one. The backward splits exactly over keys (P is
// recomputed from the saved lse and D from O and dO, neither from the
// other keys): each band's dK and dV are whole, and its dQ is a partial sum
// over its keys, which one more kernel adds in band order. cuDNN's
// deterministic backward keeps dS for every query and key its call holds,
// so one call keeps S^2 and the largest band S^2 / n. Bands cost time
// (measured on an H200 at 32 heads and 8192 tokens: forward + backward
// 4.18 ms in one call, 4.40 / 4.55 / 4.72 ms in 2 / 4 / 8 bands;
// bench/RESULTS.md), so they are the way to keep cuDNN where one call's
// workspace would pass kCudnnBandWorkspaceLimitBytes, not a speed-up. The
// rule: one band while one call's bound fits that limit; past it, the
// fewest bands, each a whole multiple of 64 tokens, whose bound fits; where
// none of up to kMaxCudnnKeyBands does, the most the sequence splits into
// (ATTENTION_KERNELS_CUDNN runs in those bands all the same).
inline constexpr int kMaxCudnnKeyBands = 8;
int CudnnKeyBands(const CudnnAttentionShape& shape);

// An upper bound of one call's workspace, forward or backward (the
// backward's is the larger), with the deterministic backward in
// `key_bands` bands (the whole sequence as one where 1; the engine runs
// CudnnKeyBands). Measured on H100 with cuDNN 9.14:
//  * the deterministic backward keeps dS, batch x heads x seq^2 bf16 (seq
//    rounded up to 64);
//  * the atomic backward keeps an fp32 dQ accumulator instead;
//  * both keep D, an fp32 value per head and query;
//  * with grouped-query heads, dK and dV per query head before they are
//    summed over each group: batch x heads x seq x head_dim x 2 x bf16;
// plus 16 MiB of slack for cuDNN's own use (it asked for 256 bytes).
// In bands: the first band's dS and D (all of the queries), a band's
// per-query-head dK and dV, and every band's partial dQ (bf16, (n + 1) / 2
// x the queries' rows).
int64_t CudnnAttentionWorkspaceBound(const CudnnAttentionShape& shape, bool deterministic,
                                     int key_bands = 1);

// The most workspace one deterministic call, or one band of it, may keep:
// cuDNN's dS grows with the square of the sequence (4.4 GB for 32 heads at
// 8192 tokens in one call; 17 GB at 16384 in one call, so 4 bands and
// 4.3 GB; 34 GB in the first of 8 bands at 65536).
inline constexpr int64_t kCudnnBandWorkspaceLimitBytes = int64_t{8} << 30;

// AUTO's rule, by backward form: whether AUTO runs cuDNN's attention. It
// runs Tessera's warp-specialised kernels for both forms today, at both
// head dims CUDA jobs take (64 and 128), whole sequences and documents
// alike. Measured on an H200 (bench/RESULTS.md): at head dim 128 Tessera's
// one pass beats cuDNN's deterministic backward and the 1.1B step at 8192
// tokens is faster with it ("dQ writer"); at head dim 64 the 221M step is
// 2.5% faster with it ("head dim 64 one pass"). The atomic form went to
// cuDNN while its atomic backward was 7% faster than Tessera's; with the
// backward's masks on edge tiles only, the 1.1B step at 1 x 8192 took 90.44
// ms on Tessera's atomic backward against 93.43 on cuDNN's, and 66.52
// against 67.12 on packed documents of about 1024 tokens ("AUTO's atomic
// backward").
bool AutoAttentionPicksCudnn(bool deterministic);

// Under document masking the engine runs a batch's documents as the
// entries of a ragged batch (cudnn_attention.h): capacity x longest
// document, each rounded up, so the plan's terms that grow with
// batch x sequence (D, the atomic dQ accumulator, the per-query-head dK
// and dV) can be a few times the whole sequences'. The engine takes a
// ragged plan only while its bound stays within this limit: the whole
// sequences' dS (deterministic), and 4x their linear terms. The memory
// estimate counts the limit for such jobs; past it, a batch runs our
// kernels.
int64_t CudnnDocumentsWorkspaceLimit(const CudnnAttentionShape& whole, bool deterministic);

}  // namespace tessera

#endif  // TESSERA_COMMON_CUDNN_ATTENTION_WORKSPACE_H_
