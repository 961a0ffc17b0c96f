// FP8 statistics (fp8.stats_interval_steps) on the CPU engine, the
// specification:
//  - every statistics step reports each block linear's weight, input and
//    gradient; the steps between report nothing, call no Fp8Stats and
//    allocate nothing;
//  - measuring changes nothing: losses and weights are bit-identical to a
//    run without statistics, under delayed scaling (fused casts, measured
//    from the bf16 tensors written again) and current scaling;
//  - the counts are those of the real casts: an engine decorator counts,
//    on the host, the saturated codes every activation and gradient cast of
//    the step wrote (and, where the cast's input is at hand, the nonzero
//    values it wrote as zero), and the weights' saturated codes are counted
//    in the gathered weight bytes; each total equals the reported one.
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/engine/cpu/cpu_ops.h"
#include "worker/engine/cpu/fp8.h"
#include "worker/engine/cpu/tensor_access.h"
#include "worker/trainer/counting_ops.h"
#include "worker/trainer/fsdp_trainer.h"
#include "worker/trainer/test_job_spec.h"

namespace tessera {
namespace {

using Role = Fp8TensorReport::Role;

// What the casts of a step wrote, counted on the host from their outputs.
struct CastCounts {
  int64_t saturated = 0;
  int64_t underflowed = 0;  // only from casts whose input is at hand
};

// Forwards to the CPU engine; while `counting`, counts the codes each FP8
// activation or gradient cast writes (its transposed output, always
// written), per format.
class CastCountingOps : public CountingOps {
 public:
  explicit CastCountingOps(std::map<DType, CastCounts>* counts, const bool* counting)
      : CountingOps(CreateCpuOps()), counts_(counts), counting_(counting) {}

  absl::Status QuantizeTranspose(const TensorDesc& in, const TensorDesc& out,
                                 const TensorDesc& out_t, Stream* s) override {
    RETURN_IF_ERROR(CountingOps::QuantizeTranspose(in, out, out_t, s));
    Count(out.dtype, out_t, &in);
    return absl::OkStatus();
  }
  absl::Status RmsNormForwardQuantize(const TensorDesc& x, const TensorDesc& weight, float eps,
                                      const TensorDesc& out, const TensorDesc& out_t,
                                      const TensorDesc& rstd, Stream* s) override {
    RETURN_IF_ERROR(CountingOps::RmsNormForwardQuantize(x, weight, eps, out, out_t, rstd, s));
    Count(out.dtype, out_t, nullptr);
    return absl::OkStatus();
  }
  absl::Status SwiGluForwardQuantize(const TensorDesc& gate_up, const TensorDesc& out,
                                     const TensorDesc& out_t, Stream* s) override {
    RETURN_IF_ERROR(CountingOps::SwiGluForwardQuantize(gate_up, out, out_t, s));
    Count(out.dtype, out_t, nullptr);
    return absl::OkStatus();
  }
  absl::Status SwiGluBackwardQuantize(const TensorDesc& grad_out, const TensorDesc& gate_up,
                                      const TensorDesc& dgu, const TensorDesc& dgu_t,
                                      Stream* s) override {
    RETURN_IF_ERROR(CountingOps::SwiGluBackwardQuantize(grad_out, gate_up, dgu, dgu_t, s));
    Count(dgu.dtype, dgu_t, nullptr);
    return absl::OkStatus();
  }

 private:
  // codes_t [C, R] is the transpose of in [R, C].
  void Count(DType format, const TensorDesc& codes_t, const TensorDesc* in) {
    if (!*counting_) return;
    const uint8_t max_code = cpu::EncodeFp8(format, cpu::Fp8Max(format));
    const auto* codes = static_cast<const uint8_t*>(codes_t.data);
    const int64_t cols = codes_t.shape.dims[0], rows = codes_t.NumElements() / cols;
    CastCounts& c = (*counts_)[format];
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t col = 0; col < cols; ++col) {
        const uint8_t magnitude = codes[col * rows + r] & 0x7F;
        if (magnitude == max_code) ++c.saturated;
        if (in != nullptr && magnitude == 0) {
          const float v = cpu::Load(*in, r * cols + col);
          if (v != 0.f && !std::isnan(v)) ++c.underflowed;
        }
      }
    }
  }

  std::map<DType, CastCounts>* counts_;
  const bool* counting_;
};

BlockLinear LinearNamed(const std::string& name) {
  for (const BlockLinear linear : kEveryBlockLinear) {
    if (name == BlockLinearName(linear)) return linear;
  }
  ADD_FAILURE() << "no block linear " << name;
  return BlockLinear::kQkv;
}

v1::JobSpec Watched(bool current_scaling, int interval) {
  v1::JobSpec spec = TinyCpuTestJobSpec(2);
  spec.mutable_optimizer()->set_lr(3e-2f);  // large updates: the scales move
  if (current_scaling) spec.mutable_fp8()->mutable_current();
  spec.mutable_fp8()->set_stats_interval_steps(interval);
  return spec;
}

struct TrainedRun {
  std::vector<float> losses;
  std::vector<std::vector<uint8_t>> weights;  // every block linear, after the run
  std::vector<std::vector<Fp8TensorReport>> stats;  // per step
};

TrainedRun Train(const v1::JobSpec& spec, int steps) {
  FsdpTrainer trainer(CreateCpuOps(), CreateGlooCommunicator);
  TrainedRun run;
  EXPECT_TRUE(trainer.Setup(spec, 0, 1).ok());
  EXPECT_TRUE(trainer.InitCollective(nullptr, "127.0.0.1", absl::Seconds(10)).ok());
  for (int s = 0; s < steps; ++s) {
    absl::StatusOr<StepReport> report = trainer.RunStep(s);
    EXPECT_TRUE(report.ok()) << report.status();
    if (!report.ok()) return run;
    run.losses.push_back(report->loss);
    run.stats.push_back(report->fp8_stats);
  }
  for (int l = 0; l < spec.model().n_layers(); ++l) {
    for (const BlockLinear linear : kEveryBlockLinear) {
      run.weights.push_back(*trainer.GatheredWeightBytes(l, linear));
    }
  }
  return run;
}

class Fp8StepStatsTest : public ::testing::TestWithParam<bool> {};  // current scaling?

TEST_P(Fp8StepStatsTest, MeasuringChangesNoBit) {
  const int steps = 7;
  const TrainedRun plain = Train(Watched(GetParam(), 0), steps);
  const TrainedRun watched = Train(Watched(GetParam(), 3), steps);
  ASSERT_EQ(plain.losses.size(), steps);
  ASSERT_EQ(watched.losses.size(), steps);
  for (int s = 0; s < steps; ++s) {
    EXPECT_EQ(plain.losses[s], watched.losses[s]) << "step " << s;  // bit for bit
    EXPECT_TRUE(plain.stats[s].empty());
    const int layers = Watched(GetParam(), 3).model().n_layers();
    EXPECT_EQ(watched.stats[s].size(), s % 3 == 0 ? layers * kBlockLinears * 3 : 0) << s;
  }
  EXPECT_EQ(plain.weights, watched.weights);
}

TEST_P(Fp8StepStatsTest, StepsBetweenMeasureNothingAndAllocateNothing) {
  FsdpTrainer trainer(CreateCpuOps(), CreateGlooCommunicator);
  ASSERT_TRUE(trainer.Setup(Watched(GetParam(), 4), 0, 1).ok());
  ASSERT_TRUE(trainer.InitCollective(nullptr, "127.0.0.1", absl::Seconds(10)).ok());
  const int64_t allocations = trainer.allocation_count();
  for (int s = 0; s < 9; ++s) {
    const int64_t calls = trainer.fp8_stats_call_count();
    absl::StatusOr<StepReport> report = trainer.RunStep(s);
    ASSERT_TRUE(report.ok()) << report.status();
    if (s % 4 == 0) {
      EXPECT_GT(trainer.fp8_stats_call_count(), calls) << s;
    } else {
      EXPECT_EQ(trainer.fp8_stats_call_count(), calls) << s;
      EXPECT_TRUE(report->fp8_stats.empty()) << s;
    }
  }
  EXPECT_EQ(trainer.allocation_count(), allocations);
}

TEST_P(Fp8StepStatsTest, CountsAreThoseOfTheRealCasts) {
  const bool current = GetParam();
  const v1::JobSpec spec = Watched(current, 1);
  std::map<DType, CastCounts> cast_counts;
  bool counting = false;
  FsdpTrainer trainer(std::make_unique<CastCountingOps>(&cast_counts, &counting),
                      CreateGlooCommunicator);
  ASSERT_TRUE(trainer.Setup(spec, 0, 1).ok());
  ASSERT_TRUE(trainer.InitCollective(nullptr, "127.0.0.1", absl::Seconds(10)).ok());
  int64_t saturated_seen = 0, underflowed_seen = 0;
  for (int s = 0; s < 6; ++s) {
    cast_counts.clear();
    counting = true;
    absl::StatusOr<StepReport> report = trainer.RunStep(s);
    counting = false;
    ASSERT_TRUE(report.ok()) << report.status();
    std::map<DType, CastCounts> reported;
    for (const Fp8TensorReport& t : report->fp8_stats) {
      if (t.role == Role::kWeight) {
        // The bytes the weight was just encoded into.
        const std::vector<uint8_t> bytes =
            *trainer.GatheredWeightBytes(t.block, LinearNamed(t.linear));
        int64_t max_codes = 0, zero_codes = 0;
        for (uint8_t code : bytes) {
          max_codes += (code & 0x7F) == 0x7E ? 1 : 0;
          zero_codes += (code & 0x7F) == 0 ? 1 : 0;
        }
        EXPECT_EQ(t.saturated, max_codes) << "step " << s << " block " << t.block << " " << t.linear;
        EXPECT_LE(t.underflowed, zero_codes);
        EXPECT_EQ(t.elements, static_cast<int64_t>(bytes.size()));
        EXPECT_FALSE(t.e5m2);
        EXPECT_GT(t.amax, 0.f);
        EXPECT_GT(t.scale, 0.f);
      } else {
        CastCounts& r = reported[t.e5m2 ? DType::kE5M2 : DType::kE4M3];
        r.saturated += t.saturated;
        r.underflowed += t.underflowed;
        EXPECT_EQ(t.e5m2, t.role == Role::kGradient);
        EXPECT_GT(t.elements, 0);
        EXPECT_GT(t.scale, 0.f);
      }
      saturated_seen += t.saturated;
      underflowed_seen += t.underflowed;
    }
    for (DType format : {DType::kE4M3, DType::kE5M2}) {
      EXPECT_EQ(reported[format].saturated, cast_counts[format].saturated)
          << "step " << s << " " << DTypeName(format);
      // Unfused casts (current scaling) show their input: then underflow is
      // checked exactly too.
      if (current) {
        EXPECT_EQ(reported[format].underflowed, cast_counts[format].underflowed)
            << "step " << s << " " << DTypeName(format);
      }
    }
  }
  // The figures compared were not all zero.
  EXPECT_GT(saturated_seen, 0);
  EXPECT_GT(underflowed_seen, 0);
}

INSTANTIATE_TEST_SUITE_P(Scaling, Fp8StepStatsTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Current" : "Delayed";
                         });

}  // namespace
}  // namespace tessera
