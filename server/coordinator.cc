// The coordinator's core (see coordinator.h).
#include "server/coordinator.h"

#include <dirent.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/spec_limits.h"
#include "server/job_pagination.h"
#include "server/job_state_machine.h"
#include "server/model_flops.h"
#include "server/request_limits.h"
#include "server/spec_validation.h"

namespace tessera {
namespace {

void MakeDirs(const std::string& path) {
  std::string partial;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      if (!partial.empty()) mkdir(partial.c_str(), 0755);
    }
    if (i < path.size()) partial += path[i];
  }
}

absl::Status CheckJobId(const std::string& job_id) {
  return CheckStringLimit("job_id", job_id, kMaxIdBytes);
}

absl::Status NotFound(const std::string& job_id) {
  return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
}

constexpr char kNextJobNumberFile[] = "next_job_number";

// Records written before the request limits existed may hold strings of any
// size (a 10 MB name once made every ListJobs response too large for gRPC);
// cutting them to the limits makes such a state directory listable again.
// Returns whether anything was cut.
bool BoundStoredStrings(v1::Job* job) {
  bool cut = false;
  auto bound = [&cut](std::string* s, size_t max) {
    if (s->size() <= max) return;
    *s = TruncateUtf8(*s, max);
    cut = true;
  };
  v1::JobSpec* spec = job->mutable_spec();
  bound(spec->mutable_name(), kMaxJobNameBytes);
  if (spec->data().source_case() == v1::DataConfig::kTokenFile) {
    bound(spec->mutable_data()->mutable_token_file(), kMaxPathBytes);
  }
  if (spec->has_checkpoint()) bound(spec->mutable_checkpoint()->mutable_dir(), kMaxPathBytes);
  bound(job->mutable_reason(), kMaxStoredMessageBytes);
  return cut;
}

}  // namespace

Coordinator::Coordinator(CoordinatorOptions options)
    : options_(std::move(options)),
      registry_(options_.worker_timeout),
      scheduler_(options_.starvation_timeout) {}

Coordinator::~Coordinator() { Shutdown(); }

absl::Status Coordinator::Start() {
  if (!options_.state_dir.empty()) {
    MakeDirs(options_.state_dir + "/jobs");
    struct stat st;
    if (stat((options_.state_dir + "/jobs").c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat("state_dir: cannot create ", options_.state_dir, "/jobs"));
    }
    LoadPersisted();
  }
  if (options_.start_background_thread) {
    background_ = std::thread([this] {
      while (!stop_.WaitForNotificationWithTimeout(absl::Milliseconds(100))) Tick();
    });
  }
  return absl::OkStatus();
}

void Coordinator::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (background_.joinable()) background_.join();
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, entry] : jobs_) {
      if (entry->runner) entry->runner->Stop(v1::CANCELLED, "coordinator shutting down");
      if (entry->job.state() == v1::PENDING) {
        SetStateLocked(*entry, v1::CANCELLED, "coordinator shutting down");
      }
      if (entry->thread.joinable()) threads.push_back(std::move(entry->thread));
    }
  }
  for (auto& t : threads) t.join();
}

void Coordinator::LoadPersisted() {
  absl::MutexLock lock(&mu_);
  std::string dir = options_.state_dir + "/jobs";
  {
    std::ifstream in(options_.state_dir + "/" + kNextJobNumberFile);
    std::string text;
    int number = 0;
    if (in >> text && absl::SimpleAtoi(text, &number)) {
      next_job_number_ = std::max(next_job_number_, number);
    }
  }
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (!absl::EndsWith(name, ".binpb")) continue;
    std::ifstream in(dir + "/" + name, std::ios::binary);
    v1::Job job;
    if (!job.ParseFromIstream(&in)) continue;
    if (job.id().empty() || static_cast<int64_t>(job.id().size()) > kMaxIdBytes) continue;
    const bool cut = BoundStoredStrings(&job);
    auto entry = std::make_unique<JobEntry>();
    entry->job = job;
    if (cut) PersistLocked(entry->job);
    int number = 0;
    if (absl::SimpleAtoi(job.id().substr(job.id().find('-') + 1), &number)) {
      next_job_number_ = std::max(next_job_number_, number + 1);
    }
    if (!IsTerminal(job.state())) {
      entry->job.set_state(v1::FAILED);
      entry->job.set_reason("coordinator restarted while the job was " +
                            v1::JobState_Name(job.state()));
      entry->job.set_end_time_unix_ms(absl::ToUnixMillis(options_.now()));
      entry->job.clear_worker_ids();
      entry->job.set_queue_position(0);
      PersistLocked(entry->job);
    }
    v1::JobEvent event;
    event.mutable_state_change()->set_state(entry->job.state());
    event.mutable_state_change()->set_reason(entry->job.reason());
    entry->events->Append(event, /*closes=*/true);
    jobs_[job.id()] = std::move(entry);
  }
  closedir(d);
}

void Coordinator::PersistLocked(const v1::Job& job) {
  if (options_.state_dir.empty()) return;
  std::string path = absl::StrCat(options_.state_dir, "/jobs/", job.id(), ".binpb");
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!job.SerializeToOstream(&out)) return;
  }
  std::rename(tmp.c_str(), path.c_str());
}

// Written when a job is deleted: the records left may no longer show the
// highest number handed out.
void Coordinator::PersistNextJobNumberLocked() {
  if (options_.state_dir.empty()) return;
  std::string path = absl::StrCat(options_.state_dir, "/", kNextJobNumberFile);
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << next_job_number_ << "\n";
    if (!out) return;
  }
  std::rename(tmp.c_str(), path.c_str());
}

v1::Job Coordinator::SnapshotLocked(const JobEntry& entry) {
  v1::Job job = entry.job;
  job.set_queue_position(scheduler_.Position(job.id()));
  return job;
}

void Coordinator::SetStateLocked(JobEntry& entry, v1::JobState state,
                                 const std::string& full_reason) {
  v1::Job& job = entry.job;
  if (!CheckTransition(job.state(), state, full_reason).ok()) return;
  // Reasons quote worker errors; keep every stored job record bounded.
  const std::string reason = TruncateUtf8(full_reason, kMaxStoredMessageBytes);
  int64_t now_ms = absl::ToUnixMillis(options_.now());
  job.set_state(state);
  job.set_reason(reason);
  if (state == v1::RUNNING) job.set_start_time_unix_ms(now_ms);
  if (IsTerminal(state)) {
    job.set_end_time_unix_ms(now_ms);
    job.set_queue_position(0);
    scheduler_.Remove(job.id());
    for (const std::string& w : job.worker_ids()) registry_.Release(w, job.id());
    rendezvous_.DropJob(job.id());
  }
  v1::JobEvent event;
  event.mutable_state_change()->set_state(state);
  event.mutable_state_change()->set_reason(reason);
  entry.events->Append(event, IsTerminal(state));
  PersistLocked(job);
}

absl::StatusOr<v1::Job> Coordinator::SubmitJob(const v1::JobSpec& spec) {
  if (absl::Status s = ValidateJobSpec(spec); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  if (shut_down_) return absl::UnavailableError("coordinator is shutting down");
  auto entry = std::make_unique<JobEntry>();
  v1::Job& job = entry->job;
  job.set_id(absl::StrCat("job-", next_job_number_++));
  *job.mutable_spec() = WithDefaults(spec);
  job.set_create_time_unix_ms(absl::ToUnixMillis(options_.now()));
  job.set_state(v1::PENDING);
  scheduler_.Enqueue(job.id(), job.spec(), options_.now());
  job.set_reason(scheduler_.PendingReasons(registry_, options_.now())[job.id()]);
  v1::JobEvent event;
  event.mutable_state_change()->set_state(v1::PENDING);
  event.mutable_state_change()->set_reason(job.reason());
  entry->events->Append(event, false);
  PersistLocked(job);
  std::string id = job.id();
  jobs_[id] = std::move(entry);
  return SnapshotLocked(*jobs_[id]);
}

absl::StatusOr<v1::Job> Coordinator::GetJob(const std::string& job_id) {
  if (absl::Status s = CheckJobId(job_id); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return NotFound(job_id);
  return SnapshotLocked(*it->second);
}

absl::StatusOr<Coordinator::JobPage> Coordinator::ListJobs(const std::vector<v1::JobState>& states,
                                                           int page_size,
                                                           const std::string& page_token) {
  absl::StatusOr<int> size = ResolvePageSize(page_size);
  if (!size.ok()) return size.status();
  const uint64_t fingerprint = FilterFingerprint(states);
  absl::StatusOr<std::optional<JobListPosition>> after = DecodePageToken(page_token, fingerprint);
  if (!after.ok()) return after.status();

  absl::MutexLock lock(&mu_);
  std::vector<std::pair<JobListPosition, const JobEntry*>> matching;
  for (const auto& [id, entry] : jobs_) {
    if (!states.empty() &&
        std::find(states.begin(), states.end(), entry->job.state()) == states.end()) {
      continue;
    }
    JobListPosition position = PositionOf(entry->job);
    if (*after && !ListedBefore(**after, position)) continue;  // on an earlier page
    matching.emplace_back(std::move(position), entry.get());
  }
  std::sort(matching.begin(), matching.end(),
            [](const auto& a, const auto& b) { return ListedBefore(a.first, b.first); });
  JobPage page;
  int64_t bytes = 0;
  for (const auto& [position, entry] : matching) {
    v1::Job job = SnapshotLocked(*entry);
    // A repeated message in the response costs its size plus a tag and a
    // length prefix (at most 6 bytes together for jobs this small).
    bytes += static_cast<int64_t>(job.ByteSizeLong()) + 6;
    const bool full = static_cast<int>(page.jobs.size()) >= *size ||
                      (!page.jobs.empty() && bytes > kMaxJobsPageBytes);
    if (full) {
      page.next_page_token = EncodePageToken(PositionOf(page.jobs.back()), fingerprint);
      break;
    }
    page.jobs.push_back(std::move(job));
  }
  return page;
}

absl::StatusOr<v1::Job> Coordinator::CancelJob(const std::string& job_id,
                                               const std::string& reason) {
  if (absl::Status s = CheckJobId(job_id); !s.ok()) return s;
  if (absl::Status s = CheckStringLimit("reason", reason, kMaxReasonBytes); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return NotFound(job_id);
  JobEntry& entry = *it->second;
  if (IsTerminal(entry.job.state())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, " is already ", v1::JobState_Name(entry.job.state())));
  }
  std::string why = reason.empty() ? "cancelled by user" : absl::StrCat("cancelled: ", reason);
  if (entry.runner) {
    entry.runner->Stop(v1::CANCELLED, why);  // the runner thread records the terminal state
  } else {
    SetStateLocked(entry, v1::CANCELLED, why);
  }
  return SnapshotLocked(entry);
}

absl::Status Coordinator::DeleteJob(const std::string& job_id) {
  if (absl::Status s = CheckJobId(job_id); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return NotFound(job_id);
  JobEntry& entry = *it->second;
  if (!IsTerminal(entry.job.state())) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " is ", v1::JobState_Name(entry.job.state()),
                     "; only a job that has ended can be deleted (cancel it first)"));
  }
  if (entry.thread.joinable()) {
    // A terminal job's runner thread has recorded its end and only has to
    // return; its callbacks never run again.
    if (!entry.thread_done) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job_id, " is still releasing its workers; try again"));
    }
    entry.thread.join();
  }
  if (!options_.state_dir.empty()) {
    std::remove(absl::StrCat(options_.state_dir, "/jobs/", job_id, ".binpb").c_str());
    PersistNextJobNumberLocked();
  }
  jobs_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<EventLog>> Coordinator::JobEvents(const std::string& job_id) {
  if (absl::Status s = CheckJobId(job_id); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return NotFound(job_id);
  return it->second->events;
}

absl::StatusOr<v1::RegisterWorkerResponse> Coordinator::RegisterWorker(
    const v1::RegisterWorkerRequest& req) {
  for (const auto& [field, value] :
       {std::pair<const char*, const std::string*>{"address", &req.address()},
        {"device.name", &req.device().name()},
        {"device.host", &req.device().host()}}) {
    if (absl::Status s = CheckStringLimit(field, *value, kMaxAddressBytes); !s.ok()) return s;
  }
  if (req.address().empty() || req.address().find(':') == std::string::npos) {
    return absl::InvalidArgumentError("address: must be host:port of the worker's WorkerService");
  }
  if (req.device().kind() != v1::CPU && req.device().kind() != v1::CUDA) {
    return absl::InvalidArgumentError("device.kind: must be CPU or CUDA");
  }
  absl::MutexLock lock(&mu_);
  v1::RegisterWorkerResponse resp;
  resp.set_worker_id(registry_.Register(req.address(), req.device(), options_.now()));
  resp.set_heartbeat_interval_ms(
      static_cast<int32_t>(absl::ToInt64Milliseconds(options_.heartbeat_interval)));
  RefreshPendingLocked();
  return resp;
}

absl::Status Coordinator::Heartbeat(const v1::HeartbeatRequest& req) {
  if (absl::Status s = CheckStringLimit("worker_id", req.worker_id(), kMaxIdBytes); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckStringLimit("health_reason", req.health_reason(), kMaxReasonBytes);
      !s.ok()) {
    return s;
  }
  absl::MutexLock lock(&mu_);
  return registry_.Heartbeat(req.worker_id(), req.healthy(), req.health_reason(), options_.now());
}

std::vector<v1::WorkerRecord> Coordinator::ListWorkers() {
  absl::MutexLock lock(&mu_);
  return registry_.List();
}

void Coordinator::RefreshPendingLocked() {
  for (auto& [id, reason] : scheduler_.PendingReasons(registry_, options_.now())) {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) continue;
    JobEntry& entry = *it->second;
    if (reason != entry.job.reason()) {
      entry.job.set_reason(reason);
      PersistLocked(entry.job);
    }
  }
}

void Coordinator::JoinFinishedLocked() {
  for (auto& [id, entry] : jobs_) {
    if (entry->thread_done && entry->thread.joinable()) entry->thread.join();
  }
}

void Coordinator::StartJobLocked(JobEntry& entry, const Placement& placement) {
  v1::Job& job = entry.job;
  std::vector<std::unique_ptr<WorkerConnection>> connections;
  // MFU needs every device's peak; one unknown (a CPU worker) means none.
  double peak_flops = 0.0;
  bool peaks_known = true;
  for (const std::string& w : placement.worker_ids) {
    registry_.Assign(w, job.id());
    job.add_worker_ids(w);
    const auto* record = registry_.Find(w);
    connections.push_back(options_.connect(record->address()));
    const double peak = PeakBf16FlopsPerSecond(record->device().name());
    peaks_known = peaks_known && peak > 0;
    peak_flops += peak;
  }
  const double flops_per_token = TrainingFlopsPerToken(job.spec().model());
  const std::string id = job.id();
  JobRunnerCallbacks callbacks;
  callbacks.on_state = [this, id](v1::JobState state, const std::string& reason) {
    absl::MutexLock lock(&mu_);
    SetStateLocked(*jobs_[id], state, reason);
  };
  callbacks.on_step = [this, id, flops_per_token, peak_flops = peaks_known ? peak_flops : 0.0](
                          const v1::StepMetrics& step) {
    v1::StepMetrics m = step;
    if (peak_flops > 0) m.set_mfu(m.tokens_per_s() * flops_per_token / peak_flops);
    absl::MutexLock lock(&mu_);
    JobEntry& e = *jobs_[id];
    v1::Job& j = e.job;
    double total = j.mean_control_overhead_s() * j.steps_done() + m.control_overhead_s();
    j.set_steps_done(m.step() + 1);
    j.set_mean_control_overhead_s(total / j.steps_done());
    *j.mutable_last_metrics() = m;
    v1::JobEvent event;
    *event.mutable_step() = m;
    e.events->Append(event, false);
  };
  callbacks.on_worker_error = [this, id](const v1::WorkerError& error) {
    absl::MutexLock lock(&mu_);
    v1::JobEvent event;
    *event.mutable_worker_error() = error;
    event.mutable_worker_error()->set_message(
        TruncateUtf8(error.message(), kMaxStoredMessageBytes));
    jobs_[id]->events->Append(event, false);
  };
  entry.runner = std::make_shared<JobRunner>(id, job.spec(), placement.worker_ids,
                                             std::move(connections), options_.rendezvous_address,
                                             options_.collective_timeout, std::move(callbacks));
  std::shared_ptr<JobRunner> runner = entry.runner;
  entry.thread = std::thread([this, id, runner] {
    JobOutcome outcome = runner->Run();
    absl::MutexLock lock(&mu_);
    JobEntry& e = *jobs_[id];
    SetStateLocked(e, outcome.state, outcome.reason);
    e.thread_done = true;
  });
}

void Coordinator::Tick() {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  JoinFinishedLocked();
  for (const WorkerRegistry::Lost& lost : registry_.Sweep(options_.now())) {
    if (lost.job_id.empty()) continue;
    auto it = jobs_.find(lost.job_id);
    if (it == jobs_.end()) continue;
    JobEntry& entry = *it->second;
    v1::WorkerError error;
    error.set_worker_id(lost.worker_id);
    for (int r = 0; r < entry.job.worker_ids_size(); ++r) {
      if (entry.job.worker_ids(r) == lost.worker_id) error.set_rank(r);
    }
    error.set_code("UNAVAILABLE");
    error.set_message(lost.reason);
    v1::JobEvent event;
    *event.mutable_worker_error() = error;
    entry.events->Append(event, false);
    if (entry.runner) entry.runner->Stop(v1::FAILED, lost.reason);
  }
  for (const Placement& placement : scheduler_.Schedule(registry_, options_.now())) {
    auto it = jobs_.find(placement.job_id);
    if (it != jobs_.end()) StartJobLocked(*it->second, placement);
  }
  RefreshPendingLocked();
}

}  // namespace tessera
