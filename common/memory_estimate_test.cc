// The shared memory estimate against sums done by hand for a small model:
// parameter shards at one rank (every parameter, 16 bytes of fp32 state plus
// its compute copy) and at two ranks (chunks padded to ceil(rows / 2)), no
// gathered buffers at one rank, and the GiB formatting. The full formula is
// held to the worker's own estimate by server/memory_admission_test.
#include "common/memory_estimate.h"

#include "common/cudnn_attention_workspace.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

v1::JobSpec Small() {
  v1::JobSpec spec;
  v1::ModelConfig* m = spec.mutable_model();
  m->set_vocab_size(11);  // odd, so two ranks pad
  m->set_d_model(4);
  m->set_n_layers(1);
  m->set_n_heads(2);
  m->set_ffn_dim(6);
  m->set_seq_len(8);
  spec.mutable_data()->set_micro_batch_size(2);
  spec.mutable_fp8()->set_disabled(true);  // bf16 compute copies: 2 bytes
  return spec;
}

TEST(MemoryEstimate, ParameterShardsAreEveryParametersStateAtOneRank) {
  // Block: norm 4, QKV 12 x 4, out 4 x 4, norm 4, gate+up 12 x 4, down 4 x 6;
  // outside: embedding 11 x 4, final norm 4, LM head 11 x 4.
  const int64_t params = 4 + 48 + 16 + 4 + 48 + 24 + 44 + 4 + 44;
  const RankMemoryEstimate e = EstimateRankMemory(Small(), 0, 1);
  EXPECT_EQ(e.parameter_shards, params * (16 + 2));
  EXPECT_EQ(e.gathered, 0);
  EXPECT_GT(e.activations, 0);
  EXPECT_GT(e.engine_workspace, int64_t{96} << 20);
  EXPECT_EQ(e.total(), e.trainer_bytes() + e.engine_workspace);
}

TEST(MemoryEstimate, TwoRanksHoldPaddedHalvesAndGatherBuffers) {
  // ceil(rows / 2) rows each: 2, 6x4, 2x4, 2, 6x4, 2x6; 6x4, 2, 6x4.
  const int64_t padded = 2 + 24 + 8 + 2 + 24 + 12 + 24 + 2 + 24;
  const RankMemoryEstimate rank0 = EstimateRankMemory(Small(), 0, 2);
  const RankMemoryEstimate rank1 = EstimateRankMemory(Small(), 1, 2);
  EXPECT_EQ(rank0.parameter_shards, padded * (16 + 2));
  EXPECT_EQ(rank1.parameter_shards, rank0.parameter_shards);  // padding makes them equal
  EXPECT_GT(rank0.gathered, 0);
}

// cuDNN's attention workspace is counted where the engine will take it:
// CUDA jobs under CUDNN, and under AUTO where its rule picks cuDNN (for
// neither backward today).
TEST(MemoryEstimate, CountsCudnnAttentionWorkspaceWhereTheEngineTakesIt) {
  v1::JobSpec spec = Small();
  spec.set_device_kind(v1::CUDA);
  spec.mutable_model()->set_seq_len(4096);
  const CudnnAttentionShape shape{2, 2, 2, 4096, 2};
  // The estimate of `job` with Tessera's kernels named.
  const auto tessera_of = [](v1::JobSpec job) {
    job.set_attention_kernels(v1::ATTENTION_KERNELS_TESSERA);
    return EstimateRankMemory(job, 0, 1).engine_workspace;
  };
  const int64_t tessera = tessera_of(spec);
  // AUTO runs both backwards on Tessera's kernels; CUDNN's atomic backward
  // counts cuDNN's workspace.
  EXPECT_EQ(EstimateRankMemory(spec, 0, 1).engine_workspace, tessera);
  spec.set_nondeterministic_attention_backward(true);
  EXPECT_EQ(EstimateRankMemory(spec, 0, 1).engine_workspace, tessera_of(spec));
  spec.set_attention_kernels(v1::ATTENTION_KERNELS_CUDNN);
  EXPECT_EQ(EstimateRankMemory(spec, 0, 1).engine_workspace,
            tessera + CudnnAttentionWorkspaceBound(shape, /*deterministic=*/false));
  spec.set_nondeterministic_attention_backward(false);
  EXPECT_EQ(EstimateRankMemory(spec, 0, 1).engine_workspace,
            tessera + CudnnAttentionWorkspaceBound(shape, /*deterministic=*/true,
                                                   CudnnKeyBands(shape)));
  EXPECT_EQ(CudnnKeyBands(shape), 1);  // one call fits
  // Documents run as cuDNN's ragged batches within their own limit, which
  // the estimate counts instead.
  v1::JobSpec documents = spec;
  documents.mutable_data()->set_document_masking(true);
  EXPECT_EQ(EstimateRankMemory(documents, 0, 1).engine_workspace,
            tessera + CudnnDocumentsWorkspaceLimit(shape, /*deterministic=*/true));
  EXPECT_GT(CudnnDocumentsWorkspaceLimit(shape, true), CudnnAttentionWorkspaceBound(shape, true));
  v1::JobSpec cpu = spec;
  cpu.set_device_kind(v1::CPU);
  EXPECT_EQ(EstimateRankMemory(cpu, 0, 1).engine_workspace, tessera);
  // CUDNN takes cuDNN's whatever the size, in key bands past their limit.
  spec.mutable_model()->set_seq_len(131072);  // dS in 8 bands: 17 GB
  spec.set_attention_kernels(v1::ATTENTION_KERNELS_TESSERA);
  const int64_t long_tessera = EstimateRankMemory(spec, 0, 1).engine_workspace;
  spec.set_attention_kernels(v1::ATTENTION_KERNELS_AUTO);
  EXPECT_EQ(EstimateRankMemory(spec, 0, 1).engine_workspace, long_tessera);
  spec.set_attention_kernels(v1::ATTENTION_KERNELS_CUDNN);
  EXPECT_GT(EstimateRankMemory(spec, 0, 1).engine_workspace, long_tessera + (int64_t{8} << 30));
}

// Tessera's one-pass attention backward keeps an fp32 dQ sum per head and
// query (queries padded to 128), two int32s per head and 64-query tile (its
// turn counter and completion-queue entry), one per tile and the queue's
// length (4 int32s): at head dims 64 and 128 on CUDA only, documents or
// not.
TEST(MemoryEstimate, CountsTheOnePassAttentionBackwardsSums) {
  v1::JobSpec spec = Small();
  spec.set_device_kind(v1::CUDA);
  spec.set_attention_kernels(v1::ATTENTION_KERNELS_TESSERA);
  spec.mutable_model()->set_seq_len(1000);  // padded to 1024: 16 tiles
  const int64_t heads = spec.model().n_heads(), batch = spec.data().micro_batch_size();
  auto workspace = [](const v1::JobSpec& s) { return EstimateRankMemory(s, 0, 1).engine_workspace; };
  auto on_cpu = [](v1::JobSpec s) {
    s.set_device_kind(v1::CPU);
    return s;
  };
  const int64_t tile_ints = (2 * heads + 1) * batch * 16 + 4;
  const int64_t sums = (heads * batch * 1024 * 128 + tile_ints) * 4;
  // The CUDA engine also pads D, lse and the document starts to 1024 rows.
  const int64_t padding = (2 * heads + 1) * batch * (1024 - 1000) * 4;
  v1::JobSpec head_dim_128 = spec;
  head_dim_128.mutable_model()->set_d_model(128 * heads);
  v1::JobSpec documents = head_dim_128;
  documents.mutable_data()->set_document_masking(true);
  EXPECT_EQ(workspace(head_dim_128) - workspace(on_cpu(head_dim_128)), sums + padding);
  EXPECT_EQ(workspace(documents) - workspace(on_cpu(documents)), sums + padding);
  v1::JobSpec head_dim_64 = spec;
  head_dim_64.mutable_model()->set_d_model(64 * heads);
  EXPECT_EQ(workspace(head_dim_64) - workspace(on_cpu(head_dim_64)),
            (heads * batch * 1024 * 64 + tile_ints) * 4 + padding);
  // Head dim 2 (Small's) runs two passes: only the padding is added.
  EXPECT_EQ(workspace(spec) - workspace(on_cpu(spec)), padding);
}

TEST(MemoryEstimate, FormatsGiB) {
  EXPECT_EQ(FormatBytesAsGiB(int64_t{3} << 29), "1.50 GiB");
  EXPECT_EQ(FormatBytesAsGiB(0), "0.00 GiB");
  RankMemoryEstimate e;
  e.parameter_shards = int64_t{1} << 30;
  EXPECT_EQ(e.ToString(),
            "1.00 GiB (parameter shards 1.00 GiB, gathered 0.00 GiB, activations 0.00 GiB, "
            "scratch 0.00 GiB, engine workspace 0.00 GiB)");
}

}  // namespace
}  // namespace tessera
