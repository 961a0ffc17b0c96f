// Tessera's attention kernels give the same bits whatever order their
// blocks take the work in (needs a GPU, tag "gpu"). The forward runs its
// items in groups of K/V heads sized by the L2 (attention_item_order.h)
// and the one-pass backward its key blocks in groups sized by the SMs
// (flash_attention_backward_ordered.cu). The tests' shapes are small
// enough to fit one group on any GPU, so here the launchers are called
// directly with a tiny L2 (every K/V head its own group) and a single SM
// (one K/V head a group), and the outputs are compared bit for bit with
// the engine's, which attention_test holds to the CPU reference. Outputs
// start poisoned, so an item no block took shows as NaN.
#include <cmath>
#include <cstdint>
#include <vector>

#include <cuda_runtime.h>

#include "gtest/gtest.h"
#include "worker/engine/cuda/attention_test_inputs.h"
#include "worker/engine/cuda/engine_harness_for_test.h"
#include "worker/engine/cuda/kernels.h"

namespace tessera {
namespace testing {
namespace {

int64_t NaNs(const HostTensor& t) {
  int64_t n = 0;
  for (double v : AsDoubles(t)) n += std::isnan(v);
  return n;
}

struct Case {
  int b, s, nh, nkv, hd;
  int document_length;  // 0: whole sequences
};

class AttentionScheduleTest : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionScheduleTest, GroupedOrdersGiveTheEngineBits) {
  const Case c = GetParam();
  Ops* ops = SharedCudaOps();
  ASSERT_NE(ops, nullptr);
  const cuda::AttentionShape shape{c.b, c.s, c.nh, c.nkv, c.hd};
  const int64_t scratch_floats =
      cuda::FlashAttentionBackwardScratchFloats(shape, cuda::FlashBackwardForm::kOrderedDq);
  // 0-4: AttentionTensors (the engine's run); 5 out, 6 lse, 7 grad_qkv of
  // the grouped run; 8 the forward's counter; 9 the backward's scratch;
  // 10 document starts.
  std::vector<HostTensor> t = AttentionTensors(c.b, c.s, c.nh, c.nkv, c.hd, 11);
  t.push_back(Poisoned(DType::kBFloat16, Shape{c.b, c.s, c.nh, c.hd}));
  t.push_back(Poisoned(DType::kFloat32, Shape{c.b, c.nh, c.s}));
  t.push_back(Poisoned(DType::kBFloat16, Shape{c.b, c.s, c.nh + 2 * c.nkv, c.hd}));
  t.push_back(HostTensor::Of(DType::kInt32, Shape{1}));
  t.push_back(HostTensor::Of(DType::kFloat32, Shape{scratch_floats}));
  std::vector<int32_t> starts(static_cast<size_t>(c.b) * c.s);
  for (size_t i = 0; i < starts.size(); ++i) {
    const int pos = static_cast<int>(i % c.s);
    starts[i] = c.document_length > 0 ? pos / c.document_length * c.document_length : 0;
  }
  t.push_back(HostTensor::FromVector(DType::kInt32, Shape{c.b, c.s}, starts));
  const bool documents = c.document_length > 0;

  auto g = RunOn(*ops, t, [&](Ops& ops, std::vector<TensorDesc>& d) -> absl::Status {
    const AttentionDocuments docs =
        documents ? AttentionDocuments(d[10], CountDocuments(starts, c.s)) : Ops::WholeSequences();
    absl::Status st = ops.AttentionForward(d[0], c.nkv, docs, d[1], d[2], nullptr);
    if (st.ok()) st = ops.AttentionBackward(d[3], d[0], c.nkv, docs, d[1], d[2], d[4], nullptr);
    if (st.ok()) st = ops.Synchronize(nullptr);
    if (!st.ok()) return st;
    const int32_t* doc_starts = documents ? d[10].As<int32_t>() : nullptr;
    int sm_count = 0;
    if (cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess) {
      return absl::InternalError("cudaDeviceGetAttribute");
    }
    // 1 KiB of L2: every K/V head of every sequence its own group.
    st = cuda::LaunchFlashAttentionForward(shape, d[0].data, doc_starts, d[5].data,
                                           d[6].As<float>(), sm_count,
                                           /*l2_bytes=*/1024, d[8].As<int>(), nullptr);
    // One SM: one K/V head a group (documents keep one group).
    if (st.ok()) {
      st = cuda::LaunchFlashAttentionBackward(shape, d[3].data, d[0].data, doc_starts, d[5].data,
                                              d[6].As<float>(), d[7].data, d[9].As<float>(),
                                              cuda::FlashBackwardForm::kOrderedDq,
                                              /*sm_count=*/1, nullptr);
    }
    if (cudaDeviceSynchronize() != cudaSuccess) return absl::InternalError("synchronize");
    return st;
  });
  ASSERT_TRUE(g.ok()) << g.status();
  const std::vector<HostTensor>& r = *g;
  EXPECT_EQ(NaNs(r[1]), 0) << "the engine's out";
  EXPECT_EQ(NaNs(r[4]), 0) << "the engine's grad_qkv";
  EXPECT_EQ(BitDifferences(r[5], r[1]), 0) << "out";
  EXPECT_EQ(BitDifferences(r[6], r[2]), 0) << "lse";
  EXPECT_EQ(BitDifferences(r[7], r[4]), 0) << "grad_qkv";
  EXPECT_EQ(NaNs(r[5]) + NaNs(r[6]) + NaNs(r[7]), 0) << "unwritten outputs in the grouped run";
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionScheduleTest,
                         ::testing::Values(Case{2, 1000, 8, 4, 128, 0}, Case{3, 700, 6, 3, 64, 0},
                                           Case{1, 4100, 8, 2, 128, 0},
                                           Case{2, 1000, 8, 4, 128, 300}));

}  // namespace
}  // namespace testing
}  // namespace tessera
