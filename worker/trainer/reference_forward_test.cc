// The whole model's forward pass against a naive fp64 reference written
// here from the model's definition (fsdp_trainer.h), independent of the
// engine: after some training steps (so the weights are far from their
// near-uniform init and every component matters), the test reads the rank's
// checkpoint (master weights and FP8 scales), rebuilds the compute weights
// the next step uses (bf16 rounding; e4m3 rounding with the encode scale for
// FP8 block weights), and compares the next step's reported loss with the
// reference loss on the same batch. The reference rounds the inputs of the
// FP8 GEMMs to e4m3 with the step's input scales, and nothing else: every
// other activation stays in fp64. Run for FP8 with delayed scaling, FP8 with
// current scaling, and FP8 off, each with multi-head attention, and with
// grouped-query attention (4 query heads sharing 2 or 1 key/value heads).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/fp8_meta_layout.h"
#include "gtest/gtest.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/data/batch_source.h"
#include "worker/engine/cpu/cpu_ops.h"
#include "worker/trainer/fsdp_trainer.h"
#include "worker/trainer/test_job_spec.h"

namespace tessera {
namespace {

using Matrix = std::vector<double>;  // row-major

constexpr int kWarmSteps = 30;

// ---- Number formats ---------------------------------------------------------

double RoundBf16(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  bits += 0x7fff + ((bits >> 16) & 1);  // round to nearest even
  bits &= 0xffff0000u;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

// Nearest e4m3 value (3 mantissa bits, min normal 2^-6, saturating at 448).
double RoundE4m3(double v) {
  const double a = std::fabs(v);
  if (a == 0) return 0;
  const int exponent = std::max(-6, static_cast<int>(std::floor(std::log2(a))));
  const double quantum = std::ldexp(1.0, exponent - 3);
  const double r = std::min(448.0, std::nearbyint(a / quantum) * quantum);
  return std::copysign(r, v);
}

void QuantizeE4m3(Matrix& x, double scale) {
  for (double& v : x) v = RoundE4m3(v * scale) / scale;
}

double AbsMax(const Matrix& x) {
  double m = 0;
  for (double v : x) m = std::max(m, std::fabs(v));
  return m;
}

// ---- The checkpoint (format in fsdp_checkpoint.cc) --------------------------

struct Checkpointed {
  std::map<std::string, std::vector<float>> master;
  std::vector<float> fp8_state;
};

// `manifest_path` is what Checkpoint returns; the state file lies beside it.
Checkpointed ReadCheckpoint(const std::string& manifest_path) {
  Checkpointed c;
  const std::string path =
      manifest_path.substr(0, manifest_path.rfind('/')) + "/rank-0.state";
  std::ifstream in(path, std::ios::binary);
  char magic[8] = {};
  int64_t header[5] = {};  // step, rank, world, data position, parameters
  in.read(magic, 8);
  in.read(reinterpret_cast<char*>(header), sizeof(header));
  EXPECT_EQ(std::string(magic, 8), "TSRSTAT1");
  EXPECT_EQ(header[2], 1) << "world";
  for (int64_t p = 0; p < header[4] && in; ++p) {
    int64_t len = 0;
    in.read(reinterpret_cast<char*>(&len), 8);
    std::string name(len, '\0');
    in.read(name.data(), len);
    int64_t shape[5] = {};  // rows, cols, compute dtype, first element, n
    in.read(reinterpret_cast<char*>(shape), sizeof(shape));
    const int64_t n = shape[4];
    std::vector<float> values(n);
    in.read(reinterpret_cast<char*>(values.data()), n * 4);
    const int64_t compute_bytes = n * (shape[2] == static_cast<int64_t>(DType::kE4M3) ? 1 : 2);
    in.seekg(2 * n * 4 + compute_bytes, std::ios::cur);  // Adam m and v, compute copy
    c.master[name] = std::move(values);
  }
  int64_t m = 0;
  in.read(reinterpret_cast<char*>(&m), 8);
  c.fp8_state.resize(m);
  in.read(reinterpret_cast<char*>(c.fp8_state.data()), m * 4);
  EXPECT_TRUE(in.good()) << "truncated checkpoint " << path;
  return c;
}

// ---- The reference model ------------------------------------------------------

struct Reference {
  int64_t v, h, f, nh, nkv, hd, b, s, t;
  int layers;
  double eps, theta;
  const v1::Fp8Recipe* recipe;
  bool fp8;
  Checkpointed ckpt;

  Fp8MetaLayout layout() const { return Fp8MetaLayout::For(layers, *recipe); }
  // The checkpointed value of the FP8 state's float at `engine_offset`.
  double FromCheckpoint(int64_t engine_offset) const {
    const std::vector<int64_t> order = layout().CheckpointOrder();
    const auto at = std::find(order.begin(), order.end(), engine_offset);
    EXPECT_NE(at, order.end()) << engine_offset;
    return at == order.end() ? 0.0 : ckpt.fp8_state.at(at - order.begin());
  }

  // The compute copy of a parameter: bf16, or e4m3 with its encode scale.
  Matrix Weight(const std::string& name, int linear) const {
    const std::vector<float>& m = ckpt.master.at(name);
    Matrix w(m.size());
    if (linear < 0 || !fp8) {
      for (size_t i = 0; i < m.size(); ++i) w[i] = RoundBf16(m[i]);
      return w;
    }
    const double scale = 1.0 / FromCheckpoint(layout().weight_data_scale_inv_offset() +
                                              Fp8MetaLayout::kScaleInvStride * linear);
    for (size_t i = 0; i < m.size(); ++i) w[i] = RoundE4m3(m[i] * scale) / scale;
    return w;
  }

  // y [T, out] = x [T, in] · W[out, in]ᵀ, the input quantized when FP8.
  Matrix Linear(Matrix x, const Matrix& w, int64_t in, int64_t out, int linear) const {
    if (fp8) {
      const LinearId id{linear / kBlockLinears, static_cast<BlockLinear>(linear % kBlockLinears)};
      // This step's input scale.
      double scale = FromCheckpoint(layout().scale4_offset() + layout().InputSlot(id).index);
      if (recipe->has_current()) scale = 448.0 / AbsMax(x) / std::exp2(recipe->current().margin());
      QuantizeE4m3(x, scale);
    }
    Matrix y(t * out, 0.0);
    for (int64_t i = 0; i < t; ++i) {
      for (int64_t o = 0; o < out; ++o) {
        double acc = 0;
        for (int64_t k = 0; k < in; ++k) acc += x[i * in + k] * w[o * in + k];
        y[i * out + o] = acc;
      }
    }
    return y;
  }

  Matrix RmsNorm(const Matrix& x, const Matrix& w) const {
    Matrix y(x.size());
    for (int64_t i = 0; i < t; ++i) {
      double ss = 0;
      for (int64_t j = 0; j < h; ++j) ss += x[i * h + j] * x[i * h + j];
      const double r = 1.0 / std::sqrt(ss / h + eps);
      for (int64_t j = 0; j < h; ++j) y[i * h + j] = x[i * h + j] * r * w[j];
    }
    return y;
  }

  // qkv [T, nh + 2*nkv, hd] (per token nh query heads, then nkv key heads,
  // then nkv value heads) -> attention output [T, nh, hd], RoPE on the query
  // and key heads; query head q reads kv head q / (nh / nkv).
  Matrix Attention(Matrix qkv) const {
    const int64_t half = hd / 2, width = nh + 2 * nkv;
    for (int64_t i = 0; i < t; ++i) {
      const int64_t pos = i % s;
      for (int64_t head = 0; head < nh + nkv; ++head) {
        double* x = &qkv[(i * width + head) * hd];
        for (int64_t k = 0; k < half; ++k) {
          const double angle = pos * std::pow(theta, -2.0 * k / hd);
          const double a = x[k], c = x[k + half];
          x[k] = a * std::cos(angle) - c * std::sin(angle);
          x[k + half] = c * std::cos(angle) + a * std::sin(angle);
        }
      }
    }
    Matrix out(t * h, 0.0);
    auto query = [&](int64_t token, int64_t head) { return &qkv[(token * width + head) * hd]; };
    auto key = [&](int64_t token, int64_t kv) { return &qkv[(token * width + nh + kv) * hd]; };
    auto value = [&](int64_t token, int64_t kv) {
      return &qkv[(token * width + nh + nkv + kv) * hd];
    };
    for (int64_t batch = 0; batch < b; ++batch) {
      for (int64_t head = 0; head < nh; ++head) {
        const int64_t kv = head / (nh / nkv);
        for (int64_t qi = 0; qi < s; ++qi) {
          const double* q = query(batch * s + qi, head);
          std::vector<double> p(qi + 1);
          double max_score = -1e300, sum = 0;
          for (int64_t ki = 0; ki <= qi; ++ki) {
            const double* k = key(batch * s + ki, kv);
            double dot = 0;
            for (int64_t d = 0; d < hd; ++d) dot += q[d] * k[d];
            p[ki] = dot / std::sqrt(static_cast<double>(hd));
            max_score = std::max(max_score, p[ki]);
          }
          for (double& e : p) sum += (e = std::exp(e - max_score));
          double* o = &out[((batch * s + qi) * nh + head) * hd];
          for (int64_t ki = 0; ki <= qi; ++ki) {
            const double* val = value(batch * s + ki, kv);
            for (int64_t d = 0; d < hd; ++d) o[d] += p[ki] / sum * val[d];
          }
        }
      }
    }
    return out;
  }

  double Loss(const std::vector<int32_t>& inputs, const std::vector<int32_t>& targets) const {
    const Matrix emb = Weight("embedding", -1);
    Matrix x(t * h);
    for (int64_t i = 0; i < t; ++i) {
      for (int64_t j = 0; j < h; ++j) x[i * h + j] = emb[inputs[i] * h + j];
    }
    for (int l = 0; l < layers; ++l) {
      const std::string p = absl::StrCat("blocks.", l, ".");
      Matrix qkv = Linear(RmsNorm(x, Weight(p + "attn_norm", -1)), Weight(p + "qkv", 4 * l),
                          h, (nh + 2 * nkv) * hd, 4 * l);
      Matrix attn = Linear(Attention(std::move(qkv)), Weight(p + "out_proj", 4 * l + 1), h, h,
                           4 * l + 1);
      for (int64_t i = 0; i < t * h; ++i) x[i] += attn[i];
      Matrix gu = Linear(RmsNorm(x, Weight(p + "mlp_norm", -1)), Weight(p + "gate_up", 4 * l + 2),
                         h, 2 * f, 4 * l + 2);
      Matrix act(t * f);
      for (int64_t i = 0; i < t; ++i) {
        for (int64_t j = 0; j < f; ++j) {
          const double g = gu[i * 2 * f + j], u = gu[i * 2 * f + f + j];
          act[i * f + j] = g / (1.0 + std::exp(-g)) * u;
        }
      }
      Matrix down = Linear(std::move(act), Weight(p + "down", 4 * l + 3), f, h, 4 * l + 3);
      for (int64_t i = 0; i < t * h; ++i) x[i] += down[i];
    }
    const Matrix hf = RmsNorm(x, Weight("final_norm", -1));
    const Matrix head = Weight("lm_head", -1);
    double total = 0;
    int64_t valid = 0;
    for (int64_t i = 0; i < t; ++i) {
      if (targets[i] == kIgnoreIndex) continue;
      std::vector<double> logits(v);
      double max_logit = -1e300, sum = 0;
      for (int64_t c = 0; c < v; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < h; ++j) acc += hf[i * h + j] * head[c * h + j];
        logits[c] = acc;
        max_logit = std::max(max_logit, acc);
      }
      for (double lg : logits) sum += std::exp(lg - max_logit);
      total += max_logit + std::log(sum) - logits[targets[i]];
      ++valid;
    }
    return total / std::max<int64_t>(1, valid);
  }
};

struct Case {
  const char* name;
  int recipe;  // 0: FP8 delayed, 1: FP8 current, 2: bf16
  int n_kv_heads;  // 0: the multi-head tiny job; else 4 query heads sharing this many
  double tolerance;
  uint32_t seed;  // weights and data
};

class ReferenceForward : public ::testing::TestWithParam<Case> {};

TEST_P(ReferenceForward, StepLossMatchesFp64Reference) {
  const Case& c = GetParam();
  v1::JobSpec spec =
      c.n_kv_heads == 0 ? TinyCpuTestJobSpec(2) : TinyCpuGqaTestJobSpec(2, c.n_kv_heads);
  spec.set_seed(c.seed);  // fixed per case: the suite must be deterministic
  if (c.recipe == 1) spec.mutable_fp8()->mutable_current()->set_margin(1);
  if (c.recipe == 2) spec.mutable_fp8()->set_disabled(true);
  SCOPED_TRACE(absl::StrCat("seed ", spec.seed()));

  FsdpTrainer trainer(CreateCpuOps(), CreateGlooCommunicator);
  ASSERT_TRUE(trainer.Setup(spec, 0, 1).ok());
  ASSERT_TRUE(trainer.InitCollective(nullptr, "127.0.0.1", absl::Seconds(5)).ok());
  for (int step = 0; step < kWarmSteps; ++step) ASSERT_TRUE(trainer.RunStep(step).ok());
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/ref-", c.name);
  auto path = trainer.Checkpoint(kWarmSteps, dir);
  ASSERT_TRUE(path.ok()) << path.status();
  auto report = trainer.RunStep(kWarmSteps);
  ASSERT_TRUE(report.ok()) << report.status();

  const v1::ModelConfig& m = spec.model();
  const int64_t kv_heads = m.n_kv_heads() == 0 ? m.n_heads() : m.n_kv_heads();
  Reference ref{m.vocab_size(), m.d_model(), m.ffn_dim(), m.n_heads(), kv_heads,
                m.d_model() / m.n_heads(), spec.data().micro_batch_size(), m.seq_len(),
                spec.data().micro_batch_size() * m.seq_len(), m.n_layers(), m.norm_eps(),
                m.rope_theta(), &spec.fp8(), !spec.fp8().disabled(), ReadCheckpoint(*path)};
  ASSERT_EQ(ref.ckpt.master.size(), 3u + 6u * m.n_layers());
  auto data = OpenBatchSource(spec, 0, 1);
  ASSERT_TRUE(data.ok());
  std::vector<int32_t> inputs(ref.t, -1), targets(ref.t, -1);
  ASSERT_TRUE((*data)->ReadBatch(kWarmSteps, absl::MakeSpan(inputs), absl::MakeSpan(targets)).ok());
  const double want = ref.Loss(inputs, targets);

  // Trained weights: the loss is well below the uniform ln(V) = 4.16, so
  // the whole network, not just the LM head's bias-free init, shapes it.
  EXPECT_LT(want, std::log(static_cast<double>(ref.v)) - 0.5);
  std::cout << c.name << ": trainer loss " << report->loss << ", fp64 reference " << want
            << ", difference " << report->loss - want << "\n";
  EXPECT_NEAR(report->loss, want, c.tolerance) << c.name;
}

// Tolerance 1e-3 nats (absolute) for every case: over 136 random seeds per
// case the largest |difference| measured was 5.9e-4 (bf16 activations with
// fp32 accumulation against fp64, and FP8 inputs landing on the other side
// of an e4m3 rounding boundary). A structural error (RoPE, residual, norm,
// layout, a wrong FP8 scale) moves the loss by far more. Leaving the e4m3
// rounding out of the reference moves it by ~2e-4, so this test pins the
// scales and the wiring, not the last FP8 bit (the engine's own tests do
// that, and the engine's attention test pins which kv head a query head
// reads: after 30 steps this model's loss barely depends on it).
INSTANTIATE_TEST_SUITE_P(Recipes, ReferenceForward,
                         ::testing::Values(Case{"fp8_delayed", 0, 0, 1e-3, 11},
                                           Case{"fp8_current", 1, 0, 1e-3, 12},
                                           Case{"bf16", 2, 0, 1e-3, 13},
                                           Case{"gqa2_fp8_delayed", 0, 2, 1e-3, 14},
                                           Case{"gqa1_fp8_current", 1, 1, 1e-3, 15},
                                           Case{"gqa1_bf16", 2, 1, 1e-3, 16}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace tessera
