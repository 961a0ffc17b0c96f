// Submit-time check of model.init_from: the coordinator refuses a job whose
// Hugging Face directory does not fit its model, naming the tensor or the
// config.json field, before anything is queued; it admits one that fits,
// and leaves a directory it cannot see to the workers.
#include "server/init_from_check.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "formats/hf_llama_layout.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/coordinator.h"
#include "server/fake_worker_connection.h"
#include "server/spec_validation.h"

namespace tessera {
namespace {

v1::JobSpec Spec(const std::string& init_from) {
  v1::JobSpec spec;
  v1::ModelConfig* m = spec.mutable_model();
  m->set_vocab_size(64);
  m->set_d_model(32);
  m->set_n_layers(2);
  m->set_n_heads(2);
  m->set_ffn_dim(48);
  m->set_seq_len(16);
  m->set_init_from(init_from);
  spec.mutable_data()->mutable_synthetic()->set_task(v1::SyntheticData::ADDITION);
  spec.mutable_data()->set_micro_batch_size(2);
  spec.mutable_optimizer()->set_lr(1e-3f);
  spec.set_world_size(1);
  spec.set_steps(3);
  return spec;
}

// A Hugging Face directory for `model` (all-zero bf16 weights), with
// `wrong_tensor`'s first dimension doubled when it is set.
std::string WriteDirectory(const std::string& name, const v1::ModelConfig& model,
                           const std::string& wrong_tensor = "") {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  mkdir(dir.c_str(), 0755);
  nlohmann::json config = {{"model_type", "llama"}};
  for (const HfLlamaConfigField& f : HfLlamaConfigFields(model)) config[f.key] = f.value;
  std::ofstream(dir + "/config.json") << config.dump();
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  int64_t offset = 0;
  const std::vector<HfLlamaParameter> layout = *HfLlamaLayout(model);
  for (const HfLlamaParameter& p : layout) {
    for (const HfLlamaTensor& t : p.tensors) {
      const int64_t rows = t.name == wrong_tensor ? 2 * t.rows : t.rows;
      const int64_t bytes = rows * p.cols * 2;
      header[t.name] = {{"dtype", "BF16"},
                        {"shape", p.cols == 1 ? nlohmann::json::array({rows})
                                              : nlohmann::json::array({rows, p.cols})},
                        {"data_offsets", {offset, offset + bytes}}};
      offset += bytes;
    }
  }
  std::string text = header.dump();
  std::string length(8, '\0');
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((text.size() >> (8 * i)) & 0xFF);
  std::ofstream(dir + "/model.safetensors", std::ios::binary)
      << length << text << std::string(static_cast<size_t>(offset), '\0');
  return dir;
}

TEST(InitFromCheck, TheCoordinatorRefusesADirectoryThatDoesNotFitAtSubmit) {
  CoordinatorOptions options;
  options.start_background_thread = false;
  options.connect = FakeWorkerConnector();
  Coordinator core(options);
  ASSERT_TRUE(core.Start().ok());
  const v1::ModelConfig model = WithDefaults(Spec("")).model();

  const std::string wrong = WriteDirectory("wrong", model, "model.layers.1.mlp.gate_proj.weight");
  absl::StatusOr<v1::Job> refused = core.SubmitJob(Spec(wrong));
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  EXPECT_NE(refused.status().message().find(
                "model.init_from: " + wrong +
                ": tensor model.layers.1.mlp.gate_proj.weight is [96, 32], the job's model needs "
                "[48, 32]"),
            std::string::npos)
      << refused.status();
  EXPECT_TRUE(core.ListJobs({}, 0, "")->jobs.empty());

  // The defaults the coordinator fills in are what config.json is compared
  // with: a spec that leaves norm_eps at 0 means 1e-5.
  v1::ModelConfig other_eps = model;
  other_eps.set_norm_eps(1e-6f);
  absl::StatusOr<v1::Job> eps = core.SubmitJob(Spec(WriteDirectory("eps", other_eps)));
  ASSERT_EQ(eps.status().code(), absl::StatusCode::kInvalidArgument) << eps.status();
  EXPECT_NE(eps.status().message().find("rms_norm_eps is 1e-06, but model.norm_eps is 1e-05"),
            std::string::npos)
      << eps.status();

  absl::StatusOr<v1::Job> admitted = core.SubmitJob(Spec(WriteDirectory("fits", model)));
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  EXPECT_EQ(admitted->spec().model().init_from(), std::string(std::getenv("TEST_TMPDIR")) + "/fits");
}

TEST(InitFromCheck, ADirectoryTheCoordinatorCannotSeeIsLeftToTheWorkers) {
  EXPECT_TRUE(CheckInitFromFitsModel(WithDefaults(Spec("/nonexistent/llama"))).ok());
  EXPECT_TRUE(CheckInitFromFitsModel(WithDefaults(Spec(""))).ok());
}

}  // namespace
}  // namespace tessera
