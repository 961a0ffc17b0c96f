// The packed FP8 quantizer state on the CPU engine: the amaxes form one
// contiguous all-reduce buffer, scales start at 1, and UpdateScales follows
// the recipe (history window and MAX, MOST_RECENT, margin, default history
// length, current scaling of single slots), checked against the formula
// scale = fp8_max / amax / 2^margin computed here in double.
#include "worker/model/fp8_meta.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/cpu/cpu_ops.h"

namespace tessera {
namespace {

constexpr int kLayers = 2;
constexpr int kLinears = kLayers * kBlockLinears;  // 16 e4m3 slots (weights + inputs), 8 e5m2 (grads)

// Linear i of the model, in the layout's order.
LinearId Linear(int i) { return LinearId{i / kBlockLinears, static_cast<BlockLinear>(i % kBlockLinears)}; }
E4m3Slot S4(int i) { return E4m3Slot{i}; }
E5m2Slot S5(int i) { return E5m2Slot{i}; }

v1::Fp8Recipe Delayed(int history, int margin, v1::DelayedScaling::AmaxCompute algo) {
  v1::Fp8Recipe r;
  r.mutable_delayed()->set_amax_history_len(history);
  r.mutable_delayed()->set_margin(margin);
  r.mutable_delayed()->set_amax_compute(algo);
  return r;
}

// Relative tolerance for scales: the engine computes in fp32.
void ExpectScale(float got, double want) { EXPECT_NEAR(got, want, 1e-6 * want); }

TEST(Fp8Meta, SlotsAreDistinctAndAmaxesContiguous) {
  std::unique_ptr<Ops> ops = CreateCpuOps();
  auto meta = Fp8Meta::Create(*ops, kLayers, Delayed(4, 0, v1::DelayedScaling::MAX));
  ASSERT_TRUE(meta.ok()) << meta.status();
  EXPECT_EQ(meta->layout().e4m3_slots(), 2 * kLinears);
  EXPECT_EQ(meta->layout().e5m2_slots(), kLinears);
  const TensorDesc amaxes = meta->amaxes();
  EXPECT_EQ(amaxes.NumElements(), 3 * kLinears);
  float* base = amaxes.As<float>();
  std::vector<const float*> seen;
  for (int i = 0; i < kLinears; ++i) {
    EXPECT_EQ(meta->amax(meta->layout().WeightSlot(Linear(i))), base + i);
    EXPECT_EQ(meta->amax(meta->layout().InputSlot(Linear(i))), base + kLinears + i);
    EXPECT_EQ(meta->amax(S5(i)), base + 2 * kLinears + i);
    for (const float* p : {meta->scale(meta->layout().WeightSlot(Linear(i))), meta->scale(meta->layout().InputSlot(Linear(i))),
                           meta->scale_inv(meta->layout().InputSlot(Linear(i))), meta->scale(S5(i)),
                           meta->scale_inv(S5(i)), meta->weight_data_scale_inv(Linear(i))}) {
      EXPECT_EQ(std::count(seen.begin(), seen.end(), p), 0);
      seen.push_back(p);
      EXPECT_EQ(*p, 1.f);  // every scale starts at 1
    }
  }
  for (int i = 0; i < amaxes.NumElements(); ++i) EXPECT_EQ(base[i], 0.f);
}

// Every scale_inv is 16-byte aligned (an FP8 GEMM hands it to cuBLASLt as a
// scale pointer) given a 16-byte aligned block, as both engines allocate.
TEST(Fp8Meta, EveryScaleInvIsSixteenByteAligned) {
  std::unique_ptr<Ops> ops = CreateCpuOps();
  auto meta = Fp8Meta::Create(*ops, kLayers, Delayed(4, 0, v1::DelayedScaling::MAX));
  ASSERT_TRUE(meta.ok()) << meta.status();
  ASSERT_EQ(reinterpret_cast<uintptr_t>(meta->packed().data) % 16, 0u);
  std::vector<const float*> all;
  for (int slot = 0; slot < meta->layout().e4m3_slots(); ++slot) all.push_back(meta->scale_inv(S4(slot)));
  for (int i = 0; i < meta->layout().e5m2_slots(); ++i) {
    all.push_back(meta->scale_inv(S5(i)));
    all.push_back(meta->weight_data_scale_inv(Linear(i)));
  }
  for (const float* p : all) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 16, 0u) << p;
    EXPECT_EQ(std::count(all.begin(), all.end(), p), 1) << "slots overlap";
  }
}

// Checkpoints keep the compact layout: amax | scale4 | scale_inv4 |
// history4 | scale5 | scale_inv5 | history5 | weight_data_scale_inv, and
// FromCheckpoint(ToCheckpoint()) restores every value.
TEST(Fp8Meta, CheckpointLayoutIsCompactAndRoundTrips) {
  std::unique_ptr<Ops> ops = CreateCpuOps();
  const int history = 3;
  auto meta = Fp8Meta::Create(*ops, kLayers, Delayed(history, 0, v1::DelayedScaling::MAX));
  ASSERT_TRUE(meta.ok()) << meta.status();
  const int n4 = meta->layout().e4m3_slots(), n5 = meta->layout().e5m2_slots();
  ASSERT_EQ(meta->checkpoint_floats(),
            (n4 + n5) + n4 * (2 + history) + n5 * (2 + history) + n5);
  // Give every value of the block a distinct number.
  float* block = meta->packed().As<float>();
  for (int64_t i = 0; i < meta->packed().NumElements(); ++i) block[i] = 1000.f + i;
  auto saved = meta->ToCheckpoint(*ops);
  ASSERT_TRUE(saved.ok()) << saved.status();
  ASSERT_EQ(static_cast<int64_t>(saved->size()), meta->checkpoint_floats());
  int64_t at = 0;
  const auto expect_run = [&](const char* what, int count, const auto& value_of) {
    for (int i = 0; i < count; ++i, ++at) EXPECT_EQ((*saved)[at], *value_of(i)) << what << " " << i;
  };
  expect_run("amax", n4 + n5, [&](int i) { return meta->amaxes().As<float>() + i; });
  expect_run("scale4", n4, [&](int i) { return meta->scale(S4(i)); });
  expect_run("scale_inv4", n4, [&](int i) { return meta->scale_inv(S4(i)); });
  at += int64_t{n4} * history;  // history4
  expect_run("scale5", n5, [&](int i) { return meta->scale(S5(i)); });
  expect_run("scale_inv5", n5, [&](int i) { return meta->scale_inv(S5(i)); });
  at += int64_t{n5} * history;  // history5
  expect_run("weight_data_scale_inv", n5, [&](int i) { return meta->weight_data_scale_inv(Linear(i)); });
  EXPECT_EQ(at, meta->checkpoint_floats());

  auto other = Fp8Meta::Create(*ops, kLayers, Delayed(history, 0, v1::DelayedScaling::MAX));
  ASSERT_TRUE(other.ok()) << other.status();
  ASSERT_TRUE(other->FromCheckpoint(*ops, saved->data()).ok());
  auto again = other->ToCheckpoint(*ops);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *saved);
  for (int slot = 0; slot < n4; ++slot) {
    EXPECT_EQ(*other->scale_inv(S4(slot)), *meta->scale_inv(S4(slot))) << slot;
  }
  for (int i = 0; i < n5; ++i) {
    EXPECT_EQ(*other->weight_data_scale_inv(Linear(i)), *meta->weight_data_scale_inv(Linear(i))) << i;
  }
}

// Feeds random amaxes for several steps and checks every scale against a
// history kept here.
void CheckRecipe(int history_len, int margin, v1::DelayedScaling::AmaxCompute algo) {
  std::unique_ptr<Ops> ops = CreateCpuOps();
  auto meta = Fp8Meta::Create(*ops, kLayers, Delayed(history_len, margin, algo));
  ASSERT_TRUE(meta.ok()) << meta.status();
  const int window = history_len > 0 ? history_len : 16;
  const int n = 3 * kLinears;
  std::vector<std::deque<double>> history(n);
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> exponent(-8.f, 8.f);
  for (int step = 0; step < window + 3; ++step) {
    float* amax = meta->amaxes().As<float>();
    for (int i = 0; i < n; ++i) {
      amax[i] = std::exp2(exponent(rng));
      history[i].push_front(amax[i]);
      if (static_cast<int>(history[i].size()) > window) history[i].pop_back();
    }
    ASSERT_TRUE(meta->UpdateScales(*ops, nullptr).ok());
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(amax[i], 0.f) << "amax not cleared after use";
      const double a = algo == v1::DelayedScaling::MOST_RECENT
                           ? history[i].front()
                           : *std::max_element(history[i].begin(), history[i].end());
      const bool e4m3 = i < 2 * kLinears;
      const double want = (e4m3 ? 448.0 : 57344.0) / a / std::exp2(margin);
      const float* scale = e4m3 ? meta->scale(S4(i)) : meta->scale(S5(i - 2 * kLinears));
      const float* scale_inv = e4m3 ? meta->scale_inv(S4(i)) : meta->scale_inv(S5(i - 2 * kLinears));
      ExpectScale(*scale, want);
      ExpectScale(*scale_inv, 1.0 / want);
    }
  }
}

TEST(Fp8Meta, DelayedMaxOverHistoryWindow) { CheckRecipe(3, 0, v1::DelayedScaling::MAX); }
TEST(Fp8Meta, DelayedMostRecentWithMargin) { CheckRecipe(4, 2, v1::DelayedScaling::MOST_RECENT); }
TEST(Fp8Meta, HistoryLengthZeroMeansSixteen) { CheckRecipe(0, 1, v1::DelayedScaling::MAX); }

TEST(Fp8Meta, CurrentScalingUpdatesOneSlotAtATime) {
  std::unique_ptr<Ops> ops = CreateCpuOps();
  v1::Fp8Recipe recipe;
  recipe.mutable_current()->set_margin(1);
  auto meta = Fp8Meta::Create(*ops, kLayers, recipe);
  ASSERT_TRUE(meta.ok()) << meta.status();
  EXPECT_TRUE(meta->current_scaling());
  float* amax = meta->amaxes().As<float>();
  for (int i = 0; i < 3 * kLinears; ++i) amax[i] = 3.5f + i;
  const E4m3Slot slot = meta->layout().InputSlot(Linear(1));
  ASSERT_TRUE(meta->UpdateScale(*ops, slot, nullptr).ok());
  ExpectScale(*meta->scale(slot), 448.0 / (3.5 + slot.index) / 2);
  EXPECT_EQ(*meta->scale(meta->layout().InputSlot(Linear(0))), 1.f);  // other slots untouched
  EXPECT_EQ(amax[slot.index], 0.f);
  EXPECT_EQ(amax[slot.index + 1], 3.5f + slot.index + 1);
  const E5m2Slot grad = meta->layout().GradSlot(Linear(2));
  ASSERT_TRUE(meta->UpdateScale(*ops, grad, nullptr).ok());
  ExpectScale(*meta->scale(grad), 57344.0 / (3.5 + 2 * kLinears + 2) / 2);
  EXPECT_EQ(*meta->scale(S5(0)), 1.f);
}

TEST(Fp8Meta, RecordWeightEncodeScalesCopiesOnlyTheWeightsScaleInv) {
  std::unique_ptr<Ops> ops = CreateCpuOps();
  auto meta = Fp8Meta::Create(*ops, kLayers, Delayed(2, 0, v1::DelayedScaling::MAX));
  ASSERT_TRUE(meta.ok());
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> amax_dist(0.1f, 50.f);
  float* amax = meta->amaxes().As<float>();
  for (int i = 0; i < 3 * kLinears; ++i) amax[i] = amax_dist(rng);
  ASSERT_TRUE(meta->UpdateScales(*ops, nullptr).ok());
  for (int i = 0; i < kLinears; ++i) EXPECT_EQ(*meta->weight_data_scale_inv(Linear(i)), 1.f);
  ASSERT_TRUE(meta->RecordWeightEncodeScales(*ops, nullptr).ok());
  for (int i = 0; i < kLinears; ++i) {
    EXPECT_EQ(*meta->weight_data_scale_inv(Linear(i)), *meta->scale_inv(meta->layout().WeightSlot(Linear(i))));
    EXPECT_NE(*meta->weight_data_scale_inv(Linear(i)), *meta->scale_inv(meta->layout().InputSlot(Linear(i))));
  }
  // The next update changes the scales but not what the bytes were encoded with.
  for (int i = 0; i < 3 * kLinears; ++i) amax[i] = 100.f + amax_dist(rng);
  const float recorded = *meta->weight_data_scale_inv(Linear(0));
  ASSERT_TRUE(meta->UpdateScales(*ops, nullptr).ok());
  EXPECT_EQ(*meta->weight_data_scale_inv(Linear(0)), recorded);
  EXPECT_NE(*meta->scale_inv(meta->layout().WeightSlot(Linear(0))), recorded);
}

TEST(Fp8Meta, ZeroAmaxKeepsTheScale) {
  std::unique_ptr<Ops> ops = CreateCpuOps();
  auto meta = Fp8Meta::Create(*ops, kLayers, Delayed(1, 0, v1::DelayedScaling::MAX));
  ASSERT_TRUE(meta.ok());
  float* amax = meta->amaxes().As<float>();
  amax[0] = 2.f;
  ASSERT_TRUE(meta->UpdateScales(*ops, nullptr).ok());
  ExpectScale(*meta->scale(S4(0)), 224.0);
  ASSERT_TRUE(meta->UpdateScales(*ops, nullptr).ok());  // nothing recorded: amax 0
  ExpectScale(*meta->scale(S4(0)), 224.0);
}

}  // namespace
}  // namespace tessera
