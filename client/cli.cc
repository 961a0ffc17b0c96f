// The `tessera` subcommands (see cli.h): each turns parsed arguments into
// CoordinatorClient calls and prints the result with output_format.h.
#include "client/cli.h"

#include <algorithm>
#include <cstdlib>
#include <functional>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/cli_args.h"
#include "client/cli_credentials.h"
#include "client/client.h"
#include "client/job_file.h"
#include "client/numerics_format.h"
#include "client/output_format.h"
#include "client/placement_format.h"
#include "common/build_info.h"
#include "common/checkpoint_size.h"
#include "common/log_line_format.h"
#include "common/memory_estimate.h"
#include "common/parallelism.h"
#include "common/spec_defaults.h"
#include "common/step_history.h"

namespace tessera {
namespace {

// One line on stderr. A coordinator that cannot be reached is told apart
// from one that answered with an error, so scripts can react to each.
int Fail(const absl::Status& status, std::ostream& err) {
  if (IsCoordinatorUnreachable(status)) {
    err << "tessera: " << status.message() << "; is tessera-coordinator running?\n";
    return kExitUnreachable;
  }
  err << "tessera: " << absl::StatusCodeToString(status.code()) << ": " << status.message() << "\n";
  return kExitFailed;
}

// Whether the user named a coordinator (--coordinator or
// $TESSERA_COORDINATOR) rather than leaving the default.
bool CoordinatorGiven(const ParsedArgs& args) {
  const char* env = std::getenv("TESSERA_COORDINATOR");
  return args.Has("coordinator") || (env != nullptr && *env);
}

std::string CoordinatorAddress(const ParsedArgs& args) {
  if (args.Has("coordinator")) return args.Get("coordinator");
  const char* env = std::getenv("TESSERA_COORDINATOR");
  return env != nullptr && *env ? env : kDefaultCoordinatorAddress;
}

// For the dry-run, as a comment: each rank's total under each
// recomputation policy applied to every block, so that a job that does not
// fit shows what recomputation would buy.
std::string RecomputeAlternatives(const v1::JobSpec& spec, int shard_world) {
  std::string line = "# with memory.recompute on every block:";
  for (const auto policy : {v1::MemoryConfig::NONE, v1::MemoryConfig::SELECTIVE,
                            v1::MemoryConfig::BLOCKS}) {
    v1::JobSpec other = spec;
    other.mutable_memory()->set_recompute(policy);
    other.mutable_memory()->set_every_n_blocks(1);
    const RankMemoryEstimate e = EstimateRankMemory(other, 0, shard_world);
    absl::StrAppend(&line, " ", v1::MemoryConfig::Recompute_Name(policy), " ",
                    FormatBytesAsGiB(e.total()), " (activations ", FormatBytesAsGiB(e.activations),
                    ")", policy == v1::MemoryConfig::BLOCKS ? "" : ",");
  }
  return line + "\n";
}

double NowSeconds() { return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()); }

// Follows a job to its end; prints progress and the summary.
int Watch(CoordinatorClient& client, const std::string& job_id, int from_step, bool json,
          bool is_tty, std::ostream& out, std::ostream& err) {
  absl::StatusOr<v1::Job> job = client.GetJob(job_id);
  if (!job.ok()) return Fail(job.status(), err);
  ProgressTracker progress(job->spec().steps());
  const int every = std::max(1, job->spec().steps() / 50);
  // A restarted attempt reports steps again; the summary counts each once.
  StepHistory history;
  bool progress_shown = false;
  absl::Status status = client.WatchJob(job_id, from_step, [&](const v1::JobEvent& e) {
    if (json) {
      out << ToJsonLine(e) << "\n" << std::flush;
      return true;
    }
    if (e.has_step()) {
      history.Add(e.step());
      progress.Add(e.step(), NowSeconds());
      const int done = e.step().step() + 1;
      if (is_tty) {
        out << "\r" << progress.Line() << "\033[K" << std::flush;  // redraw in place
        progress_shown = true;
      } else if (done == 1 || done % every == 0 || done == job->spec().steps()) {
        out << progress.Line() << "\n" << std::flush;  // at most ~50 lines
      }
      // Every shadow step gets its lines, under the progress line.
      if (const std::string shadow = ShadowLines(e.step()); !shadow.empty()) {
        if (progress_shown) out << "\n";
        progress_shown = false;
        out << shadow << std::flush;
      }
    } else if (e.has_state_change()) {
      if (progress_shown) out << "\n";
      progress_shown = false;
      out << "[" << v1::JobState_Name(e.state_change().state()) << "]"
          << (e.state_change().reason().empty() ? "" : " " + e.state_change().reason())
          << (e.state_change().actor().empty() ? "" : " (by " + e.state_change().actor() + ")")
          << "\n"
          << std::flush;
    } else if (e.has_checkpoint()) {
      if (progress_shown) out << "\n";
      progress_shown = false;
      out << CheckpointLine(e.checkpoint()) << "\n" << std::flush;
    } else if (e.has_checkpoint_skipped()) {
      if (progress_shown) out << "\n";
      progress_shown = false;
      out << "[checkpoint] WARNING: step " << e.checkpoint_skipped().step()
          << " skipped: " << e.checkpoint_skipped().reason() << "\n" << std::flush;
    } else if (e.has_preemption()) {
      if (progress_shown) out << "\n";
      progress_shown = false;
      out << PreemptionLine(e.preemption(), job_id) << "\n" << std::flush;
    } else if (e.has_numerics()) {
      if (progress_shown) out << "\n";
      progress_shown = false;
      out << NumericsLine(e.numerics()) << "\n" << std::flush;
    } else if (e.has_numerics_warning()) {
      if (progress_shown) out << "\n";
      progress_shown = false;
      out << "[numerics] WARNING: " << e.numerics_warning().message() << "\n" << std::flush;
    } else if (e.has_slow_rank()) {
      if (progress_shown) out << "\n";
      progress_shown = false;
      out << "[slow rank] " << (e.slow_rank().slow() ? "WARNING: " : "")
          << e.slow_rank().message() << "\n" << std::flush;
    } else if (e.has_worker_error()) {
      if (progress_shown) out << "\n";
      progress_shown = false;
      const v1::WorkerError& w = e.worker_error();
      out << "[worker error] " << w.worker_id() << " (rank " << w.rank() << "): " << w.code()
          << ": " << w.message() << "\n" << std::flush;
    }
    return true;
  });
  if (!status.ok()) return Fail(status, err);
  absl::StatusOr<v1::Job> final_job = client.GetJob(job_id);
  if (!final_job.ok()) return Fail(final_job.status(), err);
  if (!json) {
    out << FormatSummary(*final_job, history.total_tokens(), history.total_step_time_s());
  }
  return final_job->state() == v1::SUCCEEDED ? kExitOk : kExitFailed;
}

// Polls the job until `done` holds for it (suspend --wait, checkpoint --wait).
absl::StatusOr<v1::Job> WaitForJob(CoordinatorClient& client, const std::string& job_id,
                                   const std::function<bool(const v1::Job&)>& done) {
  while (true) {
    absl::StatusOr<v1::Job> job = client.GetJob(job_id);
    if (!job.ok() || done(*job)) return job;
    absl::SleepFor(absl::Milliseconds(200));
  }
}

// The line `checkpoint`, `suspend` and `resume` print for `job`.
void PrintJob(const v1::Job& job, bool json, const std::string& line, std::ostream& out) {
  out << (json ? ToJsonLine(job) : line) << "\n";
}

int RunCommand(const ParsedArgs& args, std::ostream& out, std::ostream& err, bool is_tty,
               DataCommand data_command) {
  if (args.command == "data" || args.command == "export") {
    if (data_command == nullptr) {
      err << "tessera: the " << args.command << " command is not built into this program\n";
      return kExitUsage;
    }
    return data_command(args, out, err);
  }
  const bool json = args.Has("json");
  if (args.command == "version") {
    if (json) {
      out << "{\"program\":\"tessera\",\"version\":\"" << kTesseraVersion
          << "\",\"commit\":\"" << BuildCommit() << "\",\"tree\":\"" << BuildTree()
          << "\"}\n";
    } else {
      out << VersionLine("tessera") << "\n";
    }
    return kExitOk;
  }
  absl::StatusOr<ClientOptions> options =
      CliClientOptions(args, [](const char* name) { return std::getenv(name); });
  if (!options.ok()) {
    err << "tessera: " << options.status().message() << "\n";
    return kExitUsage;
  }
  CoordinatorClient client(CoordinatorAddress(args), *options);
  if (!client.credentials_status().ok()) {
    err << "tessera: " << client.credentials_status().message() << "\n";
    return kExitUsage;
  }

  if (args.command == "submit") {
    absl::StatusOr<v1::JobSpec> spec = ReadJobFile(args.positional[0]);
    if (!spec.ok()) {
      err << "tessera: " << spec.status().message() << "\n";
      return kExitUsage;
    }
    if (args.Has("dry-run")) {
      out << (json ? JobSpecToJson(*spec) : JobSpecToYaml(*spec));
      // What it will cost, as YAML comments (on stderr with --json, so the
      // output stays one JSON document): each rank's device memory by
      // component (common/memory_estimate.h, the figure SetupJob checks)
      // and, with checkpoints, one checkpoint's size on disk.
      const v1::JobSpec full = WithDefaults(*spec);
      const int shard_world = ShardGroupSize(full);
      const RankMemoryEstimate memory = EstimateRankMemory(full, 0, shard_world);
      (json ? err : out) << absl::StrFormat(
          "# memory per rank (%d ranks, sharded over %d): %s\n", full.world_size(), shard_world,
          memory.ToString());
      (json ? err : out) << RecomputeAlternatives(full, shard_world);
      (json ? err : out) << AttentionLine(full);
      if (!spec->checkpoint().dir().empty()) {
        const CheckpointSize size = EstimateCheckpointSize(full);
        (json ? err : out) << absl::StrFormat(
            "# checkpoint size: %s (%d ranks' files, %.1f bytes per parameter)\n",
            FormatBytesAsGiB(size.total_bytes), size.writing_ranks,
            size.parameters > 0 ? static_cast<double>(size.state_bytes) / size.parameters : 0.0);
        (json ? err : out) << CheckpointIntervalLine(size.total_bytes,
                                                     full.checkpoint().interval_steps());
      }
      // Where it would run now, from the coordinator's scheduler; only when
      // a coordinator is named, and without one the dry run is complete.
      if (!CoordinatorGiven(args)) return kExitOk;
      absl::StatusOr<v1::PlacementExplanation> placement = client.ExplainPlacement(*spec);
      if (!placement.ok() && IsCoordinatorUnreachable(placement.status())) {
        (json ? err : out) << "# placement: not checked: " << placement.status().message()
                           << "\n";
        return kExitOk;
      }
      if (!placement.ok()) return Fail(placement.status(), err);
      (json ? err : out) << PlacementLines(*placement);
      return kExitOk;
    }
    absl::StatusOr<v1::Job> job = client.SubmitJob(*spec);
    if (!job.ok()) return Fail(job.status(), err);
    if (json) {
      out << ToJsonLine(*job) << "\n";
    } else {
      out << "submitted " << job->id() << " (" << v1::JobState_Name(job->state()) << ": "
          << job->reason() << ")\n";
    }
    if (!args.Has("watch")) return kExitOk;
    return Watch(client, job->id(), 0, json, is_tty, out, err);
  }
  if (args.command == "jobs") {
    std::vector<v1::JobState> states;
    if (args.Has("state")) {
      v1::JobState state;
      if (!v1::JobState_Parse(args.Get("state"), &state)) {
        err << "tessera: --state: unknown state '" << args.Get("state") << "'\n";
        return kExitUsage;
      }
      states.push_back(state);
    }
    if (args.Has("mine") && args.Has("owner")) {
      err << "tessera: --mine and --owner: give one\n";
      return kExitUsage;
    }
    CoordinatorClient::JobFilter filter;
    filter.states = states;
    filter.owner = args.Get("owner");
    filter.only_mine = args.Has("mine");
    absl::StatusOr<std::vector<v1::Job>> jobs = client.ListJobsMatching(filter);
    if (!jobs.ok()) return Fail(jobs.status(), err);
    if (json) {
      v1::ListJobsResponse all;
      for (const v1::Job& j : *jobs) *all.add_jobs() = j;
      out << ToJsonLine(all) << "\n";
    } else {
      out << FormatJobsTable(*jobs);
    }
    return kExitOk;
  }
  if (args.command == "status") {
    absl::StatusOr<v1::Job> job = client.GetJob(args.positional[0]);
    if (!job.ok()) return Fail(job.status(), err);
    out << (json ? ToJsonLine(*job) + "\n" : FormatJob(*job));
    return kExitOk;
  }
  if (args.command == "watch") {
    int from_step = 0;
    if (args.Has("from-step") && !absl::SimpleAtoi(args.Get("from-step"), &from_step)) {
      err << "tessera: --from-step: not a number\n";
      return kExitUsage;
    }
    return Watch(client, args.positional[0], from_step, json, is_tty, out, err);
  }
  if (args.command == "numerics") {
    int top = 10;
    if (args.Has("top") && (!absl::SimpleAtoi(args.Get("top"), &top) || top < 0)) {
      err << "tessera: --top: expected a number of tensors (an integer >= 0), got '"
          << args.Get("top") << "'\n";
      return kExitUsage;
    }
    absl::StatusOr<v1::Fp8Numerics> numerics = client.GetFp8Numerics(args.positional[0]);
    if (!numerics.ok()) return Fail(numerics.status(), err);
    out << (json ? ToJsonLine(WorstOnly(*numerics, top)) + "\n"
                 : FormatNumericsTable(*numerics, top));
    return kExitOk;
  }
  if (args.command == "cancel") {
    absl::StatusOr<v1::Job> job = client.CancelJob(args.positional[0], args.Get("reason"));
    if (!job.ok()) return Fail(job.status(), err);
    out << (json ? ToJsonLine(*job) + "\n" : "cancelling " + job->id() + "\n");
    return kExitOk;
  }
  if (args.command == "checkpoint") {
    absl::StatusOr<v1::Job> job = client.CheckpointJob(args.positional[0]);
    if (!job.ok()) return Fail(job.status(), err);
    if (!args.Has("wait")) {
      PrintJob(*job, json, "checkpointing " + job->id() + " at its next step boundary", out);
      return kExitOk;
    }
    const int before = job->committed_step();
    job = WaitForJob(client, job->id(), [before](const v1::Job& j) {
      return j.committed_step() > before || j.state() != v1::RUNNING;
    });
    if (!job.ok()) return Fail(job.status(), err);
    const bool committed = job->committed_step() > before;
    PrintJob(*job, json,
             committed ? absl::StrCat(job->id(), ": checkpoint of step ", job->committed_step(),
                                      " committed")
                       : absl::StrCat(job->id(), " is ", v1::JobState_Name(job->state()),
                                      " with no new checkpoint: ", job->reason()),
             out);
    return committed ? kExitOk : kExitFailed;
  }
  if (args.command == "suspend") {
    absl::StatusOr<v1::Job> job = client.SuspendJob(args.positional[0], args.Get("reason"));
    if (!job.ok()) return Fail(job.status(), err);
    if (!args.Has("wait")) {
      PrintJob(*job, json,
               "suspending " + job->id() +
                   ": a checkpoint at its next step boundary, then its workers are released",
               out);
      return kExitOk;
    }
    job = WaitForJob(client, job->id(), [](const v1::Job& j) { return j.state() != v1::RUNNING; });
    if (!job.ok()) return Fail(job.status(), err);
    PrintJob(*job, json,
             absl::StrCat(job->id(), " is ", v1::JobState_Name(job->state()), ": ", job->reason()),
             out);
    return job->state() == v1::SUSPENDED ? kExitOk : kExitFailed;
  }
  if (args.command == "resume") {
    absl::StatusOr<v1::Job> job = client.ResumeJob(args.positional[0]);
    if (!job.ok()) return Fail(job.status(), err);
    PrintJob(*job, json,
             absl::StrCat("resuming ", job->id(), " from checkpoint step ", job->committed_step(),
                          " (", v1::JobState_Name(job->state()), ": ", job->reason(), ")"),
             out);
    return kExitOk;
  }
  if (args.command == "delete") {
    if (absl::Status s = client.DeleteJob(args.positional[0]); !s.ok()) return Fail(s, err);
    if (json) {
      v1::DeleteJobRequest deleted;
      deleted.set_job_id(args.positional[0]);
      out << ToJsonLine(deleted) << "\n";
    } else {
      out << "deleted " << args.positional[0] << "\n";
    }
    return kExitOk;
  }
  if (args.command == "logs") {
    std::vector<int> ranks;
    if (args.Has("rank")) {
      int rank = -1;
      if (!absl::SimpleAtoi(args.Get("rank"), &rank) || rank < 0) {
        err << "tessera: --rank: expected a rank (an integer >= 0), got '" << args.Get("rank")
            << "'\n";
        return kExitUsage;
      }
      ranks.push_back(rank);
    }
    absl::Status s = client.StreamJobLogs(
        args.positional[0], ranks, args.Has("follow"), [&](const v1::LogLine& line) {
          if (json) {
            out << ToJsonLine(line) << "\n";
          } else {
            out << FormatLogLine(line) << "\n";
          }
          out << std::flush;
          return true;
        });
    if (!s.ok()) return Fail(s, err);
    return kExitOk;
  }
  if (args.command == "health") {
    absl::StatusOr<std::string> serving = client.CheckHealth(args.Get("service"));
    if (!serving.ok()) return Fail(serving.status(), err);
    out << *serving << "\n";
    return *serving == "SERVING" ? kExitOk : kExitFailed;
  }
  if (args.command == "workers") {
    absl::StatusOr<std::vector<v1::WorkerRecord>> workers = client.ListWorkers();
    if (!workers.ok()) return Fail(workers.status(), err);
    if (json) {
      v1::ListWorkersResponse all;
      for (const v1::WorkerRecord& w : *workers) *all.add_workers() = w;
      out << ToJsonLine(all) << "\n";
    } else {
      out << FormatWorkersTable(*workers);
    }
    return kExitOk;
  }
  err << "tessera: unknown command\n";
  return kExitUsage;
}

}  // namespace

int RunCli(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err,
           bool is_tty, DataCommand data_command) {
  absl::StatusOr<ParsedArgs> args = ParseArgs(argv);
  if (!args.ok()) {
    err << "tessera: " << args.status().message() << "\n";
    return kExitUsage;
  }
  if (args->help) {
    const CommandSpec* command = FindCommand(args->command);
    out << (command != nullptr ? CommandHelp(*command) : ProgramHelp());
    return kExitOk;
  }
  return RunCommand(*args, out, err, is_tty, data_command);
}

}  // namespace tessera
