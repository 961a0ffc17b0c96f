// See cudnn_attention_workspace.h.
#include "common/cudnn_attention_workspace.h"

#include <algorithm>

namespace tessera {

namespace {

// The bound's terms: what grows with the square of the sequence, and what
// grows with batch x sequence.
struct WorkspaceTerms {
  int64_t square = 0, linear = 0;
};

int64_t Padded(int64_t rows) { return (rows + 63) / 64 * 64; }  // cuDNN's dS rows and columns

WorkspaceTerms Terms(const CudnnAttentionShape& s, bool deterministic, int bands) {
  const int64_t band = s.seq / bands;  // the keys of one call
  WorkspaceTerms t;
  if (deterministic) {
    // The first band's: all of the queries.
    t.square = s.batch * s.heads * Padded(s.seq) * Padded(band) * 2;
  } else {
    t.linear = s.batch * s.heads * s.seq * s.head_dim * 4;
  }
  const int64_t per_query_head =
      s.heads != s.kv_heads ? s.batch * s.heads * band * s.head_dim * 4 : 0;
  t.linear += s.batch * s.heads * s.seq * 4 + per_query_head;
  if (bands > 1) {
    // Every band's partial dQ: S - c S/n rows for c < n.
    const int64_t partial_rows = band * bands * (bands + 1) / 2;
    t.linear += s.batch * partial_rows * s.heads * s.head_dim * 2;
  }
  return t;
}

constexpr int64_t kCudnnSlackBytes = int64_t{16} << 20;

}  // namespace

int CudnnKeyBands(const CudnnAttentionShape& shape) {
  if (CudnnAttentionWorkspaceBound(shape, /*deterministic=*/true) <=
      kCudnnBandWorkspaceLimitBytes) {
    return 1;
  }
  int most = 1;  // the most bands the sequence splits into
  for (int n = 2; n <= kMaxCudnnKeyBands; ++n) {
    if (shape.seq % (int64_t{64} * n) != 0) continue;
    if (CudnnAttentionWorkspaceBound(shape, true, n) <= kCudnnBandWorkspaceLimitBytes) return n;
    most = n;
  }
  return most;
}

int64_t CudnnAttentionWorkspaceBound(const CudnnAttentionShape& s, bool deterministic,
                                     int key_bands) {
  const WorkspaceTerms t = Terms(s, deterministic, deterministic ? key_bands : 1);
  return t.square + t.linear + kCudnnSlackBytes;
}

int64_t CudnnDocumentsWorkspaceLimit(const CudnnAttentionShape& whole, bool deterministic) {
  // Documents run in no bands; their allowance is the whole sequences' dS.
  const WorkspaceTerms t = Terms(whole, deterministic, 1);
  return t.square + 4 * t.linear + kCudnnSlackBytes;
}

bool AutoAttentionPicksCudnn(bool /*deterministic*/) {
  return false;  // Tessera's kernels for both forms (the header says why)
}

}  // namespace tessera
