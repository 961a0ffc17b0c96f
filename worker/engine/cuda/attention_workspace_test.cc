// The memory estimate's count of Tessera's attention scratch
// (common/memory_estimate.h, TesseraAttentionWorkspaceOfJob) against what
// the CUDA engine asks for (kernels.h, FlashAttentionBackwardScratchFloats),
// for the shapes a job can have: head dims 64 and 128, sequences that are
// and are not multiples of the kernels' 128-query padding, grouped-query
// heads, batches of one and more. Both sides compute the bytes
// independently (the estimate cannot link the engine), so this is where a
// change to one without the other shows. Needs no GPU: both are host
// arithmetic.
#include <cstdint>

#include "common/memory_estimate.h"
#include "gtest/gtest.h"
#include "proto/tessera/v1/job.pb.h"
#include "worker/engine/cuda/kernels.h"

namespace tessera {
namespace {

struct Case {
  int64_t batch, seq;
  int heads, kv_heads, head_dim;
};

v1::JobSpec CudaJob(const Case& c) {
  v1::JobSpec spec;
  spec.set_device_kind(v1::CUDA);
  v1::ModelConfig* m = spec.mutable_model();
  m->set_d_model(c.heads * c.head_dim);
  m->set_n_heads(c.heads);
  m->set_n_kv_heads(c.kv_heads);
  m->set_seq_len(c.seq);
  spec.mutable_data()->set_micro_batch_size(c.batch);
  return spec;
}

TEST(AttentionWorkspace, TheEstimateCountsWhatTheEngineAsksFor) {
  for (const Case& c : {Case{1, 8192, 32, 8, 128}, Case{2, 1000, 16, 4, 128},
                        Case{1, 16384, 16, 4, 128}, Case{3, 129, 8, 8, 128},
                        Case{8, 2048, 16, 16, 64}, Case{1, 1000, 4, 2, 64}}) {
    const cuda::AttentionShape shape{c.batch, c.seq, c.heads, c.kv_heads, c.head_dim};
    for (bool documents : {false, true}) {
      v1::JobSpec spec = CudaJob(c);
      spec.mutable_data()->set_document_masking(documents);
      for (bool atomic : {false, true}) {
        spec.set_nondeterministic_attention_backward(atomic);
        const cuda::FlashBackwardForm form =
            atomic ? cuda::FlashBackwardForm::kAtomicDq : cuda::FlashBackwardForm::kOrderedDq;
        EXPECT_EQ(TesseraAttentionWorkspaceOfJob(AttentionOfJob(spec)),
                  cuda::FlashAttentionBackwardScratchFloats(shape, form) * 4)
            << c.batch << " x " << c.seq << ", " << c.heads << "/" << c.kv_heads << " heads of "
            << c.head_dim << (documents ? ", documents" : "") << (atomic ? ", atomic" : "");
      }
    }
  }
}

// The two-pass form, which benchmarks and tests can ask for, never needs
// more than the estimate counts.
TEST(AttentionWorkspace, TwoPassesNeedNoMoreThanTheEstimate) {
  for (const Case& c : {Case{1, 8192, 32, 8, 128}, Case{2, 1000, 16, 4, 64}}) {
    const cuda::AttentionShape shape{c.batch, c.seq, c.heads, c.kv_heads, c.head_dim};
    EXPECT_LE(cuda::FlashAttentionBackwardScratchFloats(shape, cuda::FlashBackwardForm::kTwoPass) * 4,
              TesseraAttentionWorkspaceOfJob(AttentionOfJob(CudaJob(c))));
  }
}

TEST(AttentionWorkspace, CpuJobsCountNoCudaScratch) {
  v1::JobSpec spec = CudaJob({1, 8192, 32, 8, 128});
  spec.set_device_kind(v1::CPU);
  EXPECT_EQ(TesseraAttentionWorkspaceOfJob(AttentionOfJob(spec)), 0);
}

}  // namespace
}  // namespace tessera
