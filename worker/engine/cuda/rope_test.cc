// RoPE on the GPU against the CPU reference (needs a GPU, tag "gpu"), on the
// packed grouped-query layout qkv [B, S, nh + 2 nkv, hd].
// Tolerance: 1e-2 relative L2 for the bf16 results (one rounding after fp32
// math whose sinf/cosf/powf may differ in the last bits), and the value
// heads must come back bit-identical. Backward must undo forward to bf16
// noise. Head dims whose half is a multiple of 8 take the vectorized fast
// path (with rotated head counts that do and do not fill its groups of 8
// heads); head dims 2, 6, 8 and 24 and a misaligned view take the general
// kernel.
#include <algorithm>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/cuda/engine_harness_for_test.h"

namespace tessera {
namespace testing {
namespace {

using Param = std::tuple<int, int, int, int, int, float>;  // B, S, nh, nkv, hd, theta

class RopeTest : public CpuVsCudaTest, public ::testing::WithParamInterface<Param> {};

TEST_P(RopeTest, ForwardAndBackwardMatchCpu) {
  const auto [b, s, nh, nkv, hd, theta] = GetParam();
  const Shape shape{b, s, nh + 2 * nkv, hd};
  std::vector<HostTensor> t = {RandomTensor(DType::kBFloat16, shape, 1, 2.f),
                               RandomTensor(DType::kBFloat16, shape, 2, 2.f)};
  auto [c, g] = Both(t, [theta = theta, nkv = nkv](Ops& ops, std::vector<TensorDesc>& d) {
    absl::Status st = ops.RopeForward(d[0], nkv, theta, nullptr);
    if (st.ok()) st = ops.RopeBackward(d[1], nkv, theta, nullptr);
    return st;
  });
  EXPECT_LT(Error(g[0], c[0]), 1e-2) << "forward";
  EXPECT_LT(Error(g[1], c[1]), 1e-2) << "backward";
  // The value heads (the last nkv of every token) are untouched.
  const size_t head = static_cast<size_t>(hd) * 2, token_bytes = (nh + 2 * nkv) * head;
  for (int64_t token = 0; token < int64_t{b} * s; ++token) {
    const size_t v_begin = token * token_bytes + (nh + nkv) * head;
    ASSERT_TRUE(std::equal(g[0].bytes.begin() + v_begin,
                           g[0].bytes.begin() + v_begin + nkv * head,
                           t[0].bytes.begin() + v_begin))
        << "token " << token;
  }
  // Backward of forward is the identity (up to two bf16 roundings).
  auto round_trip =
      RunOn(gpu(), {t[0]}, [theta = theta, nkv = nkv](Ops& ops, std::vector<TensorDesc>& d) {
        absl::Status st = ops.RopeForward(d[0], nkv, theta, nullptr);
        if (st.ok()) st = ops.RopeBackward(d[0], nkv, theta, nullptr);
        return st;
      });
  ASSERT_TRUE(round_trip.ok()) << round_trip.status();
  EXPECT_LT(Error((*round_trip)[0], t[0]), 1e-2);
}

INSTANTIATE_TEST_SUITE_P(Shapes, RopeTest,
                         ::testing::Values(Param{1, 1, 1, 1, 2, 10000.f},
                                           Param{2, 37, 3, 3, 64, 10000.f},
                                           Param{1, 300, 8, 2, 128, 500000.f},
                                           Param{3, 5, 4, 1, 6, 10.f},
                                           Param{0, 4, 2, 2, 8, 10000.f},
                                           // The training layout: 32 of 48 heads rotated.
                                           Param{2, 512, 16, 16, 64, 10000.f},
                                           // GQA at head dim 128: 20 rotated heads.
                                           Param{2, 256, 16, 4, 128, 500000.f},
                                           Param{1, 4096, 4, 2, 64, 10000.f},
                                           Param{2, 19, 2, 1, 16, 10000.f},
                                           Param{1, 33, 2, 1, 48, 10000.f},
                                           Param{2, 9, 3, 1, 24, 10000.f}));

// qkv one element into its buffer: not 16-byte aligned, so the general
// kernel runs at a head dim the fast path would take.
TEST_F(CpuVsCudaTest, RopeOnMisalignedViewMatchesCpu) {
  const Shape shape{2, 40, 8, 64};  // nh 4, nkv 2
  const int nkv = 2;
  const float theta = 10000.f;
  const Shape buffer{shape.NumElements() + 1};
  std::vector<HostTensor> t = {RandomTensor(DType::kBFloat16, buffer, 3, 2.f),
                               RandomTensor(DType::kBFloat16, buffer, 4, 2.f)};
  auto [c, g] = Both(t, [&](Ops& ops, std::vector<TensorDesc>& d) {
    auto view = [&](const TensorDesc& whole) {
      return MakeTensor(whole.As<uint16_t>() + 1, DType::kBFloat16, shape);
    };
    absl::Status st = ops.RopeForward(view(d[0]), nkv, theta, nullptr);
    if (st.ok()) st = ops.RopeBackward(view(d[1]), nkv, theta, nullptr);
    return st;
  });
  EXPECT_LT(Error(g[0], c[0]), 1e-2) << "forward";
  EXPECT_LT(Error(g[1], c[1]), 1e-2) << "backward";
}

TEST_F(CpuVsCudaTest, RopeRejectsKvHeadsThatDoNotDivide) {
  std::vector<HostTensor> t = {RandomTensor(DType::kBFloat16, Shape{1, 2, 7, 8}, 1)};
  auto g = RunOn(gpu(), t, [](Ops& ops, std::vector<TensorDesc>& d) {
    return ops.RopeForward(d[0], 2, 10000.f, nullptr);  // 7 = nh + 4 -> nh 3, not a multiple of 2
  });
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << g.status();
}

}  // namespace
}  // namespace testing
}  // namespace tessera
