// CpuOps through the Ops interface: host memory (alignment, zeroing,
// copies, memset, out-of-memory as RESOURCE_EXHAUSTED) and the wiring of
// every op family to the free functions, checked by running both on the
// same random inputs and comparing bits.
#include "worker/engine/cpu/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/cpu/attention.h"
#include "worker/engine/cpu/elementwise.h"
#include "worker/engine/cpu/embedding.h"
#include "worker/engine/cpu/fp8.h"
#include "worker/engine/cpu/fused_adam.h"
#include "worker/engine/cpu/fused_linear_cross_entropy.h"
#include "worker/engine/cpu/gemm.h"
#include "worker/engine/cpu/quantize.h"
#include "worker/engine/cpu/reference_test_util.h"
#include "worker/engine/cpu/rmsnorm.h"
#include "worker/engine/cpu/rope.h"
#include "worker/engine/cpu/swiglu.h"

namespace tessera {
namespace {

using testing::Poison;
using testing::RandomBf16;
using testing::RandomFloats;
using testing::RandomInts;

TEST(CpuOps, AllocatesAlignedZeroedHostMemory) {
  std::unique_ptr<Ops> ops = CreateCpuOps();
  for (size_t bytes :
       {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{1000}, size_t{1} << 20}) {
    auto buffer = ops->Allocate(bytes);
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    EXPECT_EQ((*buffer)->bytes(), bytes);
    ASSERT_NE((*buffer)->data(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>((*buffer)->data()) % 64, 0u) << bytes;
    const uint8_t* p = static_cast<const uint8_t*>((*buffer)->data());
    for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(p[i], 0) << i;
  }
}

TEST(CpuOps, ImpossibleAllocationIsResourceExhausted) {
  std::unique_ptr<Ops> ops = CreateCpuOps();
  // Beyond any 64-bit address space the host can map.
  EXPECT_EQ(ops->Allocate(size_t{1} << 62).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ops->Allocate(SIZE_MAX).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(CpuOps, HasNoStreamsAndNothingToCapture) {
  std::unique_ptr<Ops> ops = CreateCpuOps();
  auto stream = ops->CreateStream();
  ASSERT_TRUE(stream.ok());
  EXPECT_EQ(*stream, nullptr);
  EXPECT_EQ(ops->BeginCapture(nullptr).code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(ops->EndCapture(nullptr).status().code(), absl::StatusCode::kFailedPrecondition);
  struct NotCaptured : Ops::CapturedWork {};
  EXPECT_EQ(ops->Replay(NotCaptured(), nullptr).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(CpuOps, CopiesAndMemset) {
  std::unique_ptr<Ops> ops = CreateCpuOps();
  auto buffer = ops->Allocate(256);
  ASSERT_TRUE(buffer.ok());
  std::vector<float> src = RandomFloats(64, 1), back(64);
  Poison(back);
  void* dev = (*buffer)->data();
  ASSERT_TRUE(ops->CopyToDevice(dev, src.data(), 256, nullptr).ok());
  ASSERT_TRUE(ops->Synchronize(nullptr).ok());
  ASSERT_TRUE(ops->CopyToHost(back.data(), dev, 256, nullptr).ok());
  EXPECT_EQ(std::memcmp(back.data(), src.data(), 256), 0);
  // Overlapping device-to-device copy (memmove semantics).
  ASSERT_TRUE(ops->CopyDeviceToDevice(static_cast<float*>(dev) + 1, dev, 63 * 4, nullptr).ok());
  ASSERT_TRUE(ops->CopyToHost(back.data(), dev, 256, nullptr).ok());
  EXPECT_EQ(back[0], src[0]);
  for (int i = 1; i < 64; ++i) ASSERT_EQ(back[i], src[i - 1]) << i;
  ASSERT_TRUE(ops->Memset(dev, 0xFF, 100, nullptr).ok());
  const uint8_t* p = static_cast<const uint8_t*>(dev);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(p[i], 0xFF);
  EXPECT_EQ(std::memcmp(p + 100, reinterpret_cast<const uint8_t*>(back.data()) + 100, 156), 0);
  // Zero-byte operations are fine with null pointers.
  EXPECT_TRUE(ops->CopyToDevice(nullptr, nullptr, 0, nullptr).ok());
  EXPECT_TRUE(ops->Memset(nullptr, 0, 0, nullptr).ok());
}

TEST(CpuOps, QuantizeAndGemmMatchTheFreeFunctions) {
  std::unique_ptr<Ops> ops = CreateCpuOps();
  const int m = 12, n = 20, k = 32;
  std::vector<uint16_t> a = RandomBf16(m * k, 2), b = RandomBf16(n * k, 3);
  TensorDesc A = MakeTensor(a.data(), DType::kBFloat16, Shape{m, k});
  TensorDesc B = MakeTensor(b.data(), DType::kBFloat16, Shape{n, k});
  // Quantize both to FP8 through the engine and directly.
  std::vector<uint8_t> qa(m * k), qa_ref(m * k), qb(n * k), qb_t(n * k);
  Poison(qa);
  Poison(qa_ref);
  float sa = 50.f, sa_inv = 0.f, amax = 0.f, sa_inv_ref = 0.f, amax_ref = 0.f;
  float sb = 80.f, sb_inv = 0.f;
  TensorDesc QA = MakeTensor(qa.data(), DType::kE4M3, Shape{m, k});
  QA.scale = &sa;
  QA.scale_inv = &sa_inv;
  QA.amax = &amax;
  TensorDesc QA_ref = QA;
  QA_ref.data = qa_ref.data();
  QA_ref.scale_inv = &sa_inv_ref;
  QA_ref.amax = &amax_ref;
  ASSERT_TRUE(ops->Quantize(A, QA, nullptr).ok());
  ASSERT_TRUE(cpu::Quantize(A, QA_ref).ok());
  EXPECT_EQ(qa, qa_ref);
  EXPECT_EQ(amax, amax_ref);
  EXPECT_EQ(sa_inv, sa_inv_ref);
  // b as FP8 [n, k] via QuantizeTranspose of bᵀ [k, n]: out_t is b's own layout.
  std::vector<uint16_t> bt(k * n);
  ASSERT_TRUE(
      ops->Transpose(B, MakeTensor(bt.data(), DType::kBFloat16, Shape{k, n}), nullptr).ok());
  TensorDesc QBT = MakeTensor(nullptr, DType::kE4M3, Shape{k, n});
  QBT.scale = &sb;
  QBT.scale_inv = &sb_inv;
  TensorDesc QB = MakeTensor(qb.data(), DType::kE4M3, Shape{n, k});
  ASSERT_TRUE(
      ops->QuantizeTranspose(MakeTensor(bt.data(), DType::kBFloat16, Shape{k, n}), QBT, QB, nullptr)
          .ok());
  for (int i = 0; i < n * k; ++i) ASSERT_EQ(qb[i], cpu::EncodeE4M3(cpu::Bf16ToFloat(b[i]) * sb));
  QB.scale_inv = &sb_inv;
  // FP8 and bf16 GEMMs through the engine equal the direct calls bit for bit.
  std::vector<float> d(m * n), d_ref(m * n);
  Poison(d);
  Poison(d_ref);
  TensorDesc D = MakeTensor(d.data(), DType::kFloat32, Shape{m, n});
  TensorDesc D_ref = MakeTensor(d_ref.data(), DType::kFloat32, Shape{m, n});
  ASSERT_TRUE(ops->Gemm(QA, false, QB, true, D, false, nullptr).ok());
  ASSERT_TRUE(cpu::Gemm(QA, false, QB, true, D_ref, false).ok());
  EXPECT_EQ(std::memcmp(d.data(), d_ref.data(), d.size() * 4), 0);
  ASSERT_TRUE(ops->Gemm(A, false, B, true, D, true, nullptr).ok());
  ASSERT_TRUE(cpu::Gemm(A, false, B, true, D_ref, true).ok());
  EXPECT_EQ(std::memcmp(d.data(), d_ref.data(), d.size() * 4), 0);
  // Dequantize and Amax through the engine.
  std::vector<float> back(m * k);
  Poison(back);
  ASSERT_TRUE(
      ops->Dequantize(QA, MakeTensor(back.data(), DType::kFloat32, Shape{m * k}), nullptr).ok());
  for (int i = 0; i < m * k; ++i) ASSERT_EQ(back[i], cpu::DecodeE4M3(qa[i]) * sa_inv);
  float amax2 = 0.f;
  ASSERT_TRUE(ops->Amax(A, &amax2, nullptr).ok());
  EXPECT_EQ(amax2, amax_ref);
  // Scale update through the engine.
  float hist[2] = {0.f, 0.f}, scale = 1.f, scale_inv = 1.f;
  ASSERT_TRUE(ops->UpdateFp8Scales(&amax2, hist, &scale, &scale_inv, 1, 1, 2, 448.f, 0,
                                   AmaxAlgo::kMax, nullptr)
                  .ok());
  EXPECT_EQ(scale, 448.f / amax_ref);
  EXPECT_EQ(amax2, 0.f);
}

TEST(CpuOps, FusedLossAndOptimizerMatchTheFreeFunctions) {
  std::unique_ptr<Ops> ops = CreateCpuOps();
  const int t = 10, h = 16, v = 30;
  std::vector<uint16_t> x = RandomBf16(t * h, 4), w = RandomBf16(v * h, 5, 0.5f);
  std::vector<int32_t> targets = RandomInts(t, 6, 0, v);
  targets[3] = -100;
  std::vector<uint16_t> gx(t * h), gx_ref(t * h);
  std::vector<float> gw = RandomFloats(v * h, 7), gw_ref = gw;
  float loss = 1.f, valid = 0.f, loss_ref = 1.f, valid_ref = 0.f;
  const TensorDesc X = MakeTensor(x.data(), DType::kBFloat16, Shape{t, h});
  const TensorDesc W = MakeTensor(w.data(), DType::kBFloat16, Shape{v, h});
  const TensorDesc Tg = MakeTensor(targets.data(), DType::kInt32, Shape{t});
  ASSERT_TRUE(ops->FusedLinearCrossEntropy(X, W, Tg, -100, 4, &loss, &valid,
                                           MakeTensor(gx.data(), DType::kBFloat16, Shape{t, h}),
                                           MakeTensor(gw.data(), DType::kFloat32, Shape{v, h}),
                                           /*accumulate_grad_weight=*/true, nullptr)
                  .ok());
  ASSERT_TRUE(cpu::FusedLinearCrossEntropy(X, W, Tg, -100, 4, &loss_ref, &valid_ref,
                                           MakeTensor(gx_ref.data(), DType::kBFloat16, Shape{t, h}),
                                           MakeTensor(gw_ref.data(), DType::kFloat32, Shape{v, h}),
                                           /*accumulate_grad_weight=*/true)
                  .ok());
  EXPECT_EQ(loss, loss_ref);
  EXPECT_EQ(valid, 9.f);
  EXPECT_EQ(gx, gx_ref);
  EXPECT_EQ(gw, gw_ref);

  // Optimizer: grad norm, grad scale and one AdamW step.
  const int numel = 40;
  std::vector<float> master = RandomFloats(numel, 8, 0.2f), grad = RandomFloats(numel, 9);
  std::vector<float> m(numel, 0.f), vv(numel, 0.f);
  std::vector<uint8_t> q(numel);
  Poison(q);
  float scale = 300.f, scale_inv = 0.f, amax = 0.f;
  AdamShard shard;
  shard.master = MakeTensor(master.data(), DType::kFloat32, Shape{numel});
  shard.grad = MakeTensor(grad.data(), DType::kFloat32, Shape{numel});
  shard.exp_avg = MakeTensor(m.data(), DType::kFloat32, Shape{numel});
  shard.exp_avg_sq = MakeTensor(vv.data(), DType::kFloat32, Shape{numel});
  shard.fp8 = MakeTensor(q.data(), DType::kE4M3, Shape{numel});
  shard.fp8.scale = &scale;
  shard.fp8.scale_inv = &scale_inv;
  shard.fp8.amax = &amax;
  auto plan = ops->CreateAdamPlan({shard});
  ASSERT_TRUE(plan.ok()) << plan.status();
  float sum_sq = 0.f, grad_norm = 0.f, grad_scale = 0.f;
  ASSERT_TRUE(ops->GradSumSquares(**plan, &sum_sq, nullptr).ok());
  float tokens = valid;
  ASSERT_TRUE(ops->ComputeGradScale(&sum_sq, &tokens, 0.1f, &grad_norm, &grad_scale, nullptr).ok());
  float sum_sq_ref = 0.f, norm_ref = 0.f, scale_ref = 0.f;
  ASSERT_TRUE(cpu::GradSumSquares(**plan, &sum_sq_ref).ok());
  ASSERT_TRUE(cpu::ComputeGradScale(&sum_sq_ref, &tokens, 0.1f, &norm_ref, &scale_ref).ok());
  EXPECT_EQ(sum_sq, sum_sq_ref);
  EXPECT_EQ(grad_norm, norm_ref);
  EXPECT_EQ(grad_scale, scale_ref);
  const std::vector<float> master_before = master;
  AdamHyper hp;
  hp.lr = 0.01f;
  hp.weight_decay = 0.1f;
  ASSERT_TRUE(ops->FusedAdam(**plan, hp, &grad_scale, nullptr).ok());
  float amax_want = 0.f;
  for (int i = 0; i < numel; ++i) {
    EXPECT_NE(master[i], master_before[i]) << i;
    ASSERT_EQ(q[i], cpu::EncodeE4M3(master[i] * scale)) << i;
    amax_want = std::max(amax_want, std::fabs(master[i]));
  }
  EXPECT_EQ(amax, amax_want);
}

TEST(CpuOps, ActivationOpsMatchTheFreeFunctions) {
  std::unique_ptr<Ops> ops = CreateCpuOps();
  const int b = 1, s = 6, nh = 4, nkv = 2, hd = 8, h = nh * hd, t = b * s, f = 12, v = 9;
  // Add and Cast.
  std::vector<float> a32 = RandomFloats(t * h, 10);
  std::vector<uint16_t> a16 = RandomBf16(t * h, 11), sum(t * h), sum_ref(t * h);
  const TensorDesc A32 = MakeTensor(a32.data(), DType::kFloat32, Shape{t, h});
  const TensorDesc A16 = MakeTensor(a16.data(), DType::kBFloat16, Shape{t, h});
  ASSERT_TRUE(
      ops->Add(A32, A16, MakeTensor(sum.data(), DType::kBFloat16, Shape{t, h}), nullptr).ok());
  ASSERT_TRUE(cpu::Add(A32, A16, MakeTensor(sum_ref.data(), DType::kBFloat16, Shape{t, h})).ok());
  EXPECT_EQ(sum, sum_ref);
  ASSERT_TRUE(ops->Cast(A32, MakeTensor(sum.data(), DType::kBFloat16, Shape{t, h}), nullptr).ok());
  for (int i = 0; i < t * h; ++i) ASSERT_EQ(sum[i], cpu::FloatToBf16(a32[i]));
  // Embedding forward and backward.
  std::vector<int32_t> ids = RandomInts(t, 12, 0, v);
  std::vector<float> table = RandomFloats(v * h, 13), emb(t * h), emb_ref(t * h);
  const TensorDesc Ids = MakeTensor(ids.data(), DType::kInt32, Shape{t});
  const TensorDesc Table = MakeTensor(table.data(), DType::kFloat32, Shape{v, h});
  ASSERT_TRUE(ops->EmbeddingForward(Ids, Table,
                                    MakeTensor(emb.data(), DType::kFloat32, Shape{t, h}), nullptr)
                  .ok());
  ASSERT_TRUE(
      cpu::EmbeddingForward(Ids, Table, MakeTensor(emb_ref.data(), DType::kFloat32, Shape{t, h}))
          .ok());
  EXPECT_EQ(emb, emb_ref);
  std::vector<float> gt = RandomFloats(v * h, 14), gt_ref = gt;
  ASSERT_TRUE(
      ops->EmbeddingBackward(Ids, A16, MakeTensor(gt.data(), DType::kFloat32, Shape{v, h}), 0, v,
                             nullptr)
          .ok());
  ASSERT_TRUE(
      cpu::EmbeddingBackward(Ids, A16, MakeTensor(gt_ref.data(), DType::kFloat32, Shape{v, h}), 0, v)
          .ok());
  EXPECT_EQ(gt, gt_ref);
  // RMSNorm forward and backward.
  std::vector<float> nw = RandomFloats(h, 15), rstd(t), rstd_ref(t);
  std::vector<uint16_t> y(t * h), y_ref(t * h), gx(t * h), gx_ref(t * h);
  std::vector<float> gnw = RandomFloats(h, 16), gnw_ref = gnw;
  const TensorDesc Nw = MakeTensor(nw.data(), DType::kFloat32, Shape{h});
  ASSERT_TRUE(ops->RmsNormForward(A16, Nw, 1e-5f,
                                  MakeTensor(y.data(), DType::kBFloat16, Shape{t, h}),
                                  MakeTensor(rstd.data(), DType::kFloat32, Shape{t}), nullptr)
                  .ok());
  ASSERT_TRUE(cpu::RmsNormForward(A16, Nw, 1e-5f,
                                  MakeTensor(y_ref.data(), DType::kBFloat16, Shape{t, h}),
                                  MakeTensor(rstd_ref.data(), DType::kFloat32, Shape{t}))
                  .ok());
  EXPECT_EQ(y, y_ref);
  EXPECT_EQ(rstd, rstd_ref);
  const TensorDesc Rstd = MakeTensor(rstd.data(), DType::kFloat32, Shape{t});
  ASSERT_TRUE(ops->RmsNormBackward(A16, A16, Nw, Rstd,
                                   MakeTensor(gx.data(), DType::kBFloat16, Shape{t, h}), false,
                                   MakeTensor(gnw.data(), DType::kFloat32, Shape{h}), nullptr)
                  .ok());
  ASSERT_TRUE(cpu::RmsNormBackward(A16, A16, Nw, Rstd,
                                   MakeTensor(gx_ref.data(), DType::kBFloat16, Shape{t, h}), false,
                                   MakeTensor(gnw_ref.data(), DType::kFloat32, Shape{h}))
                  .ok());
  EXPECT_EQ(gx, gx_ref);
  EXPECT_EQ(gnw, gnw_ref);
  // RoPE and attention on grouped-query heads, and SwiGLU.
  const int qkv_width = (nh + 2 * nkv) * hd;
  const Shape qkv_shape{b, s, nh + 2 * nkv, hd};
  std::vector<uint16_t> qkv = RandomBf16(t * qkv_width, 17), qkv_ref = qkv;
  ASSERT_TRUE(
      ops->RopeForward(MakeTensor(qkv.data(), DType::kBFloat16, qkv_shape), nkv, 10000.f, nullptr)
          .ok());
  ASSERT_TRUE(
      cpu::RopeForward(MakeTensor(qkv_ref.data(), DType::kBFloat16, qkv_shape), nkv, 10000.f).ok());
  EXPECT_EQ(qkv, qkv_ref);
  std::vector<uint16_t> back = qkv, back_ref = qkv;
  ASSERT_TRUE(
      ops->RopeBackward(MakeTensor(back.data(), DType::kBFloat16, qkv_shape), nkv, 10000.f, nullptr)
          .ok());
  ASSERT_TRUE(
      cpu::RopeBackward(MakeTensor(back_ref.data(), DType::kBFloat16, qkv_shape), nkv, 10000.f)
          .ok());
  EXPECT_EQ(back, back_ref);
  const TensorDesc Qkv = MakeTensor(qkv.data(), DType::kBFloat16, qkv_shape);
  // Two different NaN poisons, so an output left unwritten on either side
  // fails the comparison.
  auto poison_both = [](std::vector<uint16_t>& a, std::vector<uint16_t>& a_ref) {
    Poison(a);
    std::fill(a_ref.begin(), a_ref.end(), uint16_t{0x7FC1});
  };
  std::vector<uint16_t> out(t * h), out_ref(t * h);
  std::vector<float> lse(b * nh * s), lse_ref(b * nh * s);
  poison_both(out, out_ref);
  Poison(lse);
  Poison(lse_ref);
  const Shape out_shape{b, s, nh, hd};
  ASSERT_TRUE(ops->AttentionForward(Qkv, nkv, Ops::WholeSequences(),
                                    MakeTensor(out.data(), DType::kBFloat16, out_shape),
                                    MakeTensor(lse.data(), DType::kFloat32, Shape{b, nh, s}),
                                    nullptr)
                  .ok());
  ASSERT_TRUE(cpu::AttentionForward(Qkv, nkv,
                                    MakeTensor(out_ref.data(), DType::kBFloat16, out_shape),
                                    MakeTensor(lse_ref.data(), DType::kFloat32, Shape{b, nh, s}))
                  .ok());
  EXPECT_EQ(out, out_ref);
  EXPECT_EQ(lse, lse_ref);
  std::vector<uint16_t> gout = RandomBf16(t * h, 18), gqkv(t * qkv_width), gqkv_ref(t * qkv_width);
  poison_both(gqkv, gqkv_ref);
  const TensorDesc Gout = MakeTensor(gout.data(), DType::kBFloat16, out_shape);
  const TensorDesc Out = MakeTensor(out.data(), DType::kBFloat16, out_shape);
  const TensorDesc Lse = MakeTensor(lse.data(), DType::kFloat32, Shape{b, nh, s});
  ASSERT_TRUE(ops->AttentionBackward(Gout, Qkv, nkv, Ops::WholeSequences(), Out, Lse,
                                     MakeTensor(gqkv.data(), DType::kBFloat16, qkv_shape), nullptr)
                  .ok());
  ASSERT_TRUE(cpu::AttentionBackward(Gout, Qkv, nkv, Out, Lse,
                                     MakeTensor(gqkv_ref.data(), DType::kBFloat16, qkv_shape))
                  .ok());
  EXPECT_EQ(gqkv, gqkv_ref);
  // n_kv_heads reaches the engine: a count that does not fit is refused.
  for (absl::Status bad : {ops->AttentionForward(Qkv, 3, Ops::WholeSequences(), Out, Lse, nullptr),
                           ops->AttentionBackward(Gout, Qkv, 3, Ops::WholeSequences(), Out, Lse,
                                                  Qkv, nullptr),
                           ops->RopeForward(Qkv, 0, 10000.f, nullptr),
                           ops->RopeBackward(Qkv, 0, 10000.f, nullptr)}) {
    EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(bad.message().rfind("n_kv_heads:", 0), 0u) << bad;
  }
  std::vector<uint16_t> gu = RandomBf16(t * 2 * f, 19), act(t * f), act_ref(t * f);
  const TensorDesc Gu = MakeTensor(gu.data(), DType::kBFloat16, Shape{t, 2 * f});
  ASSERT_TRUE(
      ops->SwiGluForward(Gu, MakeTensor(act.data(), DType::kBFloat16, Shape{t, f}), nullptr).ok());
  ASSERT_TRUE(
      cpu::SwiGluForward(Gu, MakeTensor(act_ref.data(), DType::kBFloat16, Shape{t, f})).ok());
  EXPECT_EQ(act, act_ref);
  std::vector<uint16_t> ggu(t * 2 * f), ggu_ref(t * 2 * f);
  const TensorDesc Gact = MakeTensor(act.data(), DType::kBFloat16, Shape{t, f});
  ASSERT_TRUE(ops->SwiGluBackward(
                     Gact, Gu, MakeTensor(ggu.data(), DType::kBFloat16, Shape{t, 2 * f}), nullptr)
                  .ok());
  ASSERT_TRUE(
      cpu::SwiGluBackward(Gact, Gu, MakeTensor(ggu_ref.data(), DType::kBFloat16, Shape{t, 2 * f}))
          .ok());
  EXPECT_EQ(ggu, ggu_ref);
}

// RmsNormForwardQuantize is RmsNormForward into a bf16 tensor followed by
// QuantizeTranspose of it, byte for byte: codes, transposed codes (or out
// left alone when out.data is null), rstd, the max-combined amax and both
// scale_invs, for every dtype of x and weight and both FP8 formats.
TEST(CpuOps, RmsNormForwardQuantizeEqualsRmsNormThenQuantizeTranspose) {
  std::unique_ptr<Ops> ops = CreateCpuOps();
  const int t = 12, h = 40;
  const std::vector<float> x32 = RandomFloats(t * h, 30, 2.f), w32 = RandomFloats(h, 31);
  std::vector<uint16_t> x16 = RandomBf16(t * h, 32, 2.f), w16 = RandomBf16(h, 33);
  for (DType dx : {DType::kFloat32, DType::kBFloat16}) {
    for (DType dw : {DType::kFloat32, DType::kBFloat16}) {
      for (DType fp8 : {DType::kE4M3, DType::kE5M2}) {
        for (bool with_out : {true, false}) {
          SCOPED_TRACE(::testing::Message() << DTypeName(dx) << " x, " << DTypeName(dw)
                                          << " weight, " << DTypeName(fp8) << ", with_out "
                                          << with_out);
          const TensorDesc x = MakeTensor(
              dx == DType::kFloat32 ? static_cast<void*>(const_cast<float*>(x32.data()))
                                    : static_cast<void*>(x16.data()),
              dx, Shape{t, h});
          const TensorDesc w = MakeTensor(
              dw == DType::kFloat32 ? static_cast<void*>(const_cast<float*>(w32.data()))
                                    : static_cast<void*>(w16.data()),
              dw, Shape{h});
          // [0] through the op, [1] through the two ops.
          std::vector<uint8_t> codes[2], codes_t[2];
          std::vector<float> rstd[2];
          float scale = fp8 == DType::kE4M3 ? 300.f : 20000.f;
          float amax[2] = {0.5f, 0.5f}, scale_inv[2] = {-1.f, -1.f}, scale_inv_t[2] = {-1.f, -1.f};
          TensorDesc out[2], out_t[2];
          for (int k = 0; k < 2; ++k) {
            codes[k].resize(t * h);
            codes_t[k].resize(t * h);
            rstd[k].resize(t);
            Poison(codes[k]);
            Poison(codes_t[k]);
            Poison(rstd[k]);
            out[k] = MakeTensor(with_out ? codes[k].data() : nullptr, fp8, Shape{t, h});
            out[k].scale = &scale;
            out[k].amax = &amax[k];
            out[k].scale_inv = &scale_inv[k];
            out_t[k] = MakeTensor(codes_t[k].data(), fp8, Shape{h, t});
            out_t[k].scale_inv = &scale_inv_t[k];
          }
          ASSERT_TRUE(ops->RmsNormForwardQuantize(
                             x, w, 1e-5f, out[0], out_t[0],
                             MakeTensor(rstd[0].data(), DType::kFloat32, Shape{t}), nullptr)
                          .ok());
          std::vector<uint16_t> normed(t * h);
          const TensorDesc normed_desc = MakeTensor(normed.data(), DType::kBFloat16, Shape{t, h});
          ASSERT_TRUE(cpu::RmsNormForward(x, w, 1e-5f, normed_desc,
                                          MakeTensor(rstd[1].data(), DType::kFloat32, Shape{t}))
                          .ok());
          ASSERT_TRUE(cpu::QuantizeTranspose(normed_desc, out[1], out_t[1]).ok());
          EXPECT_EQ(codes[0], codes[1]);
          EXPECT_EQ(codes_t[0], codes_t[1]);
          EXPECT_EQ(std::memcmp(rstd[0].data(), rstd[1].data(), t * sizeof(float)), 0);
          EXPECT_EQ(amax[0], amax[1]);
          EXPECT_EQ(scale_inv[0], scale_inv[1]);
          EXPECT_EQ(scale_inv_t[0], scale_inv_t[1]);
          EXPECT_EQ(scale_inv[0], 1.0f / scale);
          // 0xFF (the poison) is no code the encoder writes: NaN becomes 0x7F.
          for (uint8_t c : codes_t[0]) ASSERT_NE(c, 0xFF);
          for (uint8_t c : codes[0]) ASSERT_EQ(c == 0xFF, !with_out);
        }
      }
    }
  }
  // Arguments are checked and named.
  std::vector<uint8_t> codes(t * h), codes_t(t * h);
  std::vector<float> rstd(t);
  float scale = 1.f;
  TensorDesc out = MakeTensor(codes.data(), DType::kE4M3, Shape{t, h});
  out.scale = &scale;
  const TensorDesc out_t = MakeTensor(codes_t.data(), DType::kE4M3, Shape{h, t});
  const TensorDesc x = MakeTensor(x16.data(), DType::kBFloat16, Shape{t, h});
  const TensorDesc w = MakeTensor(w16.data(), DType::kBFloat16, Shape{h});
  const TensorDesc r = MakeTensor(rstd.data(), DType::kFloat32, Shape{t});
  const absl::Status flat = ops->RmsNormForwardQuantize(
      MakeTensor(x16.data(), DType::kBFloat16, Shape{t * h}), w, 1e-5f, out, out_t, r, nullptr);
  EXPECT_EQ(flat.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(flat.message().rfind("x:", 0), 0u) << flat;
  const absl::Status bad_t = ops->RmsNormForwardQuantize(
      x, w, 1e-5f, out, MakeTensor(codes_t.data(), DType::kE4M3, Shape{t, h}), r, nullptr);
  EXPECT_EQ(bad_t.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad_t.message().rfind("out_t:", 0), 0u) << bad_t;
}

// CountDocuments: a document begins at every sequence's first token and
// wherever a start equals its position; longest counts tokens.
TEST(CountDocuments, CountsEachSequencesDocuments) {
  // Two sequences of 6: [0 0 2 2 2 5] holds 3 (2, 3 and 1 tokens); [0 0 0 0 0 0] one of 6.
  const std::vector<int32_t> starts = {0, 0, 2, 2, 2, 5, 0, 0, 0, 0, 0, 0};
  const DocumentCounts c = CountDocuments(starts, 6);
  EXPECT_EQ(c.count, 4);
  EXPECT_EQ(c.longest, 6);
  // Lengths 2, 3, 1 and 6: classes 1 (2), 2 (3..4), 0 (1) and 3 (5..8).
  EXPECT_EQ(c.per_length_class[0], 1);
  EXPECT_EQ(c.per_length_class[1], 1);
  EXPECT_EQ(c.per_length_class[2], 1);
  EXPECT_EQ(c.per_length_class[3], 1);
  EXPECT_EQ(DocumentCounts::LengthClass(1024), 10);
  EXPECT_EQ(DocumentCounts::LengthClass(1025), 11);
  const DocumentCounts first = CountDocuments(absl::MakeConstSpan(starts.data(), 6), 6);
  EXPECT_EQ(first.count, 3);
  EXPECT_EQ(first.longest, 3);
  const std::vector<int32_t> singles = {0, 1, 2, 3};
  EXPECT_EQ(CountDocuments(singles, 4).count, 4);
  EXPECT_EQ(CountDocuments(singles, 4).longest, 1);
  EXPECT_EQ(CountDocuments({}, 4).count, 0);
}

// The host's count of the documents, which the CUDA engine plans cuDNN's
// ragged batches from, is checked against the starts: a wrong one is
// INVALID_ARGUMENT naming the field, and the right one changes nothing.
TEST(CpuOps, AttentionChecksTheHostsCountOfTheDocuments) {
  std::unique_ptr<Ops> ops = CreateCpuOps();
  const int b = 2, s = 6, nh = 2, nkv = 1, hd = 4;
  std::vector<uint16_t> qkv = RandomBf16(b * s * (nh + 2 * nkv) * hd, 31);
  std::vector<uint16_t> out(b * s * nh * hd), out_ref(b * s * nh * hd);
  std::vector<float> lse(b * nh * s), lse_ref(b * nh * s);
  std::vector<int32_t> starts = {0, 0, 2, 2, 2, 5, 0, 0, 0, 0, 0, 0};
  const TensorDesc Qkv = MakeTensor(qkv.data(), DType::kBFloat16, Shape{b, s, nh + 2 * nkv, hd});
  const TensorDesc Starts = MakeTensor(starts.data(), DType::kInt32, Shape{b, s});
  const auto out_of = [&](std::vector<uint16_t>& o) {
    return MakeTensor(o.data(), DType::kBFloat16, Shape{b, s, nh, hd});
  };
  const auto lse_of = [&](std::vector<float>& l) {
    return MakeTensor(l.data(), DType::kFloat32, Shape{b, nh, s});
  };
  ASSERT_TRUE(ops->AttentionForward(Qkv, nkv, AttentionDocuments(Starts, CountDocuments(starts, s)), out_of(out),
                                    lse_of(lse), nullptr)
                  .ok());
  ASSERT_TRUE(
      cpu::AttentionForward(Qkv, nkv, out_of(out_ref), lse_of(lse_ref), Starts).ok());
  EXPECT_EQ(out, out_ref);
  EXPECT_EQ(lse, lse_ref);
  DocumentCounts wrong = CountDocuments(starts, s);
  wrong.count = 3;
  const absl::Status count = ops->AttentionForward(Qkv, nkv, AttentionDocuments(Starts, wrong),
                                                   out_of(out), lse_of(lse), nullptr);
  EXPECT_EQ(count.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(count.message().find("documents.counts.count: 3, but doc_starts holds 4"),
            std::string::npos)
      << count;
  wrong = CountDocuments(starts, s);
  --wrong.per_length_class[2];  // the 3-token document
  ++wrong.per_length_class[3];
  const absl::Status classes = ops->AttentionForward(Qkv, nkv, AttentionDocuments(Starts, wrong),
                                                     out_of(out), lse_of(lse), nullptr);
  EXPECT_EQ(classes.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(classes.message().find("documents.counts.per_length_class[2]: 0, but doc_starts "
                                   "holds 1 documents of 3..4 tokens"),
            std::string::npos)
      << classes;
  wrong = CountDocuments(starts, s);
  wrong.longest = 5;
  std::vector<uint16_t> grad_out = RandomBf16(b * s * nh * hd, 32), grad(qkv.size());
  const absl::Status longest = ops->AttentionBackward(
      MakeTensor(grad_out.data(), DType::kBFloat16, Shape{b, s, nh, hd}), Qkv, nkv,
      AttentionDocuments(Starts, wrong), out_of(out_ref), lse_of(lse_ref),
      MakeTensor(grad.data(), DType::kBFloat16, Qkv.shape), nullptr);
  EXPECT_EQ(longest.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(longest.message().find("documents.counts.longest: 5"), std::string::npos) << longest;
  const absl::Status whole = ops->AttentionForward(
      Qkv, nkv, AttentionDocuments(Ops::WholeSequences(), CountDocuments(starts, s)), out_of(out),
      lse_of(lse), nullptr);
  EXPECT_EQ(whole.code(), absl::StatusCode::kInvalidArgument) << whole;
}

}  // namespace
}  // namespace tessera
