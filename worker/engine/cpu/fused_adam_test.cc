// FusedAdam against textbook AdamW in fp64 over several steps, with FP8 and
// bf16 shards, weight decay on and off, an empty shard, the grad scale, the
// FP8 re-quantization and amax; plus GradSumSquares and ComputeGradScale.
#include "worker/engine/cpu/fused_adam.h"

#include <cmath>

#include "gtest/gtest.h"
#include "worker/engine/cpu/fp8.h"
#include "worker/engine/cpu/reference_test_util.h"

namespace tessera {
namespace cpu {
namespace {

using namespace tessera::testing;

struct HostShard {
  std::vector<float> master, grad, m, v;
  std::vector<uint8_t> fp8;
  std::vector<uint16_t> bf16;
  float scale = 64.f, scale_inv = 0.f, amax = 0.f;
  bool use_fp8 = true, decay = true;

  AdamShard View() {
    const int64_t n = master.size();
    AdamShard s;
    s.master = MakeTensor(master.data(), DType::kFloat32, Shape{n});
    s.grad = MakeTensor(grad.data(), DType::kFloat32, Shape{n});
    s.exp_avg = MakeTensor(m.data(), DType::kFloat32, Shape{n});
    s.exp_avg_sq = MakeTensor(v.data(), DType::kFloat32, Shape{n});
    s.fp8 = use_fp8 ? MakeTensor(fp8.data(), DType::kE4M3, Shape{n})
                    : MakeTensor(bf16.data(), DType::kBFloat16, Shape{n});
    if (use_fp8) {
      s.fp8.scale = &scale;
      s.fp8.scale_inv = &scale_inv;
    }
    s.fp8.amax = &amax;
    s.apply_weight_decay = decay;
    return s;
  }
};

HostShard MakeShard(int n, uint32_t seed, bool use_fp8, bool decay) {
  HostShard s;
  s.master = RandomFloats(n, seed, 0.1f);
  s.grad.resize(n);
  s.m.assign(n, 0.f);
  s.v.assign(n, 0.f);
  s.fp8.assign(n, 0xAA);
  s.bf16.assign(n, 0xFFFF);
  s.use_fp8 = use_fp8;
  s.decay = decay;
  return s;
}

TEST(FusedAdam, MatchesTextbookAdamWOverSeveralSteps) {
  std::vector<HostShard> shards;
  shards.push_back(MakeShard(37, 1, true, true));
  shards.push_back(MakeShard(0, 2, true, true));  // an empty shard
  shards.push_back(MakeShard(16, 3, false, false));
  shards.push_back(MakeShard(5, 4, true, false));
  std::vector<std::vector<double>> w, m, v;
  for (HostShard& s : shards) {
    w.emplace_back(s.master.begin(), s.master.end());
    m.emplace_back(s.master.size(), 0.0);
    v.emplace_back(s.master.size(), 0.0);
  }
  std::vector<AdamShard> views;
  for (HostShard& s : shards) views.push_back(s.View());
  auto plan = CreateAdamPlan(views);
  ASSERT_TRUE(plan.ok()) << plan.status();
  AdamHyper hp;
  hp.lr = 1e-2f;
  hp.beta1 = 0.9f;
  hp.beta2 = 0.95f;
  hp.eps = 1e-8f;
  hp.weight_decay = 0.1f;
  const float grad_scale = 0.5f;
  for (int step = 1; step <= 5; ++step) {
    for (size_t k = 0; k < shards.size(); ++k) {
      shards[k].grad = RandomFloats(shards[k].master.size(), 100 * step + k, 2.0f);
      shards[k].amax = 0.f;
    }
    // The views point at the vectors' storage, which RandomFloats replaced.
    views.clear();
    for (HostShard& s : shards) views.push_back(s.View());
    plan = CreateAdamPlan(views);
    ASSERT_TRUE(plan.ok());
    hp.step = step;
    ASSERT_TRUE(FusedAdam(**plan, hp, &grad_scale).ok());
    for (size_t k = 0; k < shards.size(); ++k) {
      double amax = 0;
      for (size_t i = 0; i < w[k].size(); ++i) {
        double g = shards[k].grad[i] * 0.5;
        m[k][i] = 0.9 * m[k][i] + 0.1 * g;
        v[k][i] = 0.95 * v[k][i] + 0.05 * g * g;
        double mh = m[k][i] / (1 - std::pow(0.9, step)), vh = v[k][i] / (1 - std::pow(0.95, step));
        w[k][i] -= 1e-2 * (mh / (std::sqrt(vh) + 1e-8) + (shards[k].decay ? 0.1 * w[k][i] : 0.0));
        amax = std::max(amax, std::fabs(w[k][i]));
      }
      if (w[k].empty()) continue;
      EXPECT_LT(RelativeError(shards[k].master, w[k]), 1e-5) << "shard " << k << " step " << step;
      EXPECT_LT(RelativeError(shards[k].m, m[k]), 1e-5);
      EXPECT_LT(RelativeError(shards[k].v, v[k]), 1e-5);
      EXPECT_NEAR(shards[k].amax, amax, 1e-5 * amax);
      for (size_t i = 0; i < w[k].size(); ++i) {
        if (shards[k].use_fp8) {
          ASSERT_EQ(shards[k].fp8[i], EncodeE4M3(shards[k].master[i] * shards[k].scale));
        } else {
          ASSERT_EQ(shards[k].bf16[i], FloatToBf16(shards[k].master[i]));
        }
      }
      if (shards[k].use_fp8) EXPECT_EQ(shards[k].scale_inv, 1.0f / shards[k].scale);
    }
  }
}

TEST(FusedAdam, PlanRejectsMismatchedShards) {
  HostShard s = MakeShard(8, 5, true, true);
  AdamShard view = s.View();
  view.exp_avg.shape = Shape{7};
  auto plan = CreateAdamPlan({view});
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("shard 0"), std::string::npos);
  AdamShard no_scale = s.View();
  no_scale.fp8.scale = nullptr;
  EXPECT_FALSE(CreateAdamPlan({no_scale}).ok());
}

TEST(GradScale, SumSquaresNormAndClipping) {
  HostShard a = MakeShard(10, 6, true, true), b = MakeShard(3, 7, false, true);
  a.grad = RandomFloats(10, 8);
  b.grad = RandomFloats(3, 9);
  auto plan = CreateAdamPlan({a.View(), b.View()});
  ASSERT_TRUE(plan.ok());
  float sum_sq = -1;
  ASSERT_TRUE(GradSumSquares(**plan, &sum_sq).ok());
  double want = 0;
  for (float g : a.grad) want += g * g;
  for (float g : b.grad) want += g * g;
  EXPECT_NEAR(sum_sq, want, 1e-5 * want);
  float tokens = 4, norm = 0, scale = 0;
  ASSERT_TRUE(ComputeGradScale(&sum_sq, &tokens, 0.f, &norm, &scale).ok());
  EXPECT_NEAR(norm, std::sqrt(want) / 4, 1e-5);
  EXPECT_FLOAT_EQ(scale, 0.25f);  // no clipping
  ASSERT_TRUE(ComputeGradScale(&sum_sq, &tokens, norm / 2, &norm, &scale).ok());
  EXPECT_NEAR(scale, 0.25f * 0.5f, 1e-5);  // clipped to half
  ASSERT_TRUE(ComputeGradScale(&sum_sq, &tokens, norm * 2, &norm, &scale).ok());
  EXPECT_FLOAT_EQ(scale, 0.25f);  // threshold above the norm: no clipping
}

}  // namespace
}  // namespace cpu
}  // namespace tessera
