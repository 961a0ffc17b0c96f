// Job files: YAML and JSON map onto the same JobSpec; unknown fields (with
// the field meant), duplicate fields, bad enums, camelCase names and
// malformed text are INVALID_ARGUMENT naming the file, line and field;
// oversized, deeply nested and huge-valued files are refused before parsing
// (they once crashed the CLI); the writers round-trip.
#include "client/job_file.h"

#include <cstdlib>
#include <fstream>
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

TEST(JobFile, RestartBudgetAndStepTimeoutAreJobFields) {
  auto spec = ParseJobSpec("max_restarts: 2\nstep_timeout_s: 30\n", "inline");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->max_restarts(), 2);
  EXPECT_EQ(spec->step_timeout_s(), 30);
  auto typo = ParseJobSpec("max_restart: 2\n", "inline");
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("did you mean max_restarts?"), std::string::npos)
      << typo.status();
}

TEST(JobFile, UnknownFieldIsRejectedWithFileLineAndField) {
  auto spec = ParseJobSpec("name: x\nmodel:\n  d_model: 64\n  d_modle: 64\n", "job.yaml");
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(spec.status(), "job.yaml: line 4: model.d_modle: unknown field"))
      << spec.status();
  EXPECT_TRUE(Contains(spec.status(), "did you mean d_model?")) << spec.status();
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

TEST(JobFile, UnknownFieldNamesItsPathAndTheFieldMeant) {
  auto yaml = ParseJobSpec("name: x\nmodel:\n  n_heads: 4\n  n_head: 4\n", "job.yaml");
  EXPECT_EQ(yaml.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(yaml.status().message(),
            "job.yaml: line 4: model.n_head: unknown field; did you mean n_heads?");
  auto json = ParseJobSpec("{\"name\": \"x\",\n \"model\": {\"n_heads\": 4,\n  \"n_head\": 4}}\n",
                           "job.json");
  EXPECT_EQ(json.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(json.status().message(),
            "job.json: line 3: model.n_head: unknown field; did you mean n_heads?");
  // Inside a list of sources, named by index and line.
  auto listed = ParseJobSpec(
      "data:\n  sources:\n    - {path: a.tok, weight: 1}\n    - path: b\n      wieght: 2\n",
      "job.yaml");
  EXPECT_EQ(listed.status().message(),
            "job.yaml: line 5: data.sources[1].wieght: unknown field; did you mean weight?");
  auto sources = ParseJobSpec("data:\n  sources:\n    - {path: a.tok, weight: 0.7}\n", "job.yaml");
  ASSERT_TRUE(sources.ok()) << sources.status();
  ASSERT_EQ(sources->data().sources_size(), 1);
  EXPECT_EQ(sources->data().sources(0).path(), "a.tok");
  EXPECT_EQ(sources->data().sources(0).weight(), 0.7);
  auto far = ParseJobSpec("data:\n  synthetic:\n    task: COPY\n    dropout: 0.1\n", "job.yaml");
  EXPECT_EQ(far.status().message(), "job.yaml: line 4: data.synthetic.dropout: unknown field");
  // The first problem in the file is the one reported.
  auto two = ParseJobSpec("zzz: 1\naaa: 2\n", "job.yaml");
  EXPECT_TRUE(Contains(two.status(), "line 1: zzz: unknown field")) << two.status();
}

TEST(JobFile, DuplicateJsonFieldIsRejected) {
  auto json = ParseJobSpec("{\"model\": {\"n_heads\": 4,\n\"n_heads\": 5}}", "job.json");
  EXPECT_EQ(json.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(json.status().message(), "job.json: line 2: model.n_heads: duplicate field");
}

TEST(JobFile, NumbersBeyondDoubleAreRejected) {
  // Read as infinity, such a number would print as null and leave the
  // field unset without a word.
  auto yaml = ParseJobSpec("optimizer:\n  lr: 1e999\n", "job.yaml");
  EXPECT_EQ(yaml.status().message(), "job.yaml: line 2: optimizer.lr: number out of range");
  auto json = ParseJobSpec("{\"optimizer\": {\"lr\": 1e999}}", "job.json");
  EXPECT_EQ(json.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(json.status(), "job.json: ")) << json.status();
  EXPECT_TRUE(Contains(json.status(), "number out of range")) << json.status();
}

std::string Nested(int depth, const std::string& open, const std::string& inner,
                   const std::string& close) {
  std::string text;
  for (int i = 0; i < depth; ++i) text += open;
  text += inner;
  for (int i = 0; i < depth; ++i) text += close;
  return text;
}

TEST(JobFile, DeepNestingIsRefusedWithoutRecursing) {
  const std::string deep_message = absl::StrCat("nested deeper than ", kMaxJobFileDepth, " levels");
  struct Case {
    std::string text, source;
  };
  const std::vector<Case> cases = {
      {"{\"name\": " + Nested(100000, "{\"a\": ", "1", "}") + "}", "deep.json"},
      {Nested(100000, "[", "1", "]"), "deep.json"},
      {"name: " + Nested(100000, "[", "1", "]") + "\n", "deep.yaml"},
      {"name: " + Nested(100000, "{a: ", "1", "}") + "\n", "deep.yaml"},
  };
  for (const Case& c : cases) {
    auto spec = ParseJobSpec(c.text, c.source);
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << c.source;
    EXPECT_TRUE(Contains(spec.status(), c.source + ": ")) << spec.status();
  }
  // The JSON refusals say why; so does YAML nested by indentation within
  // the parser's own bound.
  EXPECT_TRUE(Contains(ParseJobSpec(cases[0].text, "deep.json").status(), deep_message));
  std::string indented = "name: x\n";
  for (int i = 0; i < kMaxJobFileDepth + 2; ++i) {
    indented += std::string(2 * i, ' ') + "a" + std::to_string(i) + ":\n";
  }
  indented += std::string(2 * (kMaxJobFileDepth + 2), ' ') + "b: 1\n";
  auto spec = ParseJobSpec(indented, "indented.yaml");
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(spec.status(), "indented.yaml: line ")) << spec.status();
  EXPECT_TRUE(Contains(spec.status(), deep_message)) << spec.status();
}

TEST(JobFile, HugeValuesAreRefused) {
  // Just under the file limit: an unquoted number, a quoted string, a key.
  const std::string digits(kMaxJobFileBytes - 100, '7');
  for (const auto& [text, source] : std::vector<std::pair<std::string, std::string>>{
           {"name: " + digits + "\n", "n.yaml"},
           {"name: '" + digits + "'\n", "q.yaml"},
           {digits + ": 1\n", "k.yaml"},
           {"{\"name\": " + digits + "}", "n.json"},
           {"{\"name\": \"" + digits + "\"}", "q.json"},
           {"{\"" + digits + "\": 1}", "k.json"}}) {
    auto spec = ParseJobSpec(text, source);
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << source;
    EXPECT_TRUE(Contains(spec.status(), source + ": line 1: ")) << spec.status();
    if (source == "k.yaml") continue;  // yaml-cpp itself refuses keys this long
    EXPECT_TRUE(Contains(spec.status(), absl::StrCat("job file values are at most ",
                                                     kMaxJobFileValueBytes, " bytes")))
        << spec.status();
  }
  // A long but allowed value parses (the coordinator has its own limits).
  auto ok = ParseJobSpec("name: " + std::string(kMaxJobFileValueBytes - 10, '7') + "\n", "ok.yaml");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->name().size(), static_cast<size_t>(kMaxJobFileValueBytes - 10));
}

TEST(JobFile, AliasesCannotExpandIntoAHugeDocument) {
  // Nine levels of ten aliases each would name 10^9 values.
  std::string text = "a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n";
  for (int i = 1; i < 10; ++i) {
    std::string prev = "*a" + std::to_string(i - 1);
    text += absl::StrCat("a", i, ": &a", i, " [", prev, ", ", prev, ", ", prev, ", ", prev, ", ",
                         prev, ", ", prev, ", ", prev, ", ", prev, ", ", prev, ", ", prev, "]\n");
  }
  auto spec = ParseJobSpec(text, "laughs.yaml");
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(spec.status(), absl::StrCat("more than ", kMaxJobFileNodes, " values")))
      << spec.status();
  // A few aliases are fine (and still checked against the schema).
  auto small = ParseJobSpec("x: &x 1\nsteps: *x\n", "alias.yaml");
  EXPECT_TRUE(Contains(small.status(), "line 1: x: unknown field")) << small.status();
}

TEST(JobFile, OversizedFilesAreRefusedBeforeParsing) {
  const std::string big = "name: " + std::string(10 << 20, '7') + "\n";  // a 10 MB number
  auto text = ParseJobSpec(big, "big.yaml");
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(text.status().message(),
            absl::StrCat("big.yaml: the file is ", big.size(), " bytes; job files are at most ",
                         kMaxJobFileBytes, " bytes"));
  for (const std::string name : {"big.yaml", "big.json"}) {
    const std::string path = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
    std::ofstream(path) << big;
    auto file = ReadJobFile(path);
    EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(file.status(), path + ": the file is ")) << file.status();
  }
}

// A YAML flow mapping followed by more text used to be read up to the
// mapping's end and the rest dropped without a word: "{steps: 3}\nsteps: 9"
// was a 3-step job. Text after the mapping is refused, naming its line; an
// empty document after an explicit "---" is harmless.
TEST(JobFile, TextAfterAFlowMappingIsRefused) {
  for (const char* text : {"{name: a, steps: 3} steps: 9\n", "{name: a, steps: 3}\nsteps: 9\n",
                           "{name: a}\n---\nsteps: 9\n", "{name: a} {steps: 9}\n"}) {
    SCOPED_TRACE(text);
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(text, "job.yaml", JobFileFormat::kYaml);
    ASSERT_FALSE(spec.ok());
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(spec.status(), "job.yaml: line ")) << spec.status();
  }
  absl::StatusOr<v1::JobSpec> second_line =
      ParseJobSpec("{name: a}\nsteps: 9\n", "job.yaml", JobFileFormat::kYaml);
  EXPECT_TRUE(Contains(second_line.status(),
                       "job.yaml: line 2: text after the job's mapping: a job file holds one "
                       "YAML document"))
      << second_line.status();
  absl::StatusOr<v1::JobSpec> trailing_marker =
      ParseJobSpec("name: a\nsteps: 3\n---\n", "job.yaml", JobFileFormat::kYaml);
  ASSERT_TRUE(trailing_marker.ok()) << trailing_marker.status();
  EXPECT_EQ(trailing_marker->steps(), 3);
}

// Found by fuzz/job_file_fuzzer: yaml-cpp reads the text after this flow
// mapping as empty documents without end, so reading every document
// (LoadAll) never returned. At most 16 are read now, and the text is
// refused. It is in the corpus too.
TEST(JobFile, TextAfterAMappingThatYamlCannotEndIsRefused) {
  const std::string text("{\n  \"name\": \"ude}af}}}}}@}}}3\" },mv,mNji)\x7f", 42);
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(text, "job.yaml", JobFileFormat::kYaml);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << spec.status();
  EXPECT_TRUE(Contains(spec.status(), "text after the job's mapping that is not YAML"))
      << spec.status();
  // Empty documents after "---" markers are still fine.
  EXPECT_TRUE(ParseJobSpec("name: a\n---\n---\n", "job.yaml", JobFileFormat::kYaml).ok());
}

// Found by fuzz/job_file_fuzzer: a YAML string with bytes that are not
// UTF-8 made the YAML-to-JSON step throw past the parser (the CLI died).
TEST(JobFile, YamlValuesThatAreNotUtf8AreRefused) {
  absl::StatusOr<v1::JobSpec> spec =
      ParseJobSpec("name: caf\xc3\nsteps: 3\n", "job.yaml", JobFileFormat::kYaml);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(spec.status().message().find("job.yaml: a value is not valid UTF-8"),
            std::string::npos)
      << spec.status();
}

// Found by fuzz/job_file_fuzzer: an all-default spec, or one with a
// present but empty message, was written as YAML that did not read back.
TEST(JobFile, EmptySpecsAndEmptyMessagesRoundTripThroughYaml) {
  v1::JobSpec empty;
  absl::StatusOr<v1::JobSpec> back = ParseJobSpec(JobSpecToYaml(empty), "a.yaml", JobFileFormat::kYaml);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->SerializeAsString(), empty.SerializeAsString());
  v1::JobSpec with_empty_model;
  with_empty_model.set_name("x");
  with_empty_model.mutable_model();
  back = ParseJobSpec(JobSpecToYaml(with_empty_model), "b.yaml", JobFileFormat::kYaml);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->has_model());
  EXPECT_EQ(back->name(), "x");
}

// A negative zero (the fuzzer wrote "lr: -.00") once came back from the
// JSON writer as a different spec. The fuzzer's crash input is kept here.
TEST(JobFile, NegativeZeroRoundTripsThroughJsonAndYaml) {
  const std::string text = "name: p\noptimizer:\n  lr: -.00\nseed: 1634\n";
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(text, "z.yaml", JobFileFormat::kYaml);
  ASSERT_TRUE(spec.ok()) << spec.status();
  const std::string json = JobSpecToJson(*spec);
  absl::StatusOr<v1::JobSpec> from_json = ParseJobSpec(json, "z.json", JobFileFormat::kJson);
  ASSERT_TRUE(from_json.ok()) << from_json.status() << "\n" << json;
  EXPECT_TRUE(MessageDifferencer::Equals(*spec, *from_json)) << json << "\n"
      << spec->DebugString() << "\n" << from_json->DebugString();
  const std::string yaml = JobSpecToYaml(*spec);
  absl::StatusOr<v1::JobSpec> from_yaml = ParseJobSpec(yaml, "z2.yaml", JobFileFormat::kYaml);
  ASSERT_TRUE(from_yaml.ok()) << from_yaml.status() << "\n" << yaml;
  EXPECT_TRUE(MessageDifferencer::Equals(*spec, *from_yaml)) << yaml;
}

}  // namespace
}  // namespace tessera
