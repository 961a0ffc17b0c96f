// CLI output formatting (see output_format.h).
#include "client/output_format.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "common/cudnn_attention_workspace.h"
#include "common/memory_estimate.h"
#include "google/protobuf/util/json_util.h"

namespace tessera {

std::string ToJsonLine(const google::protobuf::Message& message) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out;
}

std::string AttentionLine(const v1::JobSpec& spec) {
  const JobAttention a = AttentionOfJob(spec);
  if (!a.cuda) return std::string();
  if (!a.cudnn) {
    // Tessera's kernels by name, or AUTO's choice
    // (AutoAttentionPicksCudnn: today both backwards).
    return absl::StrCat(
        "# attention: Tessera's kernels (",
        spec.attention_kernels() == v1::ATTENTION_KERNELS_TESSERA ? "ATTENTION_KERNELS_TESSERA"
                                                                   : "AUTO",
        "), ", a.deterministic ? "deterministic" : "atomic (nondeterministic)",
        " backward, workspace ", FormatBytesAsGiB(TesseraAttentionWorkspaceOfJob(a)),
        " per rank (counted above)\n");
  }
  const int64_t bytes = CudnnWorkspaceOfJob(a, a.deterministic);
  const int bands = a.deterministic ? a.key_bands : 1;
  const std::string in_bands = bands > 1 ? absl::StrCat(" in ", bands, " key bands") : "";
  const bool automatic = spec.attention_kernels() != v1::ATTENTION_KERNELS_CUDNN;
  const int64_t tessera_bytes = TesseraAttentionWorkspaceOfJob(a);
  std::string line = absl::StrCat("# attention: cuDNN (", automatic ? "AUTO" : "CUDNN", "), ",
                                  a.deterministic ? "deterministic" : "atomic (nondeterministic)",
                                  " backward", in_bands, ", workspace ", FormatBytesAsGiB(bytes),
                                  " per rank (counted above); ATTENTION_KERNELS_TESSERA takes ",
                                  FormatBytesAsGiB(tessera_bytes));
  if (a.deterministic) {
    absl::StrAppend(&line, ", nondeterministic_attention_backward ",
                    FormatBytesAsGiB(CudnnWorkspaceOfJob(a, /*deterministic=*/false)));
  }
  if (a.documents) {
    absl::StrAppend(&line, "; documents run as cuDNN's ragged batches where they average 512 "
                           "tokens or more and their plan fits that workspace, else Tessera's "
                           "kernels");
  }
  return line + "\n";
}

std::string CheckpointIntervalLine(int64_t bytes, int interval_steps) {
  if (interval_steps <= 0) return std::string();
  const double write_s = static_cast<double>(bytes) / 1e9;
  return absl::StrFormat(
      "# checkpoint write: about %.1f s at 1 GB/s; every %d steps, training waits for the "
      "previous write unless a step takes %.3f s or more\n",
      write_s, interval_steps, write_s / interval_steps);
}

std::string CheckpointLine(const v1::CheckpointCommitted& commit) {
  double slowest_gb_per_s = 0;
  bool first = true;
  for (const v1::RankCheckpointWrite& r : commit.ranks()) {
    if (r.bytes() == 0) continue;  // a replica that writes nothing
    if (first || r.write_gb_per_s() < slowest_gb_per_s) slowest_gb_per_s = r.write_gb_per_s();
    first = false;
  }
  std::string line = absl::StrFormat("[checkpoint] step %d committed: %s in %.2f s",
                                     commit.step(), FormatBytesAsGiB(commit.bytes()),
                                     commit.write_s());
  if (slowest_gb_per_s > 0) absl::StrAppendFormat(&line, " (%.2f GB/s)", slowest_gb_per_s);
  absl::StrAppendFormat(&line, ", training stalled %.2f s", commit.stall_s());
  if (commit.prune_s() >= 0.05) {
    absl::StrAppendFormat(&line, "; older steps removed in %.1f s", commit.prune_s());
  }
  if (!commit.warning().empty()) absl::StrAppend(&line, "\n[checkpoint] WARNING: ", commit.warning());
  return line;
}

std::string FormatDuration(double seconds) {
  if (seconds < 0 || !std::isfinite(seconds)) return "-";
  int64_t s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return absl::StrFormat("%d:%02d:%02d", s / 3600, (s / 60) % 60, s % 60);
  return absl::StrFormat("%d:%02d", s / 60, s % 60);
}

std::string FormatRate(double v) {
  if (v >= 1e6) return absl::StrFormat("%.2fM", v / 1e6);
  if (v >= 1e3) return absl::StrFormat("%.1fk", v / 1e3);
  return absl::StrFormat("%.0f", v);
}

namespace {

std::string Time(int64_t unix_ms) {
  if (unix_ms == 0) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::FromUnixMillis(unix_ms), absl::LocalTimeZone());
}

// The job a worker runs; one it still holds but should not (reconciliation)
// shows as being aborted.
std::string WorkerJob(const v1::WorkerRecord& w) {
  if (!w.job_id().empty()) return w.job_id();
  if (!w.activity().job_id().empty()) return absl::StrCat("aborting ", w.activity().job_id());
  return "-";
}

// "validation loss 1.2345 over 4.10k tokens, after step 120\n" (1-based
// step count, as the progress line counts).
std::string ValidationLine(const std::string& label, const v1::StepMetrics& m) {
  return absl::StrFormat("%-9s loss %.4f over %s tokens, after step %d\n", label,
                         m.validation().loss(),
                         FormatRate(static_cast<double>(m.validation().tokens())), m.step() + 1);
}

// One line per validation source: "  source  PATH  loss 1.2345 over 4.10k tokens\n".
std::string SourceValidationLines(const v1::StepMetrics& m) {
  std::string out;
  for (const v1::SourceValidationLoss& source : m.validation().sources()) {
    absl::StrAppend(&out, absl::StrFormat("  source  %s  loss %.4f over %s tokens\n", source.path(),
                                          source.loss(),
                                          FormatRate(static_cast<double>(source.tokens()))));
  }
  return out;
}

// The last component of a source path ("/data/web/" -> "web").
std::string ShortSourceName(const std::string& path) {
  std::string trimmed = path;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  const size_t slash = trimmed.rfind('/');
  return slash == std::string::npos ? trimmed : trimmed.substr(slash + 1);
}

// Where the collectives' time was waited for (StepPhases.collective_waits):
// the sites with at least 10 us, largest first; nothing without waits.
std::string CollectiveWaitsLine(const v1::StepPhases& p) {
  if (!p.has_collective_waits()) return "";
  const v1::CollectiveWaits& w = p.collective_waits();
  std::vector<std::pair<double, const char*>> sites = {
      {w.first_gather_s(), "first gather"},      {w.forward_gather_s(), "forward gathers"},
      {w.head_gather_s(), "head gather"},        {w.backward_gather_s(), "backward gathers"},
      {w.gradient_buffer_s(), "gradient buffers"}, {w.gradient_reduce_s(), "gradient reduce"},
      {w.final_reduce_s(), "final reduce"},      {w.all_reduce_s(), "all-reduces"}};
  std::stable_sort(sites.begin(), sites.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string parts;
  for (const auto& [seconds, name] : sites) {
    if (seconds < 1e-5) continue;
    absl::StrAppend(&parts, parts.empty() ? "" : "  ", absl::StrFormat("%s %.2f", name, seconds * 1e3));
  }
  if (parts.empty()) return "";
  return absl::StrCat("waits     ", parts, " ms (the collectives above, by where the step waited)\n");
}

}  // namespace

std::string ShadowLines(const v1::StepMetrics& m) {
  if (!m.has_shadow()) return std::string();
  const v1::ShadowLoss& s = m.shadow();
  std::string out = absl::StrFormat(
      "shadow: fp8 %.4f bf16 %.4f gap %+.4f after step %d (held-out batch, %s tokens, %.1f ms)\n",
      s.fp8_loss(), s.bf16_loss(), s.gap(), m.step() + 1,
      FormatRate(static_cast<double>(s.tokens())), s.time_s() * 1e3);
  if (!s.warning().empty()) absl::StrAppend(&out, "WARNING: ", s.warning(), "\n");
  return out;
}

std::string FormatJobsTable(const std::vector<v1::Job>& jobs) {
  std::string out = absl::StrFormat("%-10s %-20s %-12s %-10s %11s %10s  %s\n", "ID", "NAME",
                                    "OWNER", "STATE", "STEPS", "LOSS", "REASON");
  for (const v1::Job& j : jobs) {
    std::string steps = absl::StrCat(j.steps_done(), "/", j.spec().steps());
    std::string loss = j.steps_done() > 0 ? absl::StrFormat("%.4f", j.last_metrics().loss()) : "-";
    const std::string owner = j.owner().empty() ? "-" : j.owner();
    absl::StrAppend(&out, absl::StrFormat("%-10s %-20s %-12s %-10s %11s %10s  %s\n", j.id(),
                                          j.spec().name().substr(0, 20), owner,
                                          v1::JobState_Name(j.state()), steps, loss, j.reason()));
  }
  return out;
}

std::string FormatJob(const v1::Job& j) {
  std::string out = absl::StrCat("job       ", j.id(), "  ", j.spec().name(), "\n",
                                 "owner     ", j.owner().empty() ? "-" : j.owner(), "\n",
                                 "state     ", v1::JobState_Name(j.state()), "\n",
                                 "reason    ", j.reason(), "\n",
                                 "steps     ", j.steps_done(), "/", j.spec().steps(), "\n");
  if (j.queue_position() > 0) absl::StrAppend(&out, "queue     position ", j.queue_position(), "\n");
  if (j.spec().priority() > 0 || j.preemptions() > 0) {
    absl::StrAppend(&out, "priority  ", j.spec().priority(),
                    j.preemptions() > 0 ? absl::StrCat(" (preempted ", j.preemptions(),
                                                       j.preemptions() == 1 ? " time)" : " times)")
                                        : "",
                    "\n");
  }
  if (j.spec().max_restarts() > 0 || j.restarts() > 0) {
    absl::StrAppend(&out, "restarts  ", j.restarts(), " of ", j.spec().max_restarts(),
                    j.committed_step() > 0
                        ? absl::StrCat(" (newest checkpoint: step ", j.committed_step(), ")")
                        : std::string(),
                    "\n");
  }
  if (j.checkpoint_bytes() > 0) {
    absl::StrAppend(&out, "checkpoint ", FormatBytesAsGiB(j.checkpoint_bytes()), " each, every ",
                    j.spec().checkpoint().interval_steps() > 0
                        ? absl::StrCat(j.spec().checkpoint().interval_steps(), " steps")
                        : std::string("job (at its end)"),
                    " under ", j.spec().checkpoint().dir(),
                    j.committed_step() > 0
                        ? absl::StrCat(" (newest committed: step ", j.committed_step(), ")")
                        : std::string(),
                    "\n");
  }
  if (j.steps_done() > 0) {
    const v1::StepMetrics& m = j.last_metrics();
    absl::StrAppend(&out, absl::StrFormat("last step loss %.4f  grad_norm %.4f  lr %.3g  tok/s %s\n",
                                          m.loss(), m.grad_norm(), m.lr(),
                                          FormatRate(m.tokens_per_s())));
    if (m.has_validation()) {
      absl::StrAppend(&out, ValidationLine("validation", m), SourceValidationLines(m));
    }
    absl::StrAppend(&out, ShadowLines(m));
    if (m.has_phases()) {
      const v1::StepPhases& p = m.phases();
      const std::string recompute =
          p.recompute_s() > 0 ? absl::StrFormat("  recompute %.2f", p.recompute_s() * 1e3) : "";
      absl::StrAppend(
          &out,
          absl::StrFormat("phases    forward %.2f  loss %.2f  backward %.2f%s  optimizer %.2f  "
                          "collectives %.2f  host %.2f ms (last step, slowest rank)\n",
                          p.forward_s() * 1e3, p.loss_s() * 1e3, p.backward_s() * 1e3, recompute,
                          p.optimizer_s() * 1e3, p.collective_s() * 1e3, p.host_s() * 1e3));
      absl::StrAppend(&out, CollectiveWaitsLine(p));
    }
    if (m.peak_memory_bytes() > 0) {
      absl::StrAppend(&out, "memory    ", FormatBytesAsGiB(m.peak_memory_bytes()),
                      " peak on rank ", m.peak_memory_rank(),
                      " (device memory in use after a step, the fullest rank)\n");
    }
    if (m.mfu() > 0) {
      absl::StrAppend(&out, absl::StrFormat("mfu       %.1f%% (model FLOPs / bf16 peak)\n",
                                            m.mfu() * 100));
    }
    absl::StrAppend(&out, absl::StrFormat("overhead  %.3f ms/step (coordinator, mean)\n",
                                          j.mean_control_overhead_s() * 1e3));
  }
  absl::StrAppend(&out, "workers   ");
  for (int i = 0; i < j.worker_ids_size(); ++i) {
    absl::StrAppend(&out, i ? ", " : "", "rank ", i, "=", j.worker_ids(i));
  }
  absl::StrAppend(&out, j.worker_ids_size() ? "\n" : "-\n");
  for (const v1::SlowRank& r : j.slow_ranks()) {
    absl::StrAppend(&out, absl::StrFormat(
        "slow      rank %d (worker %s at %s): %.0f%% slower than the median rank, median compute "
        "%.4f s/step against %.4f s over steps %d-%d\n",
        r.rank(), r.worker_id(), r.address(), 100 * r.slowdown(), r.rank_compute_s(),
        r.median_compute_s(), r.step() - r.window_steps() + 1, r.step()));
  }
  absl::StrAppend(&out, "created   ", Time(j.create_time_unix_ms()),
                  "\nstarted   ", Time(j.start_time_unix_ms()), "\nended     ",
                  Time(j.end_time_unix_ms()), "\n");
  return out;
}

std::string FormatWorkersTable(const std::vector<v1::WorkerRecord>& workers) {
  std::string out = absl::StrFormat("%-8s %-22s %-6s %-28s %-8s %s\n", "ID", "ADDRESS", "KIND",
                                    "DEVICE", "HEALTHY", "JOB");
  for (const v1::WorkerRecord& w : workers) {
    absl::StrAppend(&out, absl::StrFormat("%-8s %-22s %-6s %-28s %-8s %s\n", w.worker_id(),
                                          w.address(), v1::DeviceKind_Name(w.device().kind()),
                                          w.device().name().substr(0, 28),
                                          w.healthy() ? "yes" : "no: " + w.health_reason(),
                                          WorkerJob(w)));
  }
  return out;
}

void ProgressTracker::Add(const v1::StepMetrics& m, double now_s) {
  last_step_ = m.step();
  loss_ = m.loss();
  tokens_per_s_ = m.tokens_per_s();
  if (m.has_validation()) {
    validation_loss_ = m.validation().loss();
    validation_sources_.assign(m.validation().sources().begin(), m.validation().sources().end());
  }
  recent_.emplace_back(m.step(), now_s);
  if (recent_.size() > 20) recent_.erase(recent_.begin());
}

double ProgressTracker::EtaSeconds() const {
  if (recent_.size() < 2) return -1;
  double dt = recent_.back().second - recent_.front().second;
  int ds = recent_.back().first - recent_.front().first;
  if (ds <= 0 || dt <= 0) return -1;
  return (total_steps_ - 1 - last_step_) * dt / ds;
}

std::string ProgressTracker::Line(int bar_width) const {
  int done = last_step_ + 1;
  double frac = total_steps_ > 0 ? std::clamp(static_cast<double>(done) / total_steps_, 0.0, 1.0) : 0;
  int filled = static_cast<int>(frac * bar_width);
  std::string bar = std::string(filled, '#') + std::string(bar_width - filled, '.');
  std::string validation =
      validation_loss_.has_value() ? absl::StrFormat("  val %.4f", *validation_loss_) : "";
  for (size_t i = 0; i < validation_sources_.size(); ++i) {
    absl::StrAppend(&validation, i == 0 ? " (" : ", ",
                    ShortSourceName(validation_sources_[i].path()),
                    absl::StrFormat(" %.4f", validation_sources_[i].loss()),
                    i + 1 == validation_sources_.size() ? ")" : "");
  }
  return absl::StrFormat("step %d/%d [%s] %3.0f%%  loss %.4f%s  tok/s %s  ETA %s", done,
                         total_steps_, bar, frac * 100, loss_, validation,
                         FormatRate(tokens_per_s_), FormatDuration(EtaSeconds()));
}

std::string FormatSummary(const v1::Job& j, double total_tokens, double total_step_time_s) {
  double wall = j.end_time_unix_ms() && j.start_time_unix_ms()
                    ? (j.end_time_unix_ms() - j.start_time_unix_ms()) / 1e3
                    : -1;
  std::string out = absl::StrCat("job ", j.id(), " ", v1::JobState_Name(j.state()), ": ",
                                 j.reason(), "\n");
  absl::StrAppend(&out, absl::StrFormat("  steps        %d/%d\n", j.steps_done(), j.spec().steps()));
  if (j.steps_done() > 0) {
    absl::StrAppend(&out, absl::StrFormat("  final loss   %.4f\n", j.last_metrics().loss()));
    if (j.last_metrics().has_validation()) {
      absl::StrAppend(&out, absl::StrFormat("  validation   %.4f (after step %d)\n",
                                            j.last_metrics().validation().loss(),
                                            j.last_metrics().step() + 1));
      for (const v1::SourceValidationLoss& source : j.last_metrics().validation().sources()) {
        absl::StrAppend(&out, absl::StrFormat("    %s  %.4f\n", source.path(), source.loss()));
      }
    }
  }
  if (total_step_time_s > 0) {
    absl::StrAppend(&out, absl::StrFormat("  tokens/s     %s (all ranks, mean over steps)\n",
                                          FormatRate(total_tokens / total_step_time_s)));
  }
  absl::StrAppend(&out, absl::StrFormat("  wall time    %s\n", FormatDuration(wall)));
  absl::StrAppend(&out, absl::StrFormat("  coordinator overhead %.3f ms/step (mean)\n",
                                        j.mean_control_overhead_s() * 1e3));
  return out;
}

}  // namespace tessera
