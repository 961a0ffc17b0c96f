// The workspace bound and AUTO's rule against the workspaces cuDNN 9.14
// asked for on an H100 (cudnn_attention_test prints them; bench/RESULTS.md
// records them), so a change to the formula that no longer covers them
// fails here, without a GPU.
#include "common/cudnn_attention_workspace.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

struct Seen {
  CudnnAttentionShape shape;
  bool deterministic;
  int64_t bytes;  // cuDNN's workspace plus D (and the atomic form's dQ accumulator)
};

// The bound covers each workspace cuDNN asked for, and tightly: no more
// than the slack over it.
void ExpectBoundCoversTightly(absl::Span<const Seen> seen) {
  for (const Seen& s : seen) {
    const int64_t bound = CudnnAttentionWorkspaceBound(s.shape, s.deterministic);
    const std::string what = absl::StrCat(s.shape.batch, "x", s.shape.heads, "x", s.shape.seq,
                                          s.deterministic ? " deterministic" : " atomic");
    EXPECT_GE(bound, s.bytes) << what;
    EXPECT_LE(bound - s.bytes, int64_t{16} << 20) << what;
  }
}

TEST(CudnnAttentionWorkspace, BoundCoversWhatCudnnAskedFor) {
  const Seen seen[] = {
      {{8, 16, 16, 2048, 64}, true, 1074790656},   {{8, 16, 16, 2048, 64}, false, 68157696},
      {{4, 16, 16, 4096, 128}, true, 2148532480},  {{4, 16, 16, 4096, 128}, false, 135266560},
      {{1, 32, 8, 8192, 128}, true, 4430233856},   {{1, 32, 8, 8192, 128}, false, 269484288},
      {{1, 16, 4, 8192, 128}, true, 2215117056},   {{1, 16, 4, 8192, 128}, false, 134742272},
      {{1, 32, 8, 16384, 128}, true, 17450402048}, {{1, 32, 8, 16384, 128}, false, 538968320},
      {{2, 4, 4, 1000, 128}, true, 16809472},      {{2, 4, 4, 1000, 128}, false, 4128256},
  };
  ExpectBoundCoversTightly(seen);
}

// Ragged batches of documents (cudnn_attention_test prints what cuDNN 9.14
// asked for on an H200, planned as capacity x longest): the same bound
// covers them; and the documents' limit keeps the whole sequences' dS while
// allowing 4x their linear terms.
TEST(CudnnAttentionWorkspace, BoundCoversRaggedPlansAndTheDocumentsLimit) {
  const Seen seen[] = {
      {{8, 32, 8, 1024, 128}, true, 672141312},  {{8, 32, 8, 1024, 128}, false, 269488128},
      {{16, 32, 8, 4096, 128}, true, 18262005760}, {{16, 32, 8, 4096, 128}, false, 2155878400},
      {{64, 16, 16, 256, 64}, true, 135294720},  {{64, 16, 16, 256, 64}, false, 68185856},
      {{32, 16, 16, 512, 128}, true, 269499392}, {{32, 16, 16, 512, 128}, false, 135281664},
  };
  ExpectBoundCoversTightly(seen);
  // 8 documents of 1024 in one 8192-token sequence fit its limit; 11 of up
  // to 3000 (planned 16 x 4096) do not.
  const CudnnAttentionShape whole{1, 32, 8, 8192, 128};
  for (const bool deterministic : {true, false}) {
    const int64_t limit = CudnnDocumentsWorkspaceLimit(whole, deterministic);
    EXPECT_LE(CudnnAttentionWorkspaceBound({8, 32, 8, 1024, 128}, deterministic), limit);
    EXPECT_GE(limit, CudnnAttentionWorkspaceBound(whole, deterministic));
  }
  EXPECT_GT(CudnnAttentionWorkspaceBound({16, 32, 8, 4096, 128}, true),
            CudnnDocumentsWorkspaceLimit(whole, true));
  EXPECT_GT(CudnnAttentionWorkspaceBound({16, 32, 8, 4096, 128}, false),
            CudnnDocumentsWorkspaceLimit(whole, false));
}

TEST(CudnnAttentionWorkspace, KeyBandsOnlyWhereOneCallPassesTheLimitAndAsFewAsFit) {
  const auto bands = [](int64_t batch, int64_t seq) {
    return CudnnKeyBands({batch, 32, 8, seq, 128});
  };
  // One call fits: the Llama-3-8B shape at 8192 tokens (4.4 GB).
  EXPECT_EQ(bands(1, 8192), 1);
  EXPECT_EQ(bands(1, 2048), 1);
  // Past the limit, the fewest that fit: 16384 tokens in 2 bands keep
  // 8 GiB of dS and more; in 4, 4.3 GB.
  EXPECT_EQ(bands(1, 16384), 4);
  EXPECT_EQ(bands(2, 8192), 2);
  EXPECT_EQ(bands(4, 6144), 2);
  // None fits: the most the sequence splits into.
  EXPECT_EQ(bands(1, 131072), kMaxCudnnKeyBands);
  EXPECT_EQ(bands(8, 5000), 1);  // 5000 splits into no whole multiples of 64
  for (int64_t seq = 4096; seq <= 70000; seq += 97) {
    const CudnnAttentionShape shape{4, 32, 8, seq, 128};
    const int n = CudnnKeyBands(shape);
    ASSERT_GE(n, 1);
    ASSERT_LE(n, kMaxCudnnKeyBands);
    if (n == 1) continue;
    EXPECT_EQ(seq % (64 * n), 0) << seq;
    EXPECT_GT(CudnnAttentionWorkspaceBound(shape, true), kCudnnBandWorkspaceLimitBytes) << seq;
    // No fewer bands would have fitted.
    for (int fewer = 2; fewer < n; ++fewer) {
      if (seq % (64 * fewer) != 0) continue;
      EXPECT_GT(CudnnAttentionWorkspaceBound(shape, true, fewer), kCudnnBandWorkspaceLimitBytes)
          << seq << " in " << fewer;
    }
  }
}

TEST(CudnnAttentionWorkspace, BandsShrinkTheDeterministicWorkspaceByTheirCount) {
  const CudnnAttentionShape shape{1, 32, 8, 8192, 128};
  const int64_t whole = CudnnAttentionWorkspaceBound(shape, true);
  const int64_t four = CudnnAttentionWorkspaceBound(shape, true, 4);
  // dS: 4.3 GB whole, 1.07 GB for the first of four bands.
  EXPECT_GT(whole, int64_t{4} << 30);
  EXPECT_LT(four, int64_t{1300} << 20);
  // The atomic form has no bands.
  EXPECT_EQ(CudnnAttentionWorkspaceBound(shape, false, 4),
            CudnnAttentionWorkspaceBound(shape, false));
}

TEST(CudnnAttentionWorkspace, AutoRunsTesseraForBothBackwards) {
  EXPECT_FALSE(AutoAttentionPicksCudnn(/*deterministic=*/true));
  EXPECT_FALSE(AutoAttentionPicksCudnn(/*deterministic=*/false));
}

}  // namespace
}  // namespace tessera
