// FusedAdam against textbook AdamW in fp64 over several steps, with FP8 and
// bf16 shards, weight decay on and off, an empty shard, the grad scale, the
// FP8 re-quantization and amax; plus GradSumSquares and ComputeGradScale.
#include "worker/engine/cpu/fused_adam.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

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
      if (shards[k].use_fp8) {
        EXPECT_EQ(shards[k].scale_inv, 1.0f / shards[k].scale);
      }
    }
  }
}

TEST(FusedAdam, RepeatedRunsAreBitIdentical) {
  auto run = [](HostShard& s) {
    auto plan = CreateAdamPlan({s.View()});
    ASSERT_TRUE(plan.ok());
    AdamHyper hp;
    hp.lr = 3e-3f;
    hp.weight_decay = 0.05f;
    const float grad_scale = 1.0f / 7;
    for (int step = 1; step <= 3; ++step) {
      hp.step = step;
      ASSERT_TRUE(FusedAdam(**plan, hp, &grad_scale).ok());
    }
  };
  HostShard a = MakeShard(257, 11, true, true);
  a.grad = RandomFloats(257, 12, 3.0f);
  HostShard b = a;
  run(a);
  run(b);
  EXPECT_EQ(std::memcmp(a.master.data(), b.master.data(), 257 * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(a.m.data(), b.m.data(), 257 * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(a.v.data(), b.v.data(), 257 * sizeof(float)), 0);
  EXPECT_EQ(a.fp8, b.fp8);
  EXPECT_EQ(a.amax, b.amax);
}

TEST(FusedAdam, StepValuesInEngineMemoryGiveTheSameBitsAsTheHyperparameters) {
  // A replayed step passes lr and the bias corrections through engine
  // memory; the update must not change by a bit.
  auto run = [](HostShard& s, bool from_memory) {
    auto plan = CreateAdamPlan({s.View()});
    ASSERT_TRUE(plan.ok());
    AdamHyper hp;
    hp.weight_decay = 0.05f;
    const float grad_scale = 1.0f / 3;
    for (int step = 1; step <= 4; ++step) {
      hp.lr = 1e-3f * static_cast<float>(step);  // a warmup
      hp.step = step;
      AdamHyper passed = hp;
      const AdamStepValues values = StepValuesFor(hp);
      const float memory[3] = {values.lr, values.bias_correction1, values.bias_correction2};
      if (from_memory) {
        passed.lr = -1.f;  // must not be used
        passed.step = 0;
        passed.step_values = memory;
      }
      ASSERT_TRUE(FusedAdam(**plan, passed, &grad_scale).ok());
    }
  };
  HostShard a = MakeShard(129, 21, true, true);
  a.grad = RandomFloats(129, 22, 3.0f);
  HostShard b = a;
  run(a, false);
  run(b, true);
  EXPECT_EQ(std::memcmp(a.master.data(), b.master.data(), 129 * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(a.m.data(), b.m.data(), 129 * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(a.v.data(), b.v.data(), 129 * sizeof(float)), 0);
  EXPECT_EQ(a.fp8, b.fp8);
  // Without step values, step 0 is still refused.
  auto plan = CreateAdamPlan({a.View()});
  ASSERT_TRUE(plan.ok());
  AdamHyper zero;
  zero.step = 0;
  const float one = 1.f;
  EXPECT_EQ(FusedAdam(**plan, zero, &one).code(), absl::StatusCode::kInvalidArgument);
}

TEST(FusedAdam, Bf16ShardWithDecayAndAmaxKeepsOlderMaximum) {
  HostShard s = MakeShard(33, 13, false, true);
  s.grad = RandomFloats(33, 14);
  s.amax = 5.0f;  // larger than any |master| (masters are within 0.1)
  std::vector<double> w(s.master.begin(), s.master.end());
  auto plan = CreateAdamPlan({s.View()});
  ASSERT_TRUE(plan.ok());
  AdamHyper hp;
  hp.lr = 0.01f;
  hp.weight_decay = 0.5f;
  hp.step = 1;
  const float grad_scale = 2.0f;
  ASSERT_TRUE(FusedAdam(**plan, hp, &grad_scale).ok());
  for (size_t i = 0; i < w.size(); ++i) {
    // Step 1: m_hat = g, v_hat = g^2, so the Adam step is g / (|g| + eps).
    const double g = s.grad[i] * 2.0;
    const double want = w[i] - 0.01 * (g / (std::fabs(g) + 1e-8) + 0.5 * w[i]);
    EXPECT_NEAR(s.master[i], want, 1e-6) << i;
    EXPECT_EQ(s.bf16[i], FloatToBf16(s.master[i])) << i;
  }
  EXPECT_EQ(s.amax, 5.0f);
}

TEST(FusedAdam, WeightDecayFlagSelectsTheBranch) {
  // Zero gradient: with decay the master shrinks by lr*wd, without it stays.
  HostShard on = MakeShard(9, 15, true, true), off = MakeShard(9, 15, true, false);
  on.grad.assign(9, 0.f);
  off.grad.assign(9, 0.f);
  const std::vector<float> start = on.master;
  auto plan = CreateAdamPlan({on.View(), off.View()});
  ASSERT_TRUE(plan.ok());
  AdamHyper hp;
  hp.lr = 0.1f;
  hp.weight_decay = 0.2f;
  hp.step = 4;
  const float grad_scale = 1.0f;
  ASSERT_TRUE(FusedAdam(**plan, hp, &grad_scale).ok());
  for (int i = 0; i < 9; ++i) {
    EXPECT_FLOAT_EQ(on.master[i], start[i] * (1.0f - 0.1f * 0.2f)) << i;
    EXPECT_EQ(off.master[i], start[i]) << i;
    EXPECT_EQ(off.fp8[i], EncodeE4M3(start[i] * off.scale)) << i;
  }
  EXPECT_EQ(FusedAdam(**plan, AdamHyper{0.1f, 0.9f, 0.95f, 1e-8f, 0.f, 0}, &grad_scale).code(),
            absl::StatusCode::kInvalidArgument);
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
  // The index names the offending shard, the message the field.
  HostShard good = MakeShard(4, 6, true, true);
  AdamShard bad_dtype = s.View();
  bad_dtype.fp8.dtype = DType::kE5M2;
  auto second = CreateAdamPlan({good.View(), bad_dtype});
  EXPECT_EQ(second.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(second.status().message().find("shard 1"), std::string::npos) << second.status();
  EXPECT_NE(second.status().message().find("fp8"), std::string::npos) << second.status();
  AdamShard bf16_master = s.View();
  bf16_master.master.dtype = DType::kBFloat16;
  auto third = CreateAdamPlan({bf16_master});
  EXPECT_NE(third.status().message().find("master"), std::string::npos) << third.status();
  AdamShard null_grad = s.View();
  null_grad.grad.data = nullptr;
  EXPECT_EQ(CreateAdamPlan({null_grad}).status().code(), absl::StatusCode::kInvalidArgument);
  // An empty shard may have null data everywhere.
  AdamShard empty;
  empty.fp8.dtype = DType::kE4M3;
  float scale = 1.f;
  empty.fp8.scale = &scale;
  for (TensorDesc* t :
       {&empty.master, &empty.grad, &empty.exp_avg, &empty.exp_avg_sq, &empty.fp8}) {
    t->shape = Shape{0};
  }
  auto empty_plan = CreateAdamPlan({empty});
  ASSERT_TRUE(empty_plan.ok()) << empty_plan.status();
  const float grad_scale = 1.f;
  AdamHyper hp;
  EXPECT_TRUE(FusedAdam(**empty_plan, hp, &grad_scale).ok());
  float sum_sq = -1.f;
  EXPECT_TRUE(GradSumSquares(**empty_plan, &sum_sq).ok());
  EXPECT_EQ(sum_sq, 0.f);
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
  // A negative threshold also means no clipping.
  ASSERT_TRUE(ComputeGradScale(&sum_sq, &tokens, -1.f, &norm, &scale).ok());
  EXPECT_FLOAT_EQ(scale, 0.25f);
}

TEST(GradScale, ClippingFormulaOnRandomNorms) {
  for (uint32_t seed = 0; seed < 20; ++seed) {
    std::vector<float> r = RandomFloats(3, 200 + seed);
    float sum_sq = 1000.f * (r[0] + 1.5f), tokens = std::round(64.f * (r[1] + 1.5f));
    const float max_norm = 0.5f * (r[2] + 1.5f);
    float norm = NAN, scale = NAN;
    ASSERT_TRUE(ComputeGradScale(&sum_sq, &tokens, max_norm, &norm, &scale).ok());
    const double want_norm = std::sqrt(static_cast<double>(sum_sq)) / tokens;
    const double want_scale = (1.0 / tokens) * std::min(1.0, max_norm / (want_norm + 1e-6));
    EXPECT_NEAR(norm, want_norm, 1e-6 * want_norm) << seed;
    EXPECT_NEAR(scale, want_scale, 1e-6 * want_scale) << seed;
  }
}

TEST(GradScale, SumSquaresSkipsEmptyShardsAndIsDeterministic) {
  HostShard a = MakeShard(1000, 16, true, true), empty = MakeShard(0, 17, true, true),
            b = MakeShard(77, 18, false, false);
  a.grad = RandomFloats(1000, 19, 4.f);
  b.grad = RandomFloats(77, 20, 4.f);
  auto plan = CreateAdamPlan({a.View(), empty.View(), b.View()});
  ASSERT_TRUE(plan.ok());
  float first = NAN, again = NAN;
  ASSERT_TRUE(GradSumSquares(**plan, &first).ok());
  ASSERT_TRUE(GradSumSquares(**plan, &again).ok());
  EXPECT_EQ(std::memcmp(&first, &again, sizeof(float)), 0);
  double want = 0;
  for (float g : a.grad) want += static_cast<double>(g) * g;
  for (float g : b.grad) want += static_cast<double>(g) * g;
  EXPECT_NEAR(first, want, 1e-5 * want);
}

}  // namespace
}  // namespace cpu
}  // namespace tessera
