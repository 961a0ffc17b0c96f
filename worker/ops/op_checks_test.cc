// The shared argument rules on plain descriptors (no engine, no memory is
// read): each op's good call passes, and each spoiled argument is
// INVALID_ARGUMENT whose message starts with that argument's name. The
// fused loss's check also says whether gradients were asked for.
#include "worker/ops/op_checks.h"

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace tessera {
namespace {

// A non-null address that is never read: the checks look at descriptors only.
void* Fake() {
  static char byte;
  return &byte;
}

TensorDesc T(DType dtype, Shape shape) { return MakeTensor(Fake(), dtype, shape); }

float* FakeScalar() {
  static float value;
  return &value;
}

struct Case {
  const char* field;  // the message must start with this
  std::function<absl::Status()> call;
};

void ExpectRejected(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    const absl::Status s = c.call();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field << " " << s;
    EXPECT_EQ(s.message().rfind(c.field, 0), 0u) << "want \"" << c.field << "\", got " << s;
  }
}

TEST(OpChecks, BuildingBlocksNameTheArgument) {
  const TensorDesc x = T(DType::kBFloat16, Shape{4, 8});
  EXPECT_TRUE(CheckDType("x", x, {DType::kBFloat16}).ok());
  EXPECT_TRUE(CheckShape("x", x, Shape{4, 8}).ok());
  EXPECT_TRUE(CheckRank("x", x, 2).ok());
  EXPECT_TRUE(CheckData("x", x).ok());
  EXPECT_TRUE(CheckData("empty", MakeTensor(nullptr, DType::kFloat32, Shape{0, 8})).ok());
  ExpectRejected({
      {"x: dtype", [&] { return CheckDType("x", x, {DType::kFloat32}); }},
      {"x: shape",
       [&] {
         return CheckShape("x", x, Shape{8, 4});
       }},
      {"x: expected a rank-3", [&] { return CheckRank("x", x, 3); }},
      {"x: data is null",
       [&] {
         return CheckData("x", MakeTensor(nullptr, DType::kBFloat16, Shape{4, 8}));
       }},
  });
}

TEST(OpChecks, RmsNormForwardChecksWhatItsQuantizingTwinChecks) {
  constexpr int64_t t = 16, h = 32;
  TensorDesc x = T(DType::kFloat32, Shape{t, h}), w = T(DType::kBFloat16, Shape{h});
  TensorDesc out = T(DType::kBFloat16, Shape{t, h}), rstd = T(DType::kFloat32, Shape{t});
  TensorDesc q = T(DType::kE4M3, Shape{t, h}), q_t = T(DType::kE4M3, Shape{h, t});
  q.scale = FakeScalar();
  EXPECT_TRUE(CheckRmsNormForwardArgs(x, w, 1e-5f, out, rstd).ok());
  EXPECT_TRUE(CheckRmsNormForwardQuantizeArgs(x, w, 1e-5f, q, q_t, rstd).ok());
  // The same spoiled input, refused the same way by both.
  using Spoil = std::function<void(TensorDesc&, TensorDesc&, TensorDesc&, float&)>;
  const std::vector<std::pair<const char*, Spoil>> spoils = {
      {"x:", [](TensorDesc& x, TensorDesc&, TensorDesc&, float&) { x.dtype = DType::kE4M3; }},
      {"x:", [](TensorDesc& x, TensorDesc&, TensorDesc&, float&) { x.shape = Shape{t * h}; }},
      {"x:",
       [](TensorDesc& x, TensorDesc&, TensorDesc&, float&) {
         x.shape = Shape{t, 0};
       }},
      {"x:", [](TensorDesc& x, TensorDesc&, TensorDesc&, float&) { x.data = nullptr; }},
      {"weight:", [](TensorDesc&, TensorDesc& w, TensorDesc&, float&) { w.shape = Shape{h - 1}; }},
      {"weight:", [](TensorDesc&, TensorDesc& w, TensorDesc&, float&) { w.dtype = DType::kInt32; }},
      {"weight:", [](TensorDesc&, TensorDesc& w, TensorDesc&, float&) { w.data = nullptr; }},
      {"eps:", [](TensorDesc&, TensorDesc&, TensorDesc&, float& eps) { eps = -1.f; }},
      {"eps:", [](TensorDesc&, TensorDesc&, TensorDesc&, float& eps) { eps = INFINITY; }},
      {"eps:", [](TensorDesc&, TensorDesc&, TensorDesc&, float& eps) { eps = NAN; }},
      {"rstd:", [](TensorDesc&, TensorDesc&, TensorDesc& r, float&) { r.shape = Shape{t + 1}; }},
      {"rstd:",
       [](TensorDesc&, TensorDesc&, TensorDesc& r, float&) { r.dtype = DType::kBFloat16; }},
      {"rstd:", [](TensorDesc&, TensorDesc&, TensorDesc& r, float&) { r.data = nullptr; }},
  };
  for (const auto& [field, spoil] : spoils) {
    TensorDesc bx = x, bw = w, br = rstd;
    float eps = 1e-5f;
    spoil(bx, bw, br, eps);
    ExpectRejected(
        {{field, [&] { return CheckRmsNormForwardArgs(bx, bw, eps, out, br); }},
         {field, [&] { return CheckRmsNormForwardQuantizeArgs(bx, bw, eps, q, q_t, br); }}});
  }
  TensorDesc bad_out = out;
  bad_out.shape = Shape{t, h / 2};
  TensorDesc no_scale = q, wide_t = q_t, other_t = q_t;
  no_scale.scale = nullptr;
  wide_t.shape = Shape{t, h};
  other_t.dtype = DType::kE5M2;
  ExpectRejected({
      {"out:", [&] { return CheckRmsNormForwardArgs(x, w, 1e-5f, bad_out, rstd); }},
      {"out.scale:",
       [&] { return CheckRmsNormForwardQuantizeArgs(x, w, 1e-5f, no_scale, q_t, rstd); }},
      {"out_t:", [&] { return CheckRmsNormForwardQuantizeArgs(x, w, 1e-5f, q, wide_t, rstd); }},
      {"out_t:", [&] { return CheckRmsNormForwardQuantizeArgs(x, w, 1e-5f, q, other_t, rstd); }},
  });
  // out.data may be null (only the transposed copy is wanted).
  TensorDesc no_plain = q;
  no_plain.data = nullptr;
  EXPECT_TRUE(CheckRmsNormForwardQuantizeArgs(x, w, 1e-5f, no_plain, q_t, rstd).ok());
  TensorDesc gw = T(DType::kFloat32, Shape{h});
  EXPECT_TRUE(CheckRmsNormBackwardArgs(out, x, w, rstd, out, gw).ok());
  TensorDesc gw_bf16 = gw;
  gw_bf16.dtype = DType::kBFloat16;
  ExpectRejected(
      {{"grad_weight:", [&] { return CheckRmsNormBackwardArgs(out, x, w, rstd, out, gw_bf16); }},
       {"grad_out:", [&] { return CheckRmsNormBackwardArgs(bad_out, x, w, rstd, out, gw); }}});
}

TEST(OpChecks, SwiGluForwardChecksWhatItsQuantizingTwinChecks) {
  constexpr int64_t t = 8, f = 16;
  const TensorDesc gu = T(DType::kBFloat16, Shape{t, 2 * f}),
                   out = T(DType::kBFloat16, Shape{t, f});
  TensorDesc q = T(DType::kE4M3, Shape{t, f}), q_t = T(DType::kE4M3, Shape{f, t});
  q.scale = FakeScalar();
  EXPECT_TRUE(CheckSwiGluForwardArgs(gu, out).ok());
  EXPECT_TRUE(CheckSwiGluForwardQuantizeArgs(gu, q, q_t).ok());
  EXPECT_TRUE(CheckSwiGluBackwardArgs(out, gu, gu).ok());
  TensorDesc dgu = T(DType::kE5M2, Shape{t, 2 * f}), dgu_t = T(DType::kE5M2, Shape{2 * f, t});
  dgu.scale = FakeScalar();
  EXPECT_TRUE(CheckSwiGluBackwardQuantizeArgs(out, gu, dgu, dgu_t).ok());
  TensorDesc odd = gu, fp32 = gu, no_data = gu, short_out = out, fp32_out = out;
  odd.shape = Shape{t, 2 * f - 1};
  fp32.dtype = DType::kFloat32;
  no_data.data = nullptr;
  short_out.shape = Shape{t - 1, f};
  fp32_out.dtype = DType::kFloat32;
  for (const TensorDesc* bad : {&odd, &fp32, &no_data}) {
    ExpectRejected(
        {{"gate_up:", [&] { return CheckSwiGluForwardArgs(*bad, out); }},
         {"gate_up:", [&] { return CheckSwiGluForwardQuantizeArgs(*bad, q, q_t); }},
         {"gate_up:", [&] { return CheckSwiGluBackwardArgs(out, *bad, gu); }},
         {"gate_up:", [&] { return CheckSwiGluBackwardQuantizeArgs(out, *bad, dgu, dgu_t); }}});
  }
  ExpectRejected({
      {"out:", [&] { return CheckSwiGluForwardArgs(gu, short_out); }},
      {"out:", [&] { return CheckSwiGluForwardArgs(gu, fp32_out); }},
      {"grad_out:", [&] { return CheckSwiGluBackwardArgs(short_out, gu, gu); }},
      {"grad_gate_up:", [&] { return CheckSwiGluBackwardArgs(out, gu, odd); }},
      {"dgu_t:", [&] { return CheckSwiGluBackwardQuantizeArgs(out, gu, dgu, q_t); }},
  });
}

TEST(OpChecks, FusedLossTellsLossOnlyFromFullCalls) {
  constexpr int64_t t = 8, h = 16, v = 32;
  const TensorDesc x = T(DType::kBFloat16, Shape{t, h}), w = T(DType::kBFloat16, Shape{v, h});
  const TensorDesc targets = T(DType::kInt32, Shape{t});
  const TensorDesc gx = T(DType::kBFloat16, Shape{t, h}), gw = T(DType::kFloat32, Shape{v, h});
  float* s = FakeScalar();
  auto full = CheckFusedLinearCrossEntropyArgs(x, w, targets, 4, s, s, gx, gw);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(*full, FusedLossOutputs::kLossAndGradients);
  // Null gradient outputs (default descriptors, or sized ones without data).
  auto loss_only =
      CheckFusedLinearCrossEntropyArgs(x, w, targets, 4, s, s, TensorDesc{}, TensorDesc{});
  ASSERT_TRUE(loss_only.ok()) << loss_only.status();
  EXPECT_EQ(*loss_only, FusedLossOutputs::kLossOnly);
  TensorDesc gx_null = gx, gw_null = gw;
  gx_null.data = nullptr;
  gw_null.data = nullptr;
  auto sized = CheckFusedLinearCrossEntropyArgs(x, w, targets, 4, s, s, gx_null, gw_null);
  ASSERT_TRUE(sized.ok()) << sized.status();
  EXPECT_EQ(*sized, FusedLossOutputs::kLossOnly);
  // No tokens: grad_x is empty and may have no data; grad_weight still decides.
  const TensorDesc x0 = MakeTensor(nullptr, DType::kBFloat16, Shape{0, h});
  const TensorDesc t0 = MakeTensor(nullptr, DType::kInt32, Shape{0});
  auto empty = CheckFusedLinearCrossEntropyArgs(x0, w, t0, 4, s, s, x0, gw);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(*empty, FusedLossOutputs::kLossAndGradients);

  TensorDesc x_fp32 = x, w_narrow = w, t_short = targets, gw_bf16 = gw;
  x_fp32.dtype = DType::kFloat32;
  w_narrow.shape = Shape{v, h - 1};
  t_short.shape = Shape{t - 1};
  gw_bf16.dtype = DType::kBFloat16;
  auto status = [](const absl::StatusOr<FusedLossOutputs>& r) { return r.status(); };
  ExpectRejected({
      {"x:",
       [&] {
         return status(CheckFusedLinearCrossEntropyArgs(x_fp32, w, targets, 4, s, s, gx, gw));
       }},
      {"weight:",
       [&] {
         return status(CheckFusedLinearCrossEntropyArgs(x, w_narrow, targets, 4, s, s, gx, gw));
       }},
      {"targets:",
       [&] { return status(CheckFusedLinearCrossEntropyArgs(x, w, t_short, 4, s, s, gx, gw)); }},
      {"chunk_tokens:",
       [&] { return status(CheckFusedLinearCrossEntropyArgs(x, w, targets, 0, s, s, gx, gw)); }},
      {"loss_sum:",
       [&] {
         return status(CheckFusedLinearCrossEntropyArgs(x, w, targets, 4, nullptr, s, gx, gw));
       }},
      {"valid_tokens:",
       [&] {
         return status(CheckFusedLinearCrossEntropyArgs(x, w, targets, 4, s, nullptr, gx, gw));
       }},
      // One gradient output without the other is a mistake, not a mode.
      {"grad_x:",
       [&] {
         return status(CheckFusedLinearCrossEntropyArgs(x, w, targets, 4, s, s, gx_null, gw));
       }},
      {"grad_weight:",
       [&] {
         return status(CheckFusedLinearCrossEntropyArgs(x, w, targets, 4, s, s, gx, gw_null));
       }},
      {"grad_weight:",
       [&] {
         return status(CheckFusedLinearCrossEntropyArgs(x, w, targets, 4, s, s, gx, gw_bf16));
       }},
  });
}

TEST(OpChecks, QuantizeGemmAndElementwise) {
  const TensorDesc in = T(DType::kBFloat16, Shape{4, 8});
  TensorDesc out = T(DType::kE4M3, Shape{4, 8}), out_t = T(DType::kE4M3, Shape{8, 4});
  out.scale = FakeScalar();
  EXPECT_TRUE(CheckQuantizeArgs(in, out).ok());
  EXPECT_TRUE(CheckQuantizeTransposeArgs(in, out, out_t).ok());
  TensorDesc no_scale = out, fp8 = out;
  no_scale.scale = nullptr;
  fp8.scale_inv = FakeScalar();
  EXPECT_TRUE(CheckDequantizeArgs(fp8, in).ok());
  EXPECT_TRUE(CheckAmaxArgs(in, FakeScalar()).ok());
  EXPECT_TRUE(CheckTransposeArgs(in, T(DType::kBFloat16, Shape{8, 4})).ok());
  const TensorDesc a = T(DType::kBFloat16, Shape{4, 8}), b = T(DType::kBFloat16, Shape{16, 8});
  const TensorDesc d = T(DType::kFloat32, Shape{4, 16});
  EXPECT_TRUE(CheckGemmArgs(a, false, b, true, d, true).ok());
  EXPECT_TRUE(CheckGemmAddend(d, d).ok());
  EXPECT_TRUE(CheckAddArgs(d, d, d).ok());
  EXPECT_TRUE(CheckCastArgs(a, T(DType::kFloat32, Shape{32})).ok());
  const TensorDesc ids = T(DType::kInt32, Shape{4}), table = T(DType::kFloat32, Shape{64, 8});
  EXPECT_TRUE(CheckEmbeddingForwardArgs(ids, table, in).ok());
  EXPECT_TRUE(CheckEmbeddingBackwardArgs(ids, in, table, 0, 64).ok());
  EXPECT_TRUE(CheckEmbeddingBackwardArgs(ids, in, table, 36, 100).ok());  // a shard's rows
  TensorDesc short_out = out;
  short_out.shape = Shape{5};
  TensorDesc d_bf16 = d, overlap = d;
  d_bf16.dtype = DType::kBFloat16;
  overlap.data = static_cast<char*>(d.data) + 4;
  ExpectRejected({
      {"out.scale:", [&] { return CheckQuantizeArgs(in, no_scale); }},
      {"out:", [&] { return CheckQuantizeArgs(in, short_out); }},
      {"out_t:",
       [&] {
         return CheckQuantizeTransposeArgs(in, out, T(DType::kE4M3, Shape{4, 8}));
       }},
      {"in.scale_inv:", [&] { return CheckDequantizeArgs(out, in); }},
      {"amax:", [&] { return CheckAmaxArgs(in, nullptr); }},
      {"out:",
       [&] {
         return CheckTransposeArgs(in, T(DType::kFloat32, Shape{8, 4}));
       }},
      {"scale_inv_stride:",
       [&] { return CheckUpdateFp8ScalesArgs(nullptr, nullptr, nullptr, nullptr, 0, 0, 1); }},
      {"a, b: inner", [&] { return CheckGemmArgs(a, false, b, false, d, false); }},
      {"d:", [&] { return CheckGemmArgs(a, false, b, true, d_bf16, true); }},
      {"trans_a, trans_b:", [&] { return CheckGemmArgs(fp8, true, fp8, true, d, false); }},
      {"c, d:", [&] { return CheckGemmAddend(overlap, d); }},
      {"b:", [&] { return CheckAddArgs(d, T(DType::kFloat32, Shape{3}), d); }},
      {"in:",
       [&] { return CheckCastArgs(T(DType::kInt32, Shape{32}), T(DType::kFloat32, Shape{32})); }},
      {"ids:", [&] { return CheckEmbeddingForwardArgs(T(DType::kFloat32, Shape{4}), table, in); }},
      {"out:",
       [&] {
         return CheckEmbeddingForwardArgs(ids, table, T(DType::kFloat32, Shape{4, 9}));
       }},
      {"grad_table:",
       [&] {
         return CheckEmbeddingBackwardArgs(ids, in, T(DType::kBFloat16, Shape{64, 8}), 0, 64);
       }},
      {"first_row, vocab:", [&] { return CheckEmbeddingBackwardArgs(ids, in, table, 1, 64); }},
  });
}

// Attention and RoPE over the packed grouped-query layout: B 2, S 8, nh 4,
// nkv 2, hd 16, so qkv holds 8 heads.
TEST(OpChecks, AttentionAndRopeNameTheArgument) {
  const TensorDesc qkv = T(DType::kBFloat16, Shape{2, 8, 8, 16});
  const TensorDesc out = T(DType::kBFloat16, Shape{2, 8, 4, 16});
  const TensorDesc lse = T(DType::kFloat32, Shape{2, 4, 8});
  absl::StatusOr<AttentionDims> d = CheckAttentionForwardArgs(qkv, 2, out, lse);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->heads, 4);
  EXPECT_EQ(d->kv_heads, 2);
  EXPECT_EQ(d->head_dim, 16);
  EXPECT_TRUE(CheckAttentionBackwardArgs(out, qkv, 2, out, lse, qkv).ok());
  absl::StatusOr<AttentionDims> rope = CheckRopeArgs("qkv", qkv, 2, 10000.f);
  ASSERT_TRUE(rope.ok()) << rope.status();
  EXPECT_EQ(rope->heads, 4);
  const auto forward = [&](const TensorDesc& q, int kv, const TensorDesc& o, const TensorDesc& l) {
    return CheckAttentionForwardArgs(q, kv, o, l).status();
  };
  ExpectRejected({
      {"qkv:", [&] { return forward(T(DType::kFloat32, qkv.shape), 2, out, lse); }},
      {"n_kv_heads:", [&] { return forward(qkv, 0, out, lse); }},
      {"n_kv_heads:", [&] { return forward(qkv, 3, out, lse); }},
      {"qkv:", [&] { return forward(qkv, 1, out, lse); }},
      {"out:", [&] { return forward(qkv, 2, T(DType::kBFloat16, Shape{2, 8, 4, 8}), lse); }},
      {"lse:", [&] { return forward(qkv, 2, out, T(DType::kFloat32, Shape{2, 8, 4})); }},
      {"qkv:", [&] { return forward(MakeTensor(nullptr, DType::kBFloat16, qkv.shape), 2, out, lse); }},
      {"grad_out:",
       [&] { return CheckAttentionBackwardArgs(lse, qkv, 2, out, lse, qkv).status(); }},
      {"grad_qkv:",
       [&] { return CheckAttentionBackwardArgs(out, qkv, 2, out, lse, out).status(); }},
      {"grad_qkv:",
       [&] {
         return CheckRopeArgs("grad_qkv", T(DType::kBFloat16, Shape{2, 8, 8, 15}), 2, 1.f).status();
       }},
      {"n_kv_heads:", [&] { return CheckRopeArgs("qkv", qkv, 0, 1.f).status(); }},
      {"n_kv_heads:", [&] { return CheckRopeArgs("qkv", qkv, 3, 1.f).status(); }},
      {"theta:", [&] { return CheckRopeArgs("qkv", qkv, 2, 0.f).status(); }},
      {"theta:", [&] { return CheckRopeArgs("qkv", qkv, 2, INFINITY).status(); }},
  });
}

TEST(OpChecks, OptimizerArgumentsNameTheShardAndField) {
  const auto shard = [](DType compute) {
    AdamShard s;
    s.master = T(DType::kFloat32, Shape{8});
    s.grad = T(DType::kFloat32, Shape{8});
    s.exp_avg = T(DType::kFloat32, Shape{8});
    s.exp_avg_sq = T(DType::kFloat32, Shape{8});
    s.fp8 = T(compute, Shape{8});
    s.fp8.scale = FakeScalar();
    return s;
  };
  AdamShard empty = shard(DType::kBFloat16);
  for (TensorDesc* t : {&empty.master, &empty.grad, &empty.exp_avg, &empty.exp_avg_sq, &empty.fp8}) {
    *t = MakeTensor(nullptr, t->dtype, Shape{0});
  }
  EXPECT_TRUE(CheckAdamShards({shard(DType::kE4M3), shard(DType::kBFloat16), empty}).ok());
  AdamShard half_master = shard(DType::kE4M3);
  half_master.master.dtype = DType::kBFloat16;
  AdamShard short_grad = shard(DType::kE4M3);
  short_grad.grad.shape = Shape{7};
  AdamShard e5m2 = shard(DType::kE5M2);
  AdamShard no_scale = shard(DType::kE4M3);
  no_scale.fp8.scale = nullptr;
  AdamShard null_v = shard(DType::kE4M3);
  null_v.exp_avg_sq.data = nullptr;
  const AdamShard good = shard(DType::kE4M3);
  AdamHyper step0;
  step0.step = 0;
  float value = 0.f;
  ExpectRejected({
      {"shard 1: master:", [&] { return CheckAdamShards({good, half_master}); }},
      {"shard 1: grad: has 7", [&] { return CheckAdamShards({good, short_grad}); }},
      {"shard 0: fp8: must be e4m3 or bf16", [&] { return CheckAdamShards({e5m2}); }},
      {"shard 0: fp8.scale:", [&] { return CheckAdamShards({no_scale}); }},
      {"shard 0: exp_avg_sq: data is null", [&] { return CheckAdamShards({null_v}); }},
      {"sum_sq:", [&] { return CheckGradSumSquaresArgs(nullptr); }},
      {"tokens:", [&] { return CheckComputeGradScaleArgs(&value, nullptr, &value, &value); }},
      {"grad_scale:", [&] { return CheckComputeGradScaleArgs(&value, &value, &value, nullptr); }},
      {"grad_scale:", [&] { return CheckFusedAdamArgs(AdamHyper{}, nullptr); }},
      {"hyper.step:", [&] { return CheckFusedAdamArgs(step0, &value); }},
  });
  step0.step_values = &value;  // the step's values come from engine memory instead
  EXPECT_TRUE(CheckFusedAdamArgs(step0, &value).ok());
}

}  // namespace
}  // namespace tessera
