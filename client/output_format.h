// How the CLI prints things: job and worker tables, the live progress line
// with ETA (and the newest validation loss), the end-of-job summary, and
// JSON renderings (proto JSON with the proto field names) for --json.
#ifndef TESSERA_CLIENT_OUTPUT_FORMAT_H_
#define TESSERA_CLIENT_OUTPUT_FORMAT_H_

#include <optional>
#include <string>
#include <vector>

#include "google/protobuf/message.h"
#include "proto/tessera/v1/coordinator.pb.h"

namespace tessera {

std::string ToJsonLine(const google::protobuf::Message& message);
std::string FormatJobsTable(const std::vector<v1::Job>& jobs);
std::string FormatJob(const v1::Job& job);
std::string FormatWorkersTable(const std::vector<v1::WorkerRecord>& workers);

// For the dry run, as a comment: how long a checkpoint of `bytes` takes to
// write at 1 GB/s (what the disks we measured write with fsync), and the
// step time under which checkpoint.interval_steps makes training wait for
// the previous write. Empty when interval_steps is 0 (a final checkpoint
// only, which nothing waits for).
std::string CheckpointIntervalLine(int64_t bytes, int interval_steps);

// For the dry run of a CUDA job, as a comment: which attention
// implementation the job will run (JobSpec.attention_kernels, by the rule
// the engine and the memory estimate share) and the workspace it takes, e.g.
// "# attention: cuDNN (AUTO), deterministic backward in 4 key bands,
// workspace 4.39 GiB per rank (counted above); ATTENTION_KERNELS_TESSERA
// takes none, nondeterministic_attention_backward 0.52 GiB\n". Empty for
// other jobs.
std::string AttentionLine(const v1::JobSpec& spec);

// "[checkpoint] step 500 committed: 24.75 GiB in 19.3 s (1.37 GB/s),
// training stalled 0.81 s": the bytes over all ranks, from the snapshot to
// the commit, the slowest rank's write speed, and what training waited for.
std::string CheckpointLine(const v1::CheckpointCommitted& commit);

// "1:02:03", "4:05", "-" for unknown (negative).
std::string FormatDuration(double seconds);
// "12.3k", "4.56M".
std::string FormatRate(double per_second);

// The bf16 shadow loss of a step that carries one (StepMetrics.shadow):
// "shadow: fp8 3.2101 bf16 3.2034 gap +0.0067 after step 100 (held-out
// batch, 4.1k tokens, 12.3 ms)\n", then "WARNING: ...\n" when the
// coordinator flagged the gap. Empty for other steps.
std::string ShadowLines(const v1::StepMetrics& metrics);

// Tracks recent steps to estimate the ETA, and renders progress lines.
class ProgressTracker {
 public:
  explicit ProgressTracker(int total_steps) : total_steps_(total_steps) {}
  void Add(const v1::StepMetrics& metrics, double now_s);
  // "step 120/300 [########............]  40%  loss 1.2345  tok/s 12.3k  ETA 0:45",
  // with "  val 1.3012" after the loss once a step carried a validation loss
  // (the newest one), followed by each validation source's loss under its
  // path's last component: "  val 1.3012 (web 1.2001, code.tok 1.4410)".
  std::string Line(int bar_width = 24) const;
  double EtaSeconds() const;  // -1 while unknown
  int last_step() const { return last_step_; }

 private:
  int total_steps_;
  int last_step_ = -1;
  float loss_ = 0;
  std::optional<float> validation_loss_;
  std::vector<v1::SourceValidationLoss> validation_sources_;
  double tokens_per_s_ = 0;
  std::vector<std::pair<int, double>> recent_;  // (step, arrival time), last 20
};

// The end-of-job summary: final state and reason, steps, final loss (and
// validation loss, when the last step was evaluated), mean tokens/s, wall
// time and mean control-plane overhead per step.
std::string FormatSummary(const v1::Job& job, double total_tokens, double total_step_time_s);

}  // namespace tessera

#endif  // TESSERA_CLIENT_OUTPUT_FORMAT_H_
