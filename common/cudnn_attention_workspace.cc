// See cudnn_attention_workspace.h.
#include "common/cudnn_attention_workspace.h"

namespace tessera {

namespace {

// The bound's terms: what grows with the square of the sequence, and what
// grows with batch x sequence.
struct WorkspaceTerms {
  int64_t square = 0, linear = 0;
};

WorkspaceTerms Terms(const CudnnAttentionShape& s, bool deterministic) {
  const int64_t padded = (s.seq + 63) / 64 * 64;  // cuDNN's dS rows and columns
  WorkspaceTerms t;
  if (deterministic) {
    t.square = s.batch * s.heads * padded * padded * 2;
  } else {
    t.linear = s.batch * s.heads * s.seq * s.head_dim * 4;
  }
  const int64_t per_query_head =
      s.heads != s.kv_heads ? s.batch * s.heads * s.seq * s.head_dim * 4 : 0;
  t.linear += s.batch * s.heads * s.seq * 4 + per_query_head;
  return t;
}

constexpr int64_t kCudnnSlackBytes = int64_t{16} << 20;

}  // namespace

int64_t CudnnAttentionWorkspaceBound(const CudnnAttentionShape& s, bool deterministic) {
  const WorkspaceTerms t = Terms(s, deterministic);
  return t.square + t.linear + kCudnnSlackBytes;
}

int64_t CudnnDocumentsWorkspaceLimit(const CudnnAttentionShape& whole, bool deterministic) {
  const WorkspaceTerms t = Terms(whole, deterministic);
  return t.square + 4 * t.linear + kCudnnSlackBytes;
}

bool AutoAttentionPicksCudnn(const CudnnAttentionShape& shape, bool deterministic) {
  return !deterministic ||
         CudnnAttentionWorkspaceBound(shape, deterministic) <= kAutoCudnnWorkspaceLimitBytes;
}

}  // namespace tessera
