// Device strings: "cpu" describes the host and builds a working CPU trainer;
// malformed strings are INVALID_ARGUMENT naming the device; an absent CUDA
// ordinal is NOT_FOUND or UNAVAILABLE, never a crash.
#include "worker/trainer/trainer_factory.h"

#include <vector>

#include "gtest/gtest.h"
#include "worker/trainer/test_job_spec.h"

namespace tessera {
namespace {

TEST(TrainerFactory, DescribesTheCpu) {
  absl::StatusOr<v1::DeviceInfo> info = DescribeDevice("cpu");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->kind(), v1::CPU);
  EXPECT_EQ(info->index(), 0);
  EXPECT_EQ(info->name().rfind("cpu (", 0), 0u) << info->name();
  EXPECT_NE(info->name().find(" cores)"), std::string::npos) << info->name();
  EXPECT_GT(info->memory_bytes(), int64_t{1} << 20);
  EXPECT_FALSE(info->host().empty());
}

TEST(TrainerFactory, MalformedDevicesAreInvalidArgument) {
  for (const char* device : {"", "CPU", "gpu", "cuda", "cuda:", "cuda:x", "cuda:-1", "cuda:1x",
                             "cpu:0", " cpu"}) {
    absl::StatusOr<v1::DeviceInfo> info = DescribeDevice(device);
    EXPECT_EQ(info.status().code(), absl::StatusCode::kInvalidArgument) << "'" << device << "'";
    EXPECT_NE(info.status().message().find("device"), absl::string_view::npos);
    EXPECT_EQ(CreateTrainer(device, v1::JobSpec()).status().code(),
              absl::StatusCode::kInvalidArgument)
        << "'" << device << "'";
  }
}

TEST(TrainerFactory, AbsentCudaDeviceIsNotFoundOrUnavailable) {
  absl::StatusOr<v1::DeviceInfo> info = DescribeDevice("cuda:999");
  ASSERT_FALSE(info.ok());
  EXPECT_TRUE(info.status().code() == absl::StatusCode::kNotFound ||
              info.status().code() == absl::StatusCode::kUnavailable)
      << info.status();
}

TEST(TrainerFactory, CpuTrainerTrainsAStep) {
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = CreateTrainer("cpu", TinyCpuTestJobSpec(1));
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  ASSERT_NE(*trainer, nullptr);
  ASSERT_TRUE((*trainer)->Setup(TinyCpuTestJobSpec(1), 0, 1).ok());
  ASSERT_TRUE((*trainer)->InitCollective(nullptr, "127.0.0.1", absl::Seconds(5)).ok());
  absl::StatusOr<StepReport> report = (*trainer)->RunStep(0);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_GT(report->loss, 3.0f);  // ~ln(64) at init
  EXPECT_LT(report->loss, 5.0f);
}

// GEMM algorithms are chosen deterministically unless the job opts out.
TEST(TrainerFactory, EngineOptionsFollowTheJob) {
  v1::JobSpec spec;
  EXPECT_FALSE(EngineOptionsFor(spec).time_gemm_algorithms);
  EXPECT_EQ(EngineOptionsFor(spec).cublaslt_workspace_bytes, 0u) << "the engine's default";
  spec.set_nondeterministic_gemm_tuning(true);
  EXPECT_TRUE(EngineOptionsFor(spec).time_gemm_algorithms);
}

// Attention: the engine's rule (AUTO) unless the job names the kernels;
// its backward deterministic unless the job opts out.
TEST(TrainerFactory, AttentionKernelsFollowTheJob) {
  v1::JobSpec spec;
  EXPECT_EQ(EngineOptionsFor(spec).attention, CudaEngineOptions::Attention::kAuto);
  EXPECT_FALSE(EngineOptionsFor(spec).attention_atomic_backward);
  spec.set_attention_kernels(v1::ATTENTION_KERNELS_TESSERA);
  EXPECT_EQ(EngineOptionsFor(spec).attention, CudaEngineOptions::Attention::kTessera);
  spec.set_attention_kernels(v1::ATTENTION_KERNELS_CUDNN);
  EXPECT_EQ(EngineOptionsFor(spec).attention, CudaEngineOptions::Attention::kCudnn);
  spec.set_nondeterministic_attention_backward(true);
  EXPECT_TRUE(EngineOptionsFor(spec).attention_atomic_backward);
}

// The CPU engine has one GEMM: the opt-out changes nothing there.
TEST(TrainerFactory, CpuTrainerIgnoresGemmTuning) {
  std::vector<float> losses[2];
  for (int tuned = 0; tuned < 2; ++tuned) {
    v1::JobSpec spec = TinyCpuTestJobSpec(1);
    spec.set_nondeterministic_gemm_tuning(tuned == 1);
    absl::StatusOr<std::unique_ptr<Trainer>> trainer = CreateTrainer("cpu", spec);
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    ASSERT_TRUE((*trainer)->Setup(spec, 0, 1).ok());
    ASSERT_TRUE((*trainer)->InitCollective(nullptr, "127.0.0.1", absl::Seconds(5)).ok());
    for (int step = 0; step < 2; ++step) {
      absl::StatusOr<StepReport> report = (*trainer)->RunStep(step);
      ASSERT_TRUE(report.ok()) << report.status();
      losses[tuned].push_back(report->loss);
    }
  }
  EXPECT_EQ(losses[0], losses[1]);
}

}  // namespace
}  // namespace tessera
