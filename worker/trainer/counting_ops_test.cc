// CountingOps counts what it should and forwards results unchanged, the
// grouped-query attention ops reach the engine with their n_kv_heads, and
// the fused RMSNorm-to-FP8 op reaches it with all its outputs.
#include "worker/trainer/counting_ops.h"

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/cpu/cpu_ops.h"
#include "worker/engine/cpu/reference_test_util.h"
#include "worker/ops/device_tensor.h"

namespace tessera {
namespace {

TEST(CountingOps, CountsAllocationsAndHostReadsAndForwards) {
  CountingOps ops(CreateCpuOps());
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal;
  std::vector<float> a(37), b(37), out(37, -1e30f);  // out poisoned
  for (int i = 0; i < 37; ++i) a[i] = normal(rng), b[i] = normal(rng);
  auto da = AllocateTensor(ops, DType::kFloat32, Shape{37});
  auto db = AllocateTensor(ops, DType::kFloat32, Shape{37});
  ASSERT_TRUE(da.ok() && db.ok());
  EXPECT_EQ(ops.allocations(), 2);
  ASSERT_TRUE(ops.CopyToDevice(da->desc.data, a.data(), 37 * 4, nullptr).ok());
  ASSERT_TRUE(ops.CopyToDevice(db->desc.data, b.data(), 37 * 4, nullptr).ok());
  ASSERT_TRUE(ops.Add(da->desc, db->desc, da->desc, nullptr).ok());
  EXPECT_EQ(ops.host_reads(), 0);
  ASSERT_TRUE(ops.CopyToHost(out.data(), da->desc.data, 37 * 4, nullptr).ok());
  EXPECT_EQ(ops.host_reads(), 1);
  for (int i = 0; i < 37; ++i) EXPECT_EQ(out[i], a[i] + b[i]);  // fp32 add is exact to compare
  ASSERT_TRUE(ops.CreateAdamPlan({}).ok());
  EXPECT_EQ(ops.allocations(), 3);
  // Errors come back unchanged.
  EXPECT_EQ(ops.Add(da->desc, MakeTensor(db->desc.data, DType::kFloat32, Shape{5}), da->desc,
                    nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CountingOps, ForwardsKvHeadCountsOfRopeAndAttention) {
  // nh 4 query heads sharing nkv 2 key/value heads of hd 8; B 1, S 5.
  const int nh = 4, nkv = 2, hd = 8, s = 5;
  const Shape qkv_shape{1, s, nh + 2 * nkv, hd}, out_shape{1, s, nh, hd}, lse_shape{1, nh, s};
  CountingOps counting(CreateCpuOps());
  std::unique_ptr<Ops> engine = CreateCpuOps();
  std::vector<uint16_t> qkv = testing::RandomBf16(qkv_shape.NumElements(), 7);
  std::vector<uint16_t> dout = testing::RandomBf16(out_shape.NumElements(), 8);
  struct Outputs {
    std::vector<uint16_t> qkv, out, grad;
    std::vector<float> lse;
  };
  auto run = [&](Ops& ops, Outputs& o) {
    o.qkv = qkv;
    o.out.assign(out_shape.NumElements(), 0xFFFF);  // NaN poison
    o.grad.assign(qkv_shape.NumElements(), 0xFFFF);
    o.lse.assign(lse_shape.NumElements(), NAN);
    const TensorDesc q = MakeTensor(o.qkv.data(), DType::kBFloat16, qkv_shape);
    const TensorDesc out = MakeTensor(o.out.data(), DType::kBFloat16, out_shape);
    const TensorDesc lse = MakeTensor(o.lse.data(), DType::kFloat32, lse_shape);
    const TensorDesc grad = MakeTensor(o.grad.data(), DType::kBFloat16, qkv_shape);
    ASSERT_TRUE(ops.RopeForward(q, nkv, 10000.f, nullptr).ok());
    ASSERT_TRUE(ops.AttentionForward(q, nkv, Ops::WholeSequences(), out, lse, nullptr).ok());
    ASSERT_TRUE(ops.AttentionBackward(MakeTensor(dout.data(), DType::kBFloat16, out_shape), q, nkv,
                                      Ops::WholeSequences(), out, lse, grad, nullptr)
                    .ok());
    ASSERT_TRUE(ops.RopeBackward(grad, nkv, 10000.f, nullptr).ok());
    // A count that does not divide nh comes back refused.
    EXPECT_EQ(ops.AttentionForward(q, 3, Ops::WholeSequences(), out, lse, nullptr).code(),
              absl::StatusCode::kInvalidArgument);
  };
  Outputs via_counting, direct;
  run(counting, via_counting);
  run(*engine, direct);
  EXPECT_EQ(via_counting.qkv, direct.qkv);
  EXPECT_EQ(via_counting.out, direct.out);
  EXPECT_EQ(via_counting.grad, direct.grad);
  EXPECT_EQ(via_counting.lse, direct.lse);  // NaN != NaN: unwritten lse fails
  EXPECT_NE(via_counting.qkv, qkv);         // RoPE rotated something
  for (uint16_t g : via_counting.grad) ASSERT_NE(g, 0xFFFF);
}

TEST(CountingOps, ForwardsRmsNormForwardQuantize) {
  const int t = 6, h = 16;
  CountingOps counting(CreateCpuOps());
  std::unique_ptr<Ops> engine = CreateCpuOps();
  const std::vector<float> x = testing::RandomFloats(t * h, 21, 2.f);
  const std::vector<float> w = testing::RandomFloats(h, 22);
  struct Outputs {
    std::vector<uint8_t> codes, codes_t;
    std::vector<float> rstd;
    float amax = 0.f, scale_inv = -1.f, scale_inv_t = -1.f;
  };
  float scale = 300.f;
  auto run = [&](Ops& ops, Outputs& o) {
    o.codes.assign(t * h, 0xFF);
    o.codes_t.assign(t * h, 0xFF);
    o.rstd.assign(t, NAN);
    TensorDesc out = MakeTensor(o.codes.data(), DType::kE4M3, Shape{t, h});
    out.scale = &scale;
    out.amax = &o.amax;
    out.scale_inv = &o.scale_inv;
    TensorDesc out_t = MakeTensor(o.codes_t.data(), DType::kE4M3, Shape{h, t});
    out_t.scale_inv = &o.scale_inv_t;
    const TensorDesc xd = MakeTensor(const_cast<float*>(x.data()), DType::kFloat32, Shape{t, h});
    const TensorDesc wd = MakeTensor(const_cast<float*>(w.data()), DType::kFloat32, Shape{h});
    const TensorDesc rd = MakeTensor(o.rstd.data(), DType::kFloat32, Shape{t});
    ASSERT_TRUE(ops.RmsNormForwardQuantize(xd, wd, 1e-5f, out, out_t, rd, nullptr).ok());
    // Errors come back unchanged.
    EXPECT_EQ(ops.RmsNormForwardQuantize(xd, wd, 1e-5f, out, out, rd, nullptr).code(),
              absl::StatusCode::kInvalidArgument);
  };
  Outputs via_counting, direct;
  run(counting, via_counting);
  run(*engine, direct);
  EXPECT_EQ(via_counting.codes, direct.codes);
  EXPECT_EQ(via_counting.codes_t, direct.codes_t);
  EXPECT_EQ(via_counting.rstd, direct.rstd);  // NaN != NaN: unwritten rstd fails
  EXPECT_EQ(via_counting.amax, direct.amax);
  EXPECT_GT(via_counting.amax, 0.f);
  EXPECT_EQ(via_counting.scale_inv, direct.scale_inv);
  EXPECT_EQ(via_counting.scale_inv_t, direct.scale_inv_t);
  EXPECT_EQ(via_counting.scale_inv, 1.f / scale);
  for (uint8_t c : via_counting.codes_t) ASSERT_NE(c, 0xFF);
  EXPECT_EQ(counting.allocations(), 0);
  EXPECT_EQ(counting.host_reads(), 0);
}

}  // namespace
}  // namespace tessera
