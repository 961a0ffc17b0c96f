// Job files: YAML and JSON map onto the same JobSpec; unknown fields, bad
// enums and malformed YAML are INVALID_ARGUMENT naming the problem.
#include "client/job_file.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "google/protobuf/util/message_differencer.h"

namespace tessera {
namespace {

std::string Runfile(const std::string& path) {
  return std::string(std::getenv("TEST_SRCDIR")) + "/tessera/" + path;
}

TEST(JobFile, ExampleYamlAndJsonAreTheSameSpec) {
  auto yaml = ReadJobFile(Runfile("client/examples/default_job.yaml"));
  auto json = ReadJobFile(Runfile("client/examples/default_job.json"));
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*yaml, *json))
      << yaml->DebugString() << "\nvs\n" << json->DebugString();
  EXPECT_EQ(yaml->world_size(), 2);
  EXPECT_EQ(yaml->data().synthetic().task(), v1::SyntheticData::ADDITION);
  EXPECT_FLOAT_EQ(yaml->optimizer().lr(), 0.003f);
  EXPECT_EQ(yaml->device_kind(), v1::CPU);
}

TEST(JobFile, TypesFollowTheSchema) {
  auto spec = ParseJobSpec(
      "name: '123'\nseed: 18446744073709551615\nreshard_after_forward: true\n"
      "fp8: {disabled: false, current: {margin: 1}}\n",
      "inline");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name(), "123");
  EXPECT_EQ(spec->seed(), 18446744073709551615ull);
  EXPECT_TRUE(spec->reshard_after_forward());
  EXPECT_EQ(spec->fp8().current().margin(), 1);
}

TEST(JobFile, UnknownFieldIsRejectedByName) {
  auto spec = ParseJobSpec("model:\n  d_modle: 64\n", "job.yaml");
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(spec.status().message().find("d_modle"), std::string::npos) << spec.status();
  EXPECT_NE(spec.status().message().find("job.yaml"), std::string::npos);
}

TEST(JobFile, BadEnumAndBadYamlAreRejected) {
  auto spec = ParseJobSpec("device_kind: TPU\n", "job.yaml");
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  auto broken = ParseJobSpec("model: [1, 2\n", "broken.yaml");
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(broken.status().message().find("line"), std::string::npos) << broken.status();
  auto scalar = ParseJobSpec("just a string\n", "s.yaml");
  EXPECT_EQ(scalar.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadJobFile("/nonexistent/job.yaml").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tessera
