// CountingOps counts what it should and forwards results unchanged.
#include "worker/trainer/counting_ops.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/cpu/cpu_ops.h"
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

}  // namespace
}  // namespace tessera
