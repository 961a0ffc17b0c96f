// Job files: YAML and JSON map onto the same JobSpec; unknown fields, bad
// enums, camelCase names and malformed text are INVALID_ARGUMENT naming the
// file, line and field; the writers round-trip.
#include "client/job_file.h"

#include <cstdlib>
#include <random>
#include <string>

#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using google::protobuf::util::MessageDifferencer;

std::string Runfile(const std::string& path) {
  return std::string(std::getenv("TEST_SRCDIR")) + "/tessera/" + path;
}

bool Contains(const absl::Status& status, const std::string& text) {
  return status.message().find(text) != absl::string_view::npos;
}

TEST(JobFile, ExampleYamlAndJsonAreTheSameSpec) {
  auto yaml = ReadJobFile(Runfile("client/examples/default_job.yaml"));
  auto json = ReadJobFile(Runfile("client/examples/default_job.json"));
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_TRUE(MessageDifferencer::Equals(*yaml, *json))
      << yaml->DebugString() << "\nvs\n" << json->DebugString();
  EXPECT_EQ(yaml->world_size(), 2);
  EXPECT_EQ(yaml->data().synthetic().task(), v1::SyntheticData::ADDITION);
  EXPECT_EQ(yaml->optimizer().schedule(), v1::OptimizerConfig::COSINE);
  EXPECT_FLOAT_EQ(yaml->optimizer().lr(), 0.003f);
  EXPECT_EQ(yaml->device_kind(), v1::CPU);
  EXPECT_EQ(yaml->model().d_model(), 128);
  EXPECT_EQ(yaml->model().n_kv_heads(), 4);
  EXPECT_EQ(yaml->fp8().delayed().amax_history_len(), 16);
  EXPECT_EQ(yaml->seed(), 1234u);
}

TEST(JobFile, EveryExampleParses) {
  for (const char* name : {"default_job.yaml", "default_job.json", "gpu_job.yaml"}) {
    auto spec = ReadJobFile(Runfile(std::string("client/examples/") + name));
    EXPECT_TRUE(spec.ok()) << name << ": " << spec.status();
  }
}

TEST(JobFile, TypesFollowTheSchema) {
  auto spec = ParseJobSpec(
      "name: '123'\nseed: 18446744073709551615\nreshard_after_forward: true\n"
      "fp8: {disabled: false, current: {margin: 1}}\noptimizer: {lr: 3e-3}\n",
      "inline");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name(), "123");
  EXPECT_EQ(spec->seed(), 18446744073709551615ull);
  EXPECT_TRUE(spec->reshard_after_forward());
  EXPECT_EQ(spec->fp8().current().margin(), 1);
  EXPECT_FLOAT_EQ(spec->optimizer().lr(), 3e-3f);
}

TEST(JobFile, UnknownFieldIsRejectedWithFileLineAndField) {
  auto spec = ParseJobSpec("name: x\nmodel:\n  d_model: 64\n  d_modle: 64\n", "job.yaml");
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(spec.status(), "job.yaml: line 4: model.d_modle: unknown field"))
      << spec.status();
  auto json = ParseJobSpec("{\n  \"steps\": 3,\n  \"stepz\": 4\n}\n", "job.json");
  EXPECT_EQ(json.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(json.status(), "job.json: line 3: stepz: unknown field")) << json.status();
}

TEST(JobFile, CamelCaseNamesAreRejected) {
  auto spec = ParseJobSpec("model:\n  dModel: 64\n", "job.yaml");
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(spec.status(), "line 2: model.dModel")) << spec.status();
}

TEST(JobFile, BadEnumAndBadValuesAreRejected) {
  auto spec = ParseJobSpec("steps: 10\ndevice_kind: TPU\n", "job.yaml");
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(spec.status(), "line 2: device_kind")) << spec.status();
  EXPECT_TRUE(Contains(spec.status(), "TPU")) << spec.status();
  auto task = ParseJobSpec("data:\n  synthetic:\n    task: SORTING\n", "job.yaml");
  EXPECT_TRUE(Contains(task.status(), "line 3: data.synthetic.task")) << task.status();
  auto type = ParseJobSpec("steps: many\n", "job.yaml");
  EXPECT_TRUE(Contains(type.status(), "line 1: steps")) << type.status();
  auto dup = ParseJobSpec("steps: 1\nsteps: 2\n", "job.yaml");
  EXPECT_TRUE(Contains(dup.status(), "line 2: steps: duplicate field")) << dup.status();
}

TEST(JobFile, MalformedTextIsRejectedWithLine) {
  auto broken = ParseJobSpec("name: a\nmodel: [1, 2\n", "broken.yaml");
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(broken.status(), "broken.yaml: line")) << broken.status();
  auto json = ParseJobSpec("{\n\"steps\": 3,\n,}\n", "bad.json");
  EXPECT_EQ(json.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(json.status(), "bad.json: line 3")) << json.status();
  auto scalar = ParseJobSpec("just a string\n", "s.yaml");
  EXPECT_EQ(scalar.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadJobFile("/nonexistent/job.yaml").status().code(), absl::StatusCode::kNotFound);
}

TEST(JobFile, WritersRoundTripRandomSpecs) {
  std::mt19937_64 rng(std::random_device{}());
  for (int trial = 0; trial < 20; ++trial) {
    v1::JobSpec spec;
    spec.set_name(trial % 2 ? "run-" + std::to_string(rng() % 1000) : std::to_string(rng() % 1000));
    spec.mutable_model()->set_d_model(1 + static_cast<int>(rng() % 4096));
    spec.mutable_model()->set_norm_eps(std::uniform_real_distribution<float>(1e-7f, 1e-3f)(rng));
    spec.mutable_optimizer()->set_lr(std::uniform_real_distribution<float>(1e-5f, 1e-1f)(rng));
    spec.mutable_optimizer()->set_schedule(trial % 3 ? v1::OptimizerConfig::LINEAR
                                                     : v1::OptimizerConfig::COSINE);
    if (trial % 2) {
      spec.mutable_data()->set_token_file("/data/tokens " + std::to_string(trial) + ".bin");
    } else {
      spec.mutable_data()->mutable_synthetic()->set_task(v1::SyntheticData::COPY);
      spec.mutable_data()->mutable_synthetic()->set_num_tokens(static_cast<int64_t>(rng() >> 2));
    }
    spec.set_seed(rng());
    spec.set_device_kind(v1::CUDA);
    spec.set_reshard_after_forward(trial % 2 == 0);
    for (const std::string& text : {JobSpecToYaml(spec), JobSpecToJson(spec)}) {
      auto parsed = ParseJobSpec(text, "written");
      ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << text;
      EXPECT_TRUE(MessageDifferencer::Equals(*parsed, spec))
          << text << "\nparsed: " << parsed->DebugString();
    }
  }
}

}  // namespace
}  // namespace tessera
