// RoPE on the GPU against the CPU reference (needs a GPU, tag "gpu"), on the
// packed grouped-query layout qkv [B, S, nh + 2 nkv, hd].
// Tolerance: 1e-2 relative L2 for the bf16 results (one rounding after fp32
// math whose sinf/cosf/powf may differ in the last bits), and the value
// heads must come back bit-identical. Backward must undo forward to bf16
// noise.
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
                                           Param{0, 4, 2, 2, 8, 10000.f}));

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
