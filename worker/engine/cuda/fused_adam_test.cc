// Multi-tensor FusedAdam, GradSumSquares and ComputeGradScale on the GPU
// against the CPU reference (needs a GPU, tag "gpu").
// Tolerances: master, m, v and amax 1e-6 relative (nvcc contracts a*b+c
// into FMAs, so the last bit of a master may differ); the e4m3/bf16 shard
// is written from that master, so each element must be equal or one code
// apart (a master differing in its last bit may cross a rounding boundary),
// and at least 99.9% equal. Sum of squares: 1e-6 against an fp64 sum (the
// GPU reduces in two levels), 1e-4 against the CPU engine, whose one running
// fp32 sum drifts (5e-5 seen over 300k elements). Grad norm and scale 1e-6, with and without clipping.
// Shard tables mix FP8 and bf16 shards, ragged sizes, and empty shards.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/cuda/engine_harness_for_test.h"

namespace tessera {
namespace testing {
namespace {

constexpr int kPerShard = 8;  // host tensors per shard in the test layout

class FusedAdamTest : public CpuVsCudaTest,
                      public ::testing::WithParamInterface<std::vector<int64_t>> {};

TEST_P(FusedAdamTest, MatchesCpu) {
  const std::vector<int64_t> sizes = GetParam();
  const size_t k = sizes.size();
  std::vector<HostTensor> t;
  for (size_t i = 0; i < k; ++i) {
    const int64_t n = sizes[i];
    const bool fp8 = i % 2 == 0;
    t.push_back(RandomTensor(DType::kFloat32, Shape{n}, 40 + i, 0.1f));   // master
    t.push_back(RandomTensor(DType::kFloat32, Shape{n}, 50 + i, 3.0f));   // grad
    t.push_back(RandomTensor(DType::kFloat32, Shape{n}, 60 + i, 0.01f));  // m
    std::vector<float> v = RandomFloats(n, 70 + i, 0.01f);
    for (float& x : v) x = x * x;
    t.push_back(HostTensor::FromVector(DType::kFloat32, Shape{n}, v));    // v >= 0
    t.push_back(Poisoned(fp8 ? DType::kE4M3 : DType::kBFloat16, Shape{n}));
    t.push_back(Scalar(fp8 ? 300.f : 1.f));  // scale
    t.push_back(Scalar(-1.f));               // scale_inv
    t.push_back(Scalar(0.01f));              // amax, max-combined
  }
  t.push_back(Scalar(0.25f));  // grad_scale
  t.push_back(Scalar(-1.f));   // sum of squares
  auto [c, g] = Both(t, [k](Ops& ops, std::vector<TensorDesc>& d) {
    std::vector<AdamShard> shards;
    for (size_t i = 0; i < k; ++i) {
      AdamShard s;
      s.master = d[kPerShard * i];
      s.grad = d[kPerShard * i + 1];
      s.exp_avg = d[kPerShard * i + 2];
      s.exp_avg_sq = d[kPerShard * i + 3];
      s.fp8 = d[kPerShard * i + 4];
      if (s.fp8.dtype == DType::kE4M3) {
        s.fp8.scale = d[kPerShard * i + 5].As<float>();
        s.fp8.scale_inv = d[kPerShard * i + 6].As<float>();
      }
      s.fp8.amax = d[kPerShard * i + 7].As<float>();
      s.apply_weight_decay = i % 3 != 2;  // both branches
      shards.push_back(s);
    }
    auto plan = ops.CreateAdamPlan(shards);
    if (!plan.ok()) return plan.status();
    absl::Status st = ops.GradSumSquares(**plan, d[kPerShard * k + 1].As<float>(), nullptr);
    AdamHyper hp;
    hp.lr = 1e-2f;
    hp.weight_decay = 0.1f;
    for (int step = 1; step <= 3 && st.ok(); ++step) {
      hp.step = step;
      st = ops.FusedAdam(**plan, hp, d[kPerShard * k].As<float>(), nullptr);
    }
    return st;
  });
  double exact_sum_sq = 0;
  for (size_t i = 0; i < k; ++i) {
    for (float x : t[kPerShard * i + 1].As<float>()) exact_sum_sq += double{x} * x;
  }
  const float gpu_sum_sq = g[kPerShard * k + 1].As<float>()[0];
  EXPECT_LE(std::fabs(gpu_sum_sq - exact_sum_sq), 1e-6 * exact_sum_sq + 1e-30) << "sum of squares";
  EXPECT_LT(Error(g[kPerShard * k + 1], c[kPerShard * k + 1]), 1e-4) << "sum of squares vs cpu";
  for (size_t i = 0; i < k; ++i) {
    const size_t base = kPerShard * i;
    for (int j : {0, 2, 3, 7}) {
      EXPECT_LT(Error(g[base + j], c[base + j]), 1e-6) << "shard " << i << " tensor " << j;
    }
    if (i % 2 == 0) {
      EXPECT_EQ(g[base + 6].bytes, c[base + 6].bytes) << "scale_inv of shard " << i;
    }
    const HostTensor& gs = g[base + 4];
    const HostTensor& cs = c[base + 4];
    const size_t width = DTypeSize(cs.dtype);
    int64_t equal = 0;
    for (int64_t e = 0; e < sizes[i]; ++e) {
      int gv = 0, cv = 0;
      std::memcpy(&gv, gs.bytes.data() + e * width, width);
      std::memcpy(&cv, cs.bytes.data() + e * width, width);
      equal += gv == cv;
      ASSERT_LE(std::abs(gv - cv), 1) << "shard " << i << " element " << e;
    }
    EXPECT_GE(equal, sizes[i] - sizes[i] / 1000) << "shard " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    ShardTables, FusedAdamTest,
    ::testing::Values(std::vector<int64_t>{5000, 0, 4097, 1, 9000},
                      std::vector<int64_t>{0}, std::vector<int64_t>{0, 0, 0},
                      std::vector<int64_t>{1, 4096, 4095, 12289, 0, 33},
                      std::vector<int64_t>{300000, 7}));

// A replayed training step passes lr and the bias corrections through
// device memory (AdamHyper::step_values): the update must be the one the
// same values passed as arguments give, bit for bit.
TEST_F(CpuVsCudaTest, FusedAdamStepValuesInDeviceMemoryGiveTheSameBits) {
  const int64_t n = 4099;  // one ragged shard: vector body and scalar tail
  std::vector<HostTensor> t = {
      RandomTensor(DType::kFloat32, Shape{n}, 81, 0.1f),
      RandomTensor(DType::kFloat32, Shape{n}, 82, 3.0f),
      HostTensor::FromVector(DType::kFloat32, Shape{n}, std::vector<float>(n, 0.f)),
      HostTensor::FromVector(DType::kFloat32, Shape{n}, std::vector<float>(n, 0.f)),
      Poisoned(DType::kE4M3, Shape{n}), Scalar(200.f), Scalar(-1.f), Scalar(0.f), Scalar(0.5f),
      Poisoned(DType::kFloat32, Shape{3})};
  auto run = [](bool from_memory) {
    return [from_memory](Ops& ops, std::vector<TensorDesc>& d) -> absl::Status {
      AdamShard s;
      s.master = d[0];
      s.grad = d[1];
      s.exp_avg = d[2];
      s.exp_avg_sq = d[3];
      s.fp8 = d[4];
      s.fp8.scale = d[5].As<float>();
      s.fp8.scale_inv = d[6].As<float>();
      s.fp8.amax = d[7].As<float>();
      auto plan = ops.CreateAdamPlan({s});
      if (!plan.ok()) return plan.status();
      AdamHyper hp;
      hp.weight_decay = 0.1f;
      for (int step = 1; step <= 3; ++step) {
        hp.lr = 2e-3f * static_cast<float>(step);
        hp.step = step;
        AdamHyper passed = hp;
        if (from_memory) {
          const AdamStepValues v = StepValuesFor(hp);
          const float values[3] = {v.lr, v.bias_correction1, v.bias_correction2};
          absl::Status st = ops.CopyToDevice(d[9].data, values, sizeof(values), nullptr);
          if (!st.ok()) return st;
          passed.lr = -1.f;  // must not be used
          passed.step = 0;
          passed.step_values = d[9].As<float>();
        }
        absl::Status st = ops.FusedAdam(**plan, passed, d[8].As<float>(), nullptr);
        if (!st.ok()) return st;
      }
      return ops.Synchronize(nullptr);
    };
  };
  auto by_value = RunOn(gpu(), t, run(false));
  auto from_memory = RunOn(gpu(), t, run(true));
  auto cpu_from_memory = RunOn(cpu(), t, run(true));
  ASSERT_TRUE(by_value.ok()) << by_value.status();
  ASSERT_TRUE(from_memory.ok()) << from_memory.status();
  ASSERT_TRUE(cpu_from_memory.ok()) << cpu_from_memory.status();
  for (int j : {0, 2, 3, 4, 6, 7}) {
    EXPECT_EQ((*by_value)[j].bytes, (*from_memory)[j].bytes) << "tensor " << j;
  }
  EXPECT_LT(Error((*from_memory)[0], (*cpu_from_memory)[0]), 1e-6) << "master vs cpu";
}

TEST_F(CpuVsCudaTest, ComputeGradScaleMatchesCpu) {
  for (float max_norm : {0.f, 1.0f, 1e6f}) {
    std::vector<HostTensor> t = {Scalar(1234.5f), Scalar(96.f), Scalar(-1.f), Scalar(-1.f)};
    auto [c, g] = Both(t, [max_norm](Ops& ops, std::vector<TensorDesc>& d) {
      return ops.ComputeGradScale(d[0].As<float>(), d[1].As<float>(), max_norm, d[2].As<float>(),
                                  d[3].As<float>(), nullptr);
    });
    EXPECT_LT(Error(g[2], c[2]), 1e-6) << "grad_norm, max_norm " << max_norm;
    EXPECT_LT(Error(g[3], c[3]), 1e-6) << "grad_scale, max_norm " << max_norm;
  }
}

}  // namespace
}  // namespace testing
}  // namespace tessera
