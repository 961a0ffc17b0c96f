// See cudnn_attention_workspace.h.
#include "common/cudnn_attention_workspace.h"

namespace tessera {

int64_t CudnnAttentionWorkspaceBound(const CudnnAttentionShape& s, bool deterministic) {
  const int64_t padded = (s.seq + 63) / 64 * 64;  // cuDNN's dS rows and columns
  const int64_t kept = deterministic ? s.batch * s.heads * padded * padded * 2
                                     : s.batch * s.heads * s.seq * s.head_dim * 4;
  const int64_t per_query_head =
      s.heads != s.kv_heads ? s.batch * s.heads * s.seq * s.head_dim * 4 : 0;
  return kept + s.batch * s.heads * s.seq * 4 + per_query_head + (int64_t{16} << 20);
}

bool AutoAttentionPicksCudnn(const CudnnAttentionShape& shape, bool deterministic) {
  return !deterministic ||
         CudnnAttentionWorkspaceBound(shape, deterministic) <= kAutoCudnnWorkspaceLimitBytes;
}

}  // namespace tessera
