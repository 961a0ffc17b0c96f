// The `tessera` CLI end to end against an in-process fake Coordinator:
// exit codes, the one-line errors for an unreachable coordinator and for a
// refused request, table and --json output, watch's progress output on a
// terminal and off one, and checkpoint, suspend and resume (help, human and
// --json output, --wait, refusals).
#include "client/cli.h"

#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/fake_coordinator.h"
#include "client/job_file.h"
#include "client/output_format.h"
#include "common/build_info.h"
#include "common/checkpoint_size.h"
#include "common/memory_estimate.h"
#include "common/parallelism.h"
#include "common/spec_defaults.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

struct Result {
  int code = -1;
  std::string out;
  std::string err;
};

Result RunTessera(const std::vector<std::string>& argv, bool is_tty = false) {
  std::ostringstream out, err;
  Result r;
  r.code = RunCli(argv, out, err, is_tty);
  r.out = out.str();
  r.err = err.str();
  return r;
}

std::string Runfile(const std::string& path) {
  return std::string(std::getenv("TEST_SRCDIR")) + "/tessera/" + path;
}

std::string WriteTemp(const std::string& name, const std::string& text) {
  std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::ofstream(path) << text;
  return path;
}

class CliTest : public ::testing::Test {
 protected:
  // A job of `steps` steps that ended in `state`, with one event per step.
  void AddFinishedJob(const std::string& id, int steps, v1::JobState state) {
    v1::Job job;
    job.set_id(id);
    job.mutable_spec()->set_name("demo");
    job.mutable_spec()->set_steps(steps);
    job.set_state(state);
    job.set_reason(state == v1::SUCCEEDED ? "completed" : "rank 1 lost");
    job.set_start_time_unix_ms(1000);
    job.set_end_time_unix_ms(61000);
    std::vector<v1::JobEvent> events(1);
    events[0].mutable_state_change()->set_state(v1::RUNNING);
    const int done = state == v1::SUCCEEDED ? steps : steps / 2;
    for (int s = 0; s < done; ++s) {
      v1::JobEvent e;
      e.mutable_step()->set_step(s);
      e.mutable_step()->set_loss(std::uniform_real_distribution<float>(1.f, 5.f)(rng_));
      e.mutable_step()->set_tokens(1024);
      e.mutable_step()->set_step_time_s(0.1);
      e.mutable_step()->set_tokens_per_s(10240);
      events.push_back(e);
      *job.mutable_last_metrics() = e.step();
    }
    job.set_steps_done(done);
    events.emplace_back().mutable_state_change()->set_state(state);
    events.back().mutable_state_change()->set_reason(job.reason());
    server_.AddJob(job, events);
    num_events_ = static_cast<int>(events.size());
  }

  // A RUNNING job with `steps_done` steps done.
  void AddRunningJob(const std::string& id, int steps_done) {
    v1::Job job;
    job.set_id(id);
    job.mutable_spec()->set_steps(1000);
    job.set_state(v1::RUNNING);
    job.set_reason("training");
    job.set_steps_done(steps_done);
    server_.AddJob(job, {});
  }

  std::mt19937 rng_{std::random_device{}()};
  FakeCoordinator server_;
  int num_events_ = 0;
};

TEST(CliNoServerTest, UnreachableCoordinatorIsOneLineAndExitCode3) {
  for (const std::vector<std::string>& argv :
       std::vector<std::vector<std::string>>{{"jobs"}, {"status", "job-1"}, {"workers"}}) {
    std::vector<std::string> args = argv;
    args.insert(args.end(), {"--coordinator", "127.0.0.1:1"});
    Result r = RunTessera(args);
    EXPECT_EQ(r.code, kExitUnreachable) << argv[0];
    EXPECT_EQ(r.err,
              "tessera: cannot reach coordinator at 127.0.0.1:1 (connection refused); "
              "is tessera-coordinator running?\n");
    EXPECT_EQ(r.out, "");
  }
}

TEST(CliNoServerTest, HelpUsageAndLocalErrors) {
  Result help = RunTessera({"--help"});
  EXPECT_EQ(help.code, kExitOk);
  for (const CommandSpec& c : Commands()) EXPECT_TRUE(absl::StrContains(help.out, c.usage));
  Result watch_help = RunTessera({"watch", "--help"});
  EXPECT_EQ(watch_help.code, kExitOk);
  EXPECT_TRUE(absl::StrContains(watch_help.out, "--from-step")) << watch_help.out;
  Result unknown = RunTessera({"train"});
  EXPECT_EQ(unknown.code, kExitUsage);
  EXPECT_TRUE(absl::StrContains(unknown.err, "unknown command 'train'")) << unknown.err;
  Result missing = RunTessera({"submit", "/nonexistent/job.yaml"});
  EXPECT_EQ(missing.code, kExitUsage);
  EXPECT_TRUE(absl::StrContains(missing.err, "/nonexistent/job.yaml")) << missing.err;
  Result data = RunTessera({"data", "text", "--out", "x", "in.txt"});
  EXPECT_EQ(data.code, kExitUsage);  // not linked into this test
}

TEST(CliNoServerTest, DryRunPrintsTheSpecWithoutAServer) {
  const std::string file = Runfile("client/examples/default_job.yaml");
  auto expected = ReadJobFile(file);
  ASSERT_TRUE(expected.ok()) << expected.status();
  for (bool json : {false, true}) {
    std::vector<std::string> argv = {"submit", file, "--dry-run", "--coordinator", "127.0.0.1:1"};
    if (json) argv.push_back("--json");
    Result r = RunTessera(argv);
    ASSERT_EQ(r.code, kExitOk) << r.err;
    auto printed = ParseJobSpec(r.out, "dry-run output");
    ASSERT_TRUE(printed.ok()) << printed.status() << "\n" << r.out;
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*printed, *expected)) << r.out;
  }
}

std::string FileText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The dry run says what the job will cost: each rank's memory by
// component and, with checkpoint.dir, one checkpoint's size on disk, as
// YAML comments after the spec (so the output still parses), on stderr
// with --json (so stdout stays one JSON document).
TEST(CliNoServerTest, DryRunPrintsTheCheckpointSize) {
  const std::string file = Runfile("client/examples/default_job.yaml");
  auto spec = ReadJobFile(file);
  ASSERT_TRUE(spec.ok()) << spec.status();
  const std::string path = WriteTemp(
      "with_checkpoints.yaml",
      absl::StrCat(FileText(file), "\ncheckpoint:\n  dir: /tmp/ck\n  interval_steps: 50\n"));
  v1::JobSpec with_dir = *spec;
  with_dir.mutable_checkpoint()->set_dir("/tmp/ck");
  const CheckpointSize size = EstimateCheckpointSize(WithDefaults(with_dir));
  std::string line =
      absl::StrFormat("# checkpoint size: %s (%d ranks' files, %.1f bytes per parameter)\n",
                      FormatBytesAsGiB(size.total_bytes), size.writing_ranks,
                      static_cast<double>(size.state_bytes) / size.parameters);
  const v1::JobSpec full = WithDefaults(with_dir);
  const std::string memory =
      absl::StrFormat("# memory per rank (%d ranks, sharded over %d): %s\n", full.world_size(),
                      ShardGroupSize(full), EstimateRankMemory(full, 0, ShardGroupSize(full)).ToString());
  // Then each rank's total under each recomputation policy.
  std::string recompute = "# with memory.recompute on every block:";
  for (const auto policy : {v1::MemoryConfig::NONE, v1::MemoryConfig::SELECTIVE,
                            v1::MemoryConfig::BLOCKS}) {
    v1::JobSpec other = full;
    other.mutable_memory()->set_recompute(policy);
    const RankMemoryEstimate e = EstimateRankMemory(other, 0, ShardGroupSize(full));
    absl::StrAppend(&recompute, " ", v1::MemoryConfig::Recompute_Name(policy), " ",
                    FormatBytesAsGiB(e.total()), " (activations ",
                    FormatBytesAsGiB(e.activations), ")",
                    policy == v1::MemoryConfig::BLOCKS ? "\n" : ",");
  }
  line += CheckpointIntervalLine(size.total_bytes, 50);
  ASSERT_TRUE(absl::StrContains(line, "every 50 steps")) << line;
  Result yaml = RunTessera({"submit", path, "--dry-run"});
  ASSERT_EQ(yaml.code, kExitOk) << yaml.err;
  EXPECT_TRUE(absl::EndsWith(yaml.out, memory + recompute + line)) << yaml.out;
  EXPECT_TRUE(ParseJobSpec(yaml.out, "dry-run output").ok());
  Result json = RunTessera({"submit", path, "--dry-run", "--json"});
  ASSERT_EQ(json.code, kExitOk) << json.err;
  EXPECT_EQ(json.err, memory + recompute + line);
  EXPECT_FALSE(absl::StrContains(json.out, "#"));
  // Without checkpoint.dir there is no checkpoint to size; the memory line
  // stays, and names each component.
  Result none = RunTessera({"submit", file, "--dry-run"});
  EXPECT_FALSE(absl::StrContains(none.out, "# checkpoint")) << none.out;
  for (const char* part : {"parameter shards", "gathered", "activations", "scratch",
                           "engine workspace"}) {
    EXPECT_TRUE(absl::StrContains(none.out, part)) << part << ": " << none.out;
  }
}

TEST(CliNoServerTest, BadJobFileIsUsageErrorNamingFileAndLine) {
  std::string path = WriteTemp("typo.yaml", "steps: 10\nmodel:\n  d_modle: 64\n");
  Result r = RunTessera({"submit", path, "--coordinator", "127.0.0.1:1"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_EQ(r.err, absl::StrCat("tessera: ", path,
                                ": line 3: model.d_modle: unknown field; did you mean d_model?\n"));
}

TEST(CliNoServerTest, HostileJobFilesAreUsageErrorsNotCrashes) {
  // Each of these once crashed the CLI: a JSON document nested 100,000 deep
  // and a 10 MB unquoted number as the name, in either format.
  std::string deep = "{\"name\": ";
  for (int i = 0; i < 100000; ++i) deep += "{\"a\": ";
  deep += "1" + std::string(100000, '}') + "}";
  const std::string number(10 << 20, '7');
  struct Case {
    std::string name, text, reason;
  };
  const std::vector<Case> cases = {
      {"deep.json", deep, "nested deeper than"},
      {"deep.yaml", "name: " + std::string(100000, '[') + std::string(100000, ']') + "\n", ""},
      {"number.yaml", "name: " + number + "\n", "job files are at most"},
      {"number.json", "{\"name\": " + number + "}", "job files are at most"},
  };
  for (const Case& c : cases) {
    const std::string path = WriteTemp(c.name, c.text);
    Result r = RunTessera({"submit", path, "--dry-run"});
    EXPECT_EQ(r.code, kExitUsage) << c.name << ": " << r.err;
    EXPECT_EQ(r.err.rfind(absl::StrCat("tessera: ", path, ": "), 0), 0u) << r.err;
    EXPECT_NE(r.err.find(c.reason), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_TRUE(r.out.empty());
  }
}

TEST_F(CliTest, ServerErrorIsCodeAndMessageWithExitCode1) {
  std::string path = WriteTemp("zero.yaml", "steps: 10\nmodel:\n  d_model: 0\n");
  Result r = RunTessera({"submit", path, "--coordinator", server_.address()});
  EXPECT_EQ(r.code, kExitFailed);
  EXPECT_EQ(r.err, "tessera: INVALID_ARGUMENT: model.d_model: must be >= 1\n");
  Result missing = RunTessera({"status", "job-404", "--coordinator", server_.address()});
  EXPECT_EQ(missing.code, kExitFailed);
  EXPECT_EQ(missing.err, "tessera: NOT_FOUND: job_id: no job 'job-404'\n");
}

TEST_F(CliTest, SubmitUsesTheEnvironmentAddress) {
  setenv("TESSERA_COORDINATOR", server_.address().c_str(), 1);
  Result r = RunTessera({"submit", Runfile("client/examples/default_job.json")});
  unsetenv("TESSERA_COORDINATOR");
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "submitted job-1 (PENDING")) << r.out;
  ASSERT_EQ(server_.submitted().size(), 1u);
  EXPECT_EQ(server_.submitted()[0].model().d_model(), 128);
}

TEST_F(CliTest, TablesAndJsonOutput) {
  AddFinishedJob("job-1", 10, v1::SUCCEEDED);
  v1::WorkerRecord w;
  w.set_worker_id("w-3");
  w.set_address("10.0.0.3:7000");
  w.set_healthy(true);
  server_.AddWorker(w);
  const std::string addr = server_.address();

  Result jobs = RunTessera({"jobs", "--coordinator", addr});
  EXPECT_EQ(jobs.code, kExitOk);
  EXPECT_TRUE(absl::StrContains(jobs.out, "job-1")) << jobs.out;
  EXPECT_TRUE(absl::StrContains(jobs.out, "SUCCEEDED")) << jobs.out;
  Result jobs_json = RunTessera({"jobs", "--json", "--coordinator", addr});
  v1::ListJobsResponse list;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(jobs_json.out, &list).ok()) << jobs_json.out;
  ASSERT_EQ(list.jobs_size(), 1);
  EXPECT_EQ(list.jobs(0).steps_done(), 10);

  Result status_json = RunTessera({"status", "job-1", "--json", "--coordinator", addr});
  v1::Job job;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(status_json.out, &job).ok());
  EXPECT_EQ(job.state(), v1::SUCCEEDED);

  Result workers = RunTessera({"workers", "--coordinator", addr});
  EXPECT_TRUE(absl::StrContains(workers.out, "10.0.0.3:7000")) << workers.out;
  Result filtered = RunTessera({"jobs", "--state", "RUNNING", "--coordinator", addr});
  EXPECT_FALSE(absl::StrContains(filtered.out, "job-1")) << filtered.out;
  EXPECT_EQ(RunTessera({"jobs", "--state", "SLEEPING", "--coordinator", addr}).code, kExitUsage);
}

TEST_F(CliTest, JobsShowOwnersAndFilterByOwner) {
  v1::Job alices;
  alices.set_id("job-1");
  alices.set_owner("alice");
  alices.set_state(v1::CANCELLED);
  alices.set_reason("cancelled by ops");
  std::vector<v1::JobEvent> events(2);
  events[0].mutable_state_change()->set_state(v1::PENDING);
  events[0].mutable_state_change()->set_actor("alice");
  events[1].mutable_state_change()->set_state(v1::CANCELLED);
  events[1].mutable_state_change()->set_reason("cancelled by ops");
  events[1].mutable_state_change()->set_actor("ops");
  server_.AddJob(alices, events);
  AddRunningJob("job-2", 3);  // no owner
  const std::string addr = server_.address();

  Result all = RunTessera({"jobs", "--coordinator", addr});
  ASSERT_EQ(all.code, kExitOk) << all.err;
  EXPECT_TRUE(absl::StrContains(all.out, "OWNER")) << all.out;
  EXPECT_TRUE(absl::StrContains(all.out, "alice")) << all.out;
  EXPECT_TRUE(absl::StrContains(all.out, "job-2")) << all.out;
  Result only_alice = RunTessera({"jobs", "--owner", "alice", "--coordinator", addr});
  ASSERT_EQ(only_alice.code, kExitOk) << only_alice.err;
  EXPECT_TRUE(absl::StrContains(only_alice.out, "job-1")) << only_alice.out;
  EXPECT_FALSE(absl::StrContains(only_alice.out, "job-2")) << only_alice.out;
  EXPECT_EQ(RunTessera({"jobs", "--mine", "--owner", "alice", "--coordinator", addr}).code,
            kExitUsage);

  Result status = RunTessera({"status", "job-1", "--coordinator", addr});
  EXPECT_TRUE(absl::StrContains(status.out, "owner     alice")) << status.out;
  Result watch = RunTessera({"watch", "job-1", "--coordinator", addr});
  EXPECT_TRUE(absl::StrContains(watch.out, "[PENDING] (by alice)")) << watch.out;
  EXPECT_TRUE(absl::StrContains(watch.out, "[CANCELLED] cancelled by ops (by ops)")) << watch.out;
}

TEST_F(CliTest, JobsListsEveryPage) {
  for (int i = 1; i <= 230; ++i) AddFinishedJob(absl::StrCat("job-", i), 2, v1::SUCCEEDED);
  const std::string addr = server_.address();
  Result json = RunTessera({"jobs", "--json", "--coordinator", addr});
  ASSERT_EQ(json.code, kExitOk) << json.err;
  v1::ListJobsResponse list;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.out, &list).ok()) << json.out;
  EXPECT_EQ(list.jobs_size(), 230);
  EXPECT_TRUE(list.next_page_token().empty());
  Result table = RunTessera({"jobs", "--coordinator", addr});
  EXPECT_EQ(std::count(table.out.begin(), table.out.end(), '\n'), 231) << table.out;  // + header
  EXPECT_EQ(server_.calls("ListJobs"), 6);
}

TEST_F(CliTest, DeleteRemovesAFinishedJobAndRefusesOthers) {
  AddFinishedJob("job-1", 4, v1::SUCCEEDED);
  v1::Job running;
  running.set_id("job-2");
  running.set_state(v1::RUNNING);
  server_.AddJob(running, {});
  const std::string addr = server_.address();
  Result deleted = RunTessera({"delete", "job-1", "--coordinator", addr});
  EXPECT_EQ(deleted.code, kExitOk) << deleted.err;
  EXPECT_EQ(deleted.out, "deleted job-1\n");
  Result again = RunTessera({"delete", "job-1", "--coordinator", addr});
  EXPECT_EQ(again.code, kExitFailed);
  EXPECT_EQ(again.err, "tessera: NOT_FOUND: job_id: no job 'job-1'\n");
  Result refused = RunTessera({"delete", "job-2", "--json", "--coordinator", addr});
  EXPECT_EQ(refused.code, kExitFailed);
  EXPECT_TRUE(absl::StartsWith(refused.err, "tessera: FAILED_PRECONDITION: ")) << refused.err;
  AddFinishedJob("job-3", 4, v1::CANCELLED);
  Result json = RunTessera({"delete", "job-3", "--json", "--coordinator", addr});
  EXPECT_EQ(json.code, kExitOk);
  EXPECT_EQ(json.out, "{\"job_id\":\"job-3\"}\n");
  EXPECT_EQ(RunTessera({"delete", "--coordinator", addr}).code, kExitUsage);
}

TEST_F(CliTest, WatchOffATerminalPrintsBoundedLinesAndSummary) {
  AddFinishedJob("job-1", 500, v1::SUCCEEDED);
  Result r = RunTessera({"watch", "job-1", "--coordinator", server_.address()});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_FALSE(absl::StrContains(r.out, "\r"));
  int step_lines = 0;
  for (absl::string_view line : absl::StrSplit(r.out, '\n')) {
    if (absl::StartsWith(line, "step ")) ++step_lines;
  }
  EXPECT_GE(step_lines, 10);
  EXPECT_LE(step_lines, 52);
  EXPECT_TRUE(absl::StrContains(r.out, "step 500/500")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "job job-1 SUCCEEDED: completed")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "tokens/s     10.2k")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "wall time    1:00")) << r.out;
}

TEST_F(CliTest, WatchOnATerminalRedrawsInPlaceAndFailedJobExits1) {
  AddFinishedJob("job-1", 40, v1::FAILED);
  Result r = RunTessera({"watch", "job-1", "--coordinator", server_.address()}, /*is_tty=*/true);
  EXPECT_EQ(r.code, kExitFailed);
  EXPECT_TRUE(absl::StrContains(r.out, "\rstep 20/40")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "[FAILED] rank 1 lost")) << r.out;
}

TEST_F(CliTest, WatchPrintsSlowRankWarningsAndClearances) {
  v1::Job job;
  job.set_id("job-1");
  job.mutable_spec()->set_steps(10);
  job.set_state(v1::SUCCEEDED);
  std::vector<v1::JobEvent> events(3);
  events[0].mutable_slow_rank()->set_slow(true);
  events[0].mutable_slow_rank()->set_severity(v1::WARNING);
  events[0].mutable_slow_rank()->set_message("rank 1 (worker w-2 at h:2) is 40% slower");
  events[1].mutable_slow_rank()->set_severity(v1::INFO);
  events[1].mutable_slow_rank()->set_message("rank 1 (worker w-2 at h:2) is no longer slow");
  events[2].mutable_state_change()->set_state(v1::SUCCEEDED);
  server_.AddJob(job, events);
  Result r = RunTessera({"watch", "job-1", "--coordinator", server_.address()});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_TRUE(absl::StrContains(
      r.out, "[slow rank] WARNING: rank 1 (worker w-2 at h:2) is 40% slower\n"
             "[slow rank] rank 1 (worker w-2 at h:2) is no longer slow\n"))
      << r.out;
}

v1::Fp8TensorStats NumericsTensor(int block, const char* linear, double saturated,
                                   double underflow) {
  v1::Fp8TensorStats t;
  t.set_block(block);
  t.set_linear(linear);
  t.set_role(v1::Fp8TensorStats::INPUT);
  t.set_format("e4m3");
  t.set_amax(3.5f);
  t.set_scale(128.f);
  t.set_elements(1000);
  t.set_saturated_fraction(saturated);
  t.set_underflow_fraction(underflow);
  return t;
}

TEST_F(CliTest, WatchPrintsNumericsCompactlyAndTheirWarnings) {
  v1::Job job;
  job.set_id("job-1");
  job.mutable_spec()->set_steps(10);
  job.set_state(v1::SUCCEEDED);
  std::vector<v1::JobEvent> events(3);
  v1::Fp8Numerics* numerics = events[0].mutable_numerics();
  numerics->set_step(4);
  *numerics->add_tensors() = NumericsTensor(0, "qkv", 0.0, 0.021);
  *numerics->add_tensors() = NumericsTensor(3, "down", 0.0012, 0.0);
  events[1].mutable_numerics_warning()->set_severity(v1::WARNING);
  events[1].mutable_numerics_warning()->set_message(
      "step 4: block 3 down input (e4m3): 0.12% of values saturate at the format's maximum");
  events[2].mutable_state_change()->set_state(v1::SUCCEEDED);
  server_.AddJob(job, events);
  Result r = RunTessera({"watch", "job-1", "--coordinator", server_.address()});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_TRUE(absl::StrContains(
      r.out,
      "[numerics] step 4: worst saturation 0.12% (block 3 down input), worst underflow 2.10% "
      "(block 0 qkv input), 2 tensors\n"
      "[numerics] WARNING: step 4: block 3 down input (e4m3): 0.12% of values saturate"))
      << r.out;
}

TEST_F(CliTest, NumericsShowsTheWorstTensorsOrSaysHowToTurnThemOn) {
  v1::Job job;
  job.set_id("job-1");
  job.mutable_spec()->set_steps(10);
  job.set_state(v1::RUNNING);
  job.mutable_last_numerics()->set_step(8);
  for (int b = 0; b < 4; ++b) {
    *job.mutable_last_numerics()->add_tensors() = NumericsTensor(b, "gate_up", 0.0, 0.01 * b);
  }
  *job.mutable_last_numerics()->add_tensors() = NumericsTensor(1, "down", 0.002, 0.0);
  server_.AddJob(job, {});
  Result r = RunTessera({"numerics", "job-1", "--top", "2", "--coordinator", server_.address()});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  std::vector<std::string> lines = absl::StrSplit(r.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 4u) << r.out;
  EXPECT_EQ(lines[0], "FP8 statistics at step 8 (5 tensors; worst 2 first)");
  EXPECT_TRUE(absl::StartsWith(lines[2], "block 1 down input")) << r.out;  // saturation first
  EXPECT_TRUE(absl::StrContains(lines[2], "0.2000%")) << r.out;
  EXPECT_TRUE(absl::StartsWith(lines[3], "block 3 gate_up input")) << r.out;

  r = RunTessera({"numerics", "job-1", "--top", "1", "--json", "--coordinator",
                  server_.address()});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "\"step\":8")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "\"linear\":\"down\"")) << r.out;
  EXPECT_FALSE(absl::StrContains(r.out, "gate_up")) << r.out;

  v1::Job plain;
  plain.set_id("job-2");
  plain.mutable_spec()->set_steps(10);
  plain.set_state(v1::RUNNING);
  server_.AddJob(plain, {});
  r = RunTessera({"numerics", "job-2", "--coordinator", server_.address()});
  EXPECT_EQ(r.code, kExitFailed);
  EXPECT_TRUE(absl::StrContains(r.err, "FAILED_PRECONDITION")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "set fp8.stats_interval_steps")) << r.err;

  r = RunTessera({"numerics", "job-404", "--coordinator", server_.address()});
  EXPECT_EQ(r.code, kExitFailed);
  EXPECT_TRUE(absl::StrContains(r.err, "NOT_FOUND")) << r.err;

  r = RunTessera({"numerics", "job-1", "--top", "x", "--coordinator", server_.address()});
  EXPECT_EQ(r.code, kExitUsage);
}

TEST_F(CliTest, WatchJsonIsOneEventPerLine) {
  AddFinishedJob("job-1", 7, v1::SUCCEEDED);
  Result r = RunTessera({"watch", "job-1", "--json", "--from-step", "0", "--coordinator",
                  server_.address()});
  EXPECT_EQ(r.code, kExitOk);
  std::vector<std::string> lines = absl::StrSplit(r.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(static_cast<int>(lines.size()), num_events_);
  for (const std::string& line : lines) {
    v1::JobEvent event;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(line, &event).ok()) << line;
    EXPECT_GT(event.sequence(), 0);
  }
}

TEST_F(CliTest, CancelPassesTheReason) {
  AddFinishedJob("job-1", 4, v1::SUCCEEDED);
  Result r = RunTessera({"cancel", "job-1", "--reason", "operator request", "--json", "--coordinator",
                  server_.address()});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "\"reason\":\"operator request\"")) << r.out;
}

// `tessera version` and `tessera --version` need no coordinator (the
// environment's points nowhere) and print the build; the commit's value is
// whatever this build was stamped with.
TEST(CliNoServerTest, VersionPrintsTheBuildWithoutACoordinator) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"version"}, std::vector<std::string>{"--version"},
        std::vector<std::string>{"version", "--coordinator", "127.0.0.1:1"}}) {
    Result r = RunTessera(args);
    EXPECT_EQ(r.code, kExitOk) << r.err;
    EXPECT_EQ(r.out, VersionLine("tessera") + "\n");
    EXPECT_TRUE(absl::StartsWith(r.out, absl::StrCat("tessera ", kTesseraVersion, " ("))) << r.out;
  }
  Result json = RunTessera({"version", "--json"});
  EXPECT_EQ(json.code, kExitOk);
  EXPECT_EQ(json.out, absl::StrCat("{\"program\":\"tessera\",\"version\":\"", kTesseraVersion,
                                   "\",\"commit\":\"", BuildCommit(), "\",\"tree\":\"",
                                   BuildTree(), "\"}\n"));
  EXPECT_EQ(RunTessera({"version", "extra"}).code, kExitUsage);
  EXPECT_TRUE(absl::StrContains(RunTessera({"--help"}).out, "version\n")) << "listed in help";
}

TEST(CliNoServerTest, CheckpointSuspendAndResumeHaveHelp) {
  for (const auto& [command, usage] : std::vector<std::pair<std::string, std::string>>{
           {"checkpoint", "usage: tessera checkpoint ID [--wait]"},
           {"suspend", "usage: tessera suspend ID [--reason TEXT] [--wait]"},
           {"resume", "usage: tessera resume ID"}}) {
    Result r = RunTessera({command, "--help"});
    EXPECT_EQ(r.code, kExitOk) << command;
    EXPECT_TRUE(absl::StartsWith(r.out, usage)) << r.out;
    EXPECT_TRUE(absl::StrContains(r.out, "--json")) << r.out;
    EXPECT_TRUE(absl::StrContains(RunTessera({"--help"}).out, usage.substr(15))) << command;
    EXPECT_EQ(RunTessera({command}).code, kExitUsage) << command;  // ID is required
  }
  EXPECT_TRUE(absl::StrContains(RunTessera({"suspend", "--help"}).out, "checkpoint.dir"));
}

TEST_F(CliTest, SuspendThenResumeInWordsAndInJson) {
  AddRunningJob("job-1", 12);
  Result r = RunTessera({"suspend", "job-1", "--reason", "maintenance", "--coordinator",
                         server_.address()});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out,
            "suspending job-1: a checkpoint at its next step boundary, then its workers are "
            "released\n");
  r = RunTessera({"resume", "job-1", "--json", "--coordinator", server_.address()});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  v1::Job job;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &job).ok()) << r.out;
  EXPECT_EQ(job.state(), v1::PENDING);
  EXPECT_EQ(job.committed_step(), 12);

  AddRunningJob("job-2", 30);
  r = RunTessera({"suspend", "job-2", "--json", "--coordinator", server_.address()});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &job).ok()) << r.out;
  EXPECT_EQ(job.id(), "job-2");
  r = RunTessera({"resume", "job-2", "--coordinator", server_.address()});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out,
            "resuming job-2 from checkpoint step 30 (PENDING: waiting for 2 free workers)\n");
}

TEST_F(CliTest, WaitFollowsTheJobUntilTheCheckpointOrTheSuspend) {
  AddRunningJob("job-1", 7);
  Result r = RunTessera({"checkpoint", "job-1", "--wait", "--coordinator", server_.address()});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out, "job-1: checkpoint of step 7 committed\n");
  r = RunTessera({"checkpoint", "job-1", "--coordinator", server_.address()});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out, "checkpointing job-1 at its next step boundary\n");
  r = RunTessera({"suspend", "job-1", "--wait", "--reason", "drain", "--coordinator",
                  server_.address()});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out, "job-1 is SUSPENDED: suspended at step 7 (checkpoint committed): drain\n");
}

TEST_F(CliTest, RefusalsAreOneLineWithTheirCode) {
  AddFinishedJob("job-1", 4, v1::SUCCEEDED);
  for (const char* command : {"checkpoint", "suspend", "resume"}) {
    Result r = RunTessera({command, "job-1", "--coordinator", server_.address()});
    EXPECT_EQ(r.code, kExitFailed) << command;
    EXPECT_TRUE(absl::StartsWith(r.err, "tessera: FAILED_PRECONDITION: job job-1 is SUCCEEDED"))
        << r.err;
    EXPECT_EQ(r.out, "");
    r = RunTessera({command, "job-9", "--coordinator", server_.address()});
    EXPECT_EQ(r.code, kExitFailed) << command;
    EXPECT_EQ(r.err, "tessera: NOT_FOUND: job job-9 not found\n");
  }
}

}  // namespace
}  // namespace tessera
