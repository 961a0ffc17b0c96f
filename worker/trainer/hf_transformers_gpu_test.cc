// A job trained on the GPU, exported (bf16 and fp32), loads in Hugging Face
// transformers (LlamaForCausalLM.from_pretrained, hf_transformers_check.py),
// and its logits for a fixed prompt match the CUDA engine's
// (FsdpTrainer::ForwardLogits) within bf16 tolerance (5e-2 absolute). The
// same checkpoint restored on the CPU reference engine gives the CUDA
// engine's logits within the same tolerance. Needs a GPU, and python3 with
// torch and transformers; run from the repository root (the script is found
// there, or in the runfiles under Bazel).
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/hf_export.h"
#include "common/checkpoint_layout.h"
#include "gtest/gtest.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/engine/cpu/cpu_ops.h"
#include "worker/trainer/fsdp_trainer.h"
#include "worker/trainer/gpu_trainer_for_test.h"
#include "worker/trainer/test_files.h"
#include "worker/trainer/test_job_spec.h"

namespace tessera {
namespace {

std::string CheckScript() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir != nullptr && workspace != nullptr) {
    return absl::StrCat(srcdir, "/", workspace, "/worker/trainer/hf_transformers_check.py");
  }
  return "worker/trainer/hf_transformers_check.py";
}

TEST(HfTransformersGpu, AnExportOfAGpuJobLoadsInTransformersWithTheEnginesLogits) {
  v1::JobSpec spec = TestJobSpec(4);
  spec.mutable_fp8()->set_disabled(true);  // logits from the weights the export holds
  std::unique_ptr<FsdpTrainer> trainer = GpuTrainerForTest();
  ASSERT_NE(trainer, nullptr);
  FsdpTrainer& gpu = *trainer;
  ASSERT_TRUE(gpu.Setup(spec, 0, 1).ok());
  ASSERT_TRUE(gpu.InitCollective(nullptr, "127.0.0.1", absl::Seconds(60)).ok());
  for (int step = 0; step < 40; ++step) ASSERT_TRUE(gpu.RunStep(step).ok());
  const std::string root = TestDir("ckpt");
  ASSERT_TRUE(gpu.Checkpoint(40, root).ok());
  ASSERT_TRUE(WriteCommitMarker(root, {40, 1}).ok());

  std::vector<int32_t> prompt;
  for (char c : std::string("123+456=579\n88+12=100\n5+5=10\n70+")) prompt.push_back(c);
  ASSERT_EQ(static_cast<int>(prompt.size()), spec.model().seq_len());
  absl::StatusOr<std::vector<float>> logits = gpu.ForwardLogits(prompt);
  ASSERT_TRUE(logits.ok()) << logits.status();

  for (const auto& [name, dtype] : {std::make_pair("bf16", HfExportDType::kBFloat16),
                                    std::make_pair("fp32", HfExportDType::kFloat32)}) {
    const std::string out = TestDir(name);
    ASSERT_TRUE(ExportHuggingFace(spec, root, dtype, out).ok());
    WriteRawValues(out + "/prompt.i32", prompt);
    WriteRawValues(out + "/logits.f32", *logits);
    const std::string command = absl::StrCat("python3 ", CheckScript(), " ", out, " ", out,
                                             "/prompt.i32 ", out, "/logits.f32");
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
  }

  // The CPU reference engine on the same checkpoint.
  FsdpTrainer cpu(CreateCpuOps(), CreateGlooCommunicator);
  ASSERT_TRUE(cpu.Setup(spec, 0, 1).ok());
  ASSERT_TRUE(cpu.Restore(root, 40).ok());
  ASSERT_TRUE(cpu.InitCollective(nullptr, "127.0.0.1", absl::Seconds(60)).ok());
  absl::StatusOr<std::vector<float>> reference = cpu.ForwardLogits(prompt);
  ASSERT_TRUE(reference.ok()) << reference.status();
  ASSERT_EQ(reference->size(), logits->size());
  double max_diff = 0;
  for (size_t i = 0; i < logits->size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(double((*logits)[i]) - (*reference)[i]));
  }
  std::printf("CUDA against CPU engine logits: max |difference| %.4g\n", max_diff);
  EXPECT_LE(max_diff, 5e-2);
}

}  // namespace
}  // namespace tessera
