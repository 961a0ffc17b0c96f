// The coordinator's persistence (see coordinator.h): writing job records and
// events to the job store as they change, and on start loading them back
// and recovering the jobs that had not ended. Split from coordinator.cc
// along that seam: nothing here runs while jobs are being scheduled, except
// the appends.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/spec_limits.h"
#include "server/coordinator.h"
#include "server/job_state_machine.h"
#include "server/request_limits.h"

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

// The job number in "job-N", or 0.
int JobNumber(const std::string& id) {
  int number = 0;
  const size_t dash = id.find('-');
  if (dash == std::string::npos || !absl::SimpleAtoi(id.substr(dash + 1), &number)) return 0;
  return number;
}

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

// Job records of releases before the job store: one file per job under
// state_dir/jobs, and the next job number in state_dir/next_job_number.
// They are moved into the store on the first start that finds them.
struct LegacyState {
  std::vector<v1::Job> jobs;
  std::vector<std::string> files;
  int next_job_number = 0;
};

LegacyState ReadLegacyState(const std::string& state_dir) {
  LegacyState legacy;
  const std::string counter = state_dir + "/next_job_number";
  {
    std::ifstream in(counter);
    std::string text;
    if (in >> text && absl::SimpleAtoi(text, &legacy.next_job_number)) {
      legacy.files.push_back(counter);
    }
  }
  const std::string dir = state_dir + "/jobs";
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return legacy;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (!absl::EndsWith(name, ".binpb")) continue;
    std::ifstream in(dir + "/" + name, std::ios::binary);
    v1::Job job;
    if (!job.ParseFromIstream(&in)) continue;
    if (job.id().empty() || static_cast<int64_t>(job.id().size()) > kMaxIdBytes) continue;
    legacy.jobs.push_back(std::move(job));
    legacy.files.push_back(dir + "/" + name);
  }
  closedir(d);
  return legacy;
}

}  // namespace

absl::Status Coordinator::LoadPersisted() {
  MakeDirs(options_.state_dir);
  const std::string path = options_.state_dir + "/coordinator.db";
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(path);
  if (!store.ok()) {
    return absl::Status(store.status().code(),
                        absl::StrCat("state_dir: ", store.status().message()));
  }
  std::vector<std::string> skipped;
  absl::StatusOr<std::vector<JobStore::StoredJob>> stored = (*store)->LoadAll(&skipped);
  if (!stored.ok()) {
    return absl::Status(stored.status().code(),
                        absl::StrCat("state_dir: ", stored.status().message()));
  }
  for (const std::string& what : skipped) {
    std::fprintf(stderr, "tessera-coordinator: %s in %s does not parse; skipped\n", what.c_str(),
                 path.c_str());
  }
  absl::StatusOr<int64_t> counter = (*store)->Counter(kNextJobNumberCounter, 1);

  absl::MutexLock lock(&mu_);
  store_ = std::move(*store);
  next_job_number_ = std::max<int64_t>(next_job_number_, counter.ok() ? *counter : 1);
  LegacyState legacy = ReadLegacyState(options_.state_dir);
  next_job_number_ = std::max(next_job_number_, legacy.next_job_number);
  for (v1::Job& job : legacy.jobs) {
    const std::string id = job.id();
    if (std::any_of(stored->begin(), stored->end(),
                    [&](const JobStore::StoredJob& s) { return s.job.id() == id; })) {
      continue;
    }
    JobStore::StoredJob moved;
    moved.job = std::move(job);
    stored->push_back(std::move(moved));
  }
  // Oldest first, so queued jobs keep their order.
  std::sort(stored->begin(), stored->end(), [](const auto& a, const auto& b) {
    return JobNumber(a.job.id()) < JobNumber(b.job.id());
  });
  for (JobStore::StoredJob& s : *stored) {
    auto entry = std::make_unique<JobEntry>();
    entry->job = std::move(s.job);
    const std::string id = entry->job.id();
    const bool cut = BoundStoredStrings(&entry->job);
    next_job_number_ = std::max(next_job_number_, JobNumber(id) + 1);
    const bool legacy_record = s.events.empty();
    entry->events->Restore(std::move(s.events), IsTerminal(entry->job.state()));
    if (cut || legacy_record) PersistLocked(entry->job);
    if (legacy_record) {
      // Records from before the store have no history: start it with the state.
      v1::JobEvent event;
      event.mutable_state_change()->set_state(entry->job.state());
      event.mutable_state_change()->set_reason(entry->job.reason());
      AppendEventLocked(*entry, event, IsTerminal(entry->job.state()), /*with_record=*/false);
    }
    JobEntry& e = *entry;
    jobs_[id] = std::move(entry);
    if (!IsTerminal(e.job.state())) RecoverLocked(e);
  }
  store_->SetCounter(kNextJobNumberCounter, next_job_number_).IgnoreError();
  // Moved into the store: the legacy files go.
  for (const std::string& file : legacy.files) std::remove(file.c_str());
  return absl::OkStatus();
}

void Coordinator::RecoverLocked(JobEntry& entry) {
  v1::Job& job = entry.job;
  const v1::JobState was = job.state();
  const int64_t now_ms = absl::ToUnixMillis(options_.now());
  job.clear_worker_ids();
  job.clear_slow_ranks();  // named in an attempt that ended with the old coordinator
  if (was == v1::PENDING) {
    // Queued again after a suspend or a preemption: it resumes from the step
    // it committed, not from checkpoint.resume_from (which would start a
    // job without one over from step 0).
    if (job.committed_step() > 0) {
      entry.resume_step = job.committed_step();
      entry.resume_known = true;
    }
    scheduler_.Enqueue(job.id(), job.spec(), options_.now());
    return;
  }
  // It holds nothing and waits for ResumeJob, which reads its committed step.
  if (was == v1::SUSPENDED) return;
  const int resume = job.committed_step();
  if (was == v1::RESTARTING || resume > 0) {
    // Resumed through the restart path, without spending the budget: the
    // coordinator's restart is not the job's failure.
    entry.resume_step = resume;
    entry.resume_known = true;
    entry.first_step = resume;
    entry.restart_note = absl::StrCat(
        "the coordinator restarted while the job was ", v1::JobState_Name(was), "; ",
        resume > 0 ? absl::StrCat("will resume from checkpoint step ", resume)
                   : std::string("no checkpoint committed, will start again from step 0"),
        " (not counted as a restart)");
    job.set_state(v1::RESTARTING);
    job.set_reason(entry.restart_note);
    v1::JobEvent event;
    event.mutable_state_change()->set_state(v1::RESTARTING);
    event.mutable_state_change()->set_reason(entry.restart_note);
    AppendEventLocked(entry, event, false, /*with_record=*/true);
    scheduler_.EnqueueRestart(job.id(), job.spec(), options_.now());
    return;
  }
  const std::string reason =
      absl::StrCat("coordinator restarted while the job was ", v1::JobState_Name(was),
                   ", and the job had committed no checkpoint to resume from");
  job.set_state(v1::FAILED);
  job.set_reason(reason);
  job.set_end_time_unix_ms(now_ms);
  job.set_queue_position(0);
  v1::JobEvent event;
  event.mutable_state_change()->set_state(v1::FAILED);
  event.mutable_state_change()->set_reason(reason);
  AppendEventLocked(entry, event, /*closes=*/true, /*with_record=*/true);
}

void Coordinator::PersistLocked(const v1::Job& job) {
  if (store_ != nullptr) store_->PutJob(job).IgnoreError();
}

void Coordinator::AppendEventLocked(JobEntry& entry, v1::JobEvent event, bool closes,
                                    bool with_record) {
  const bool step = IsStepRecord(event);
  const v1::JobEvent stamped = entry.events->Append(std::move(event), closes);
  if (store_ == nullptr || stamped.sequence() == 0) return;
  if (with_record) {
    store_->PutJobWithEvent(entry.job, stamped).IgnoreError();
  } else {
    store_->AppendEvent(entry.job.id(), stamped).IgnoreError();
  }
  // The store keeps what the event log keeps: the newest step records.
  if (step && ++entry.stored_step_events >= 1000) {
    entry.stored_step_events = 0;
    store_->TrimStepEvents(entry.job.id(), kDefaultMaxStepEvents).IgnoreError();
  }
}

}  // namespace tessera
