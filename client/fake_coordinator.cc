// The scriptable test Coordinator (see fake_coordinator.h). Its SubmitJob
// checks one field, so tests can see a server INVALID_ARGUMENT travel to the
// CLI's output.
#include "client/fake_coordinator.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace tessera {

FakeCoordinator::FakeCoordinator() {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(this);
  server_ = builder.BuildAndStart();
  address_ = absl::StrCat("127.0.0.1:", port);
}

FakeCoordinator::~FakeCoordinator() {
  server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
}

void FakeCoordinator::FailNext(const std::string& method, std::vector<grpc::Status> statuses) {
  absl::MutexLock lock(&mu_);
  for (grpc::Status& s : statuses) failures_[method].push_back(std::move(s));
}

void FakeCoordinator::SetGetJobDelay(absl::Duration delay) {
  absl::MutexLock lock(&mu_);
  get_job_delay_ = delay;
}

void FakeCoordinator::AddJob(const v1::Job& job, const std::vector<v1::JobEvent>& events) {
  absl::MutexLock lock(&mu_);
  job_order_.push_back(job.id());
  jobs_[job.id()] = job;
  std::vector<v1::JobEvent>& stored = events_[job.id()];
  for (const v1::JobEvent& e : events) {
    stored.push_back(e);
    stored.back().set_sequence(static_cast<int64_t>(stored.size()));
  }
}

void FakeCoordinator::AddWorker(const v1::WorkerRecord& worker) {
  absl::MutexLock lock(&mu_);
  workers_.push_back(worker);
}

void FakeCoordinator::BreakFirstWatchAfter(int events) {
  absl::MutexLock lock(&mu_);
  break_first_watch_after_ = events;
}

int FakeCoordinator::calls(const std::string& method) const {
  absl::MutexLock lock(&mu_);
  auto it = calls_.find(method);
  return it == calls_.end() ? 0 : static_cast<int>(it->second.size());
}

std::vector<absl::Time> FakeCoordinator::call_times(const std::string& method) const {
  absl::MutexLock lock(&mu_);
  auto it = calls_.find(method);
  return it == calls_.end() ? std::vector<absl::Time>() : it->second;
}

std::vector<int64_t> FakeCoordinator::watch_after_sequences() const {
  absl::MutexLock lock(&mu_);
  return watch_after_sequences_;
}

std::vector<int> FakeCoordinator::watch_from_steps() const {
  absl::MutexLock lock(&mu_);
  return watch_from_steps_;
}

std::vector<v1::JobSpec> FakeCoordinator::submitted() const {
  absl::MutexLock lock(&mu_);
  return submitted_;
}

grpc::Status FakeCoordinator::Enter(const std::string& method) {
  absl::MutexLock lock(&mu_);
  calls_[method].push_back(absl::Now());
  std::deque<grpc::Status>& queue = failures_[method];
  if (queue.empty()) return grpc::Status::OK;
  grpc::Status status = queue.front();
  queue.pop_front();
  return status;
}

grpc::Status FakeCoordinator::SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest* request,
                                        v1::SubmitJobResponse* response) {
  if (grpc::Status s = Enter("SubmitJob"); !s.ok()) return s;
  if (request->spec().model().d_model() <= 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "model.d_model: must be >= 1");
  }
  absl::MutexLock lock(&mu_);
  submitted_.push_back(request->spec());
  v1::Job& job = jobs_[absl::StrCat("job-", job_order_.size() + 1)];
  job.set_id(absl::StrCat("job-", job_order_.size() + 1));
  *job.mutable_spec() = request->spec();
  job.set_state(v1::PENDING);
  job.set_reason("waiting for workers");
  job_order_.push_back(job.id());
  *response->mutable_job() = job;
  return grpc::Status::OK;
}

grpc::Status FakeCoordinator::GetJob(grpc::ServerContext* context,
                                     const v1::GetJobRequest* request, v1::Job* response) {
  if (grpc::Status s = Enter("GetJob"); !s.ok()) return s;
  absl::Duration delay;
  {
    absl::MutexLock lock(&mu_);
    delay = get_job_delay_;
  }
  const absl::Time until = absl::Now() + delay;
  while (absl::Now() < until && !context->IsCancelled()) absl::SleepFor(absl::Milliseconds(5));
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(request->job_id());
  if (it == jobs_.end()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("job_id: no job '", request->job_id(), "'"));
  }
  *response = it->second;
  return grpc::Status::OK;
}

grpc::Status FakeCoordinator::ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* request,
                                       v1::ListJobsResponse* response) {
  if (grpc::Status s = Enter("ListJobs"); !s.ok()) return s;
  const int page_size = request->page_size() > 0 ? request->page_size() : 100;
  int offset = 0;  // the token is the index of the first matching job to return
  if (!request->page_token().empty() && !absl::SimpleAtoi(request->page_token(), &offset)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "page_token: not a token");
  }
  absl::MutexLock lock(&mu_);
  int index = 0;
  for (auto it = job_order_.rbegin(); it != job_order_.rend(); ++it) {
    auto job = jobs_.find(*it);
    if (job == jobs_.end()) continue;  // deleted
    bool wanted = request->states().empty();
    for (int s : request->states()) wanted = wanted || s == job->second.state();
    if (!request->owner().empty() && job->second.owner() != request->owner()) wanted = false;
    if (!wanted || index++ < offset) continue;
    if (response->jobs_size() == page_size) {
      response->set_next_page_token(absl::StrCat(index - 1));
      break;
    }
    *response->add_jobs() = job->second;
  }
  return grpc::Status::OK;
}

grpc::Status FakeCoordinator::DeleteJob(grpc::ServerContext*, const v1::DeleteJobRequest* request,
                                        v1::DeleteJobResponse*) {
  if (grpc::Status s = Enter("DeleteJob"); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(request->job_id());
  if (it == jobs_.end()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("job_id: no job '", request->job_id(), "'"));
  }
  const v1::JobState state = it->second.state();
  if (state != v1::SUCCEEDED && state != v1::FAILED && state != v1::CANCELLED) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("job ", request->job_id(), " has not ended"));
  }
  jobs_.erase(it);
  events_.erase(request->job_id());
  return grpc::Status::OK;
}

grpc::Status FakeCoordinator::CancelJob(grpc::ServerContext*, const v1::CancelJobRequest* request,
                                        v1::Job* response) {
  if (grpc::Status s = Enter("CancelJob"); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(request->job_id());
  if (it == jobs_.end()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("job_id: no job '", request->job_id(), "'"));
  }
  it->second.set_state(v1::CANCELLED);
  it->second.set_reason(request->reason());
  *response = it->second;
  return grpc::Status::OK;
}

v1::Job* FakeCoordinator::JobIn(const std::string& job_id, v1::JobState state,
                                grpc::Status* status) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    *status = grpc::Status(grpc::StatusCode::NOT_FOUND, absl::StrCat("job ", job_id, " not found"));
    return nullptr;
  }
  if (it->second.state() != state) {
    *status = grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                           absl::StrCat("job ", job_id, " is ",
                                        v1::JobState_Name(it->second.state()), ", not ",
                                        v1::JobState_Name(state)));
    return nullptr;
  }
  return &it->second;
}

grpc::Status FakeCoordinator::CheckpointJob(grpc::ServerContext*,
                                            const v1::CheckpointJobRequest* request,
                                            v1::Job* response) {
  if (grpc::Status s = Enter("CheckpointJob"); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  grpc::Status status;
  v1::Job* job = JobIn(request->job_id(), v1::RUNNING, &status);
  if (job == nullptr) return status;
  *response = *job;  // as the coordinator answers: before the checkpoint
  job->set_committed_step(job->steps_done());
  return grpc::Status::OK;
}

grpc::Status FakeCoordinator::SuspendJob(grpc::ServerContext*,
                                         const v1::SuspendJobRequest* request,
                                         v1::Job* response) {
  if (grpc::Status s = Enter("SuspendJob"); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  grpc::Status status;
  v1::Job* job = JobIn(request->job_id(), v1::RUNNING, &status);
  if (job == nullptr) return status;
  *response = *job;
  job->set_committed_step(job->steps_done());
  job->set_state(v1::SUSPENDED);
  job->set_reason(absl::StrCat("suspended at step ", job->steps_done(),
                               " (checkpoint committed): ", request->reason()));
  return grpc::Status::OK;
}

grpc::Status FakeCoordinator::ResumeJob(grpc::ServerContext*, const v1::ResumeJobRequest* request,
                                        v1::Job* response) {
  if (grpc::Status s = Enter("ResumeJob"); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  grpc::Status status;
  v1::Job* job = JobIn(request->job_id(), v1::SUSPENDED, &status);
  if (job == nullptr) return status;
  job->set_state(v1::PENDING);
  job->set_reason("waiting for 2 free workers");
  *response = *job;
  return grpc::Status::OK;
}

void FakeCoordinator::SetPlacement(const v1::PlacementExplanation& placement) {
  absl::MutexLock lock(&mu_);
  placement_ = placement;
}

std::vector<v1::JobSpec> FakeCoordinator::explained() const {
  absl::MutexLock lock(&mu_);
  return explained_;
}

grpc::Status FakeCoordinator::ExplainPlacement(grpc::ServerContext*,
                                               const v1::ExplainPlacementRequest* request,
                                               v1::PlacementExplanation* response) {
  if (grpc::Status s = Enter("ExplainPlacement"); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  explained_.push_back(request->spec());
  *response = placement_;
  return grpc::Status::OK;
}

grpc::Status FakeCoordinator::WatchJob(grpc::ServerContext*, const v1::WatchJobRequest* request,
                                       grpc::ServerWriter<v1::JobEvent>* writer) {
  if (grpc::Status s = Enter("WatchJob"); !s.ok()) return s;
  std::vector<v1::JobEvent> events;
  int break_after = -1;
  {
    absl::MutexLock lock(&mu_);
    auto it = events_.find(request->job_id());
    if (it == events_.end()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("job_id: no job '", request->job_id(), "'"));
    }
    events = it->second;
    watch_from_steps_.push_back(request->from_step());
    watch_after_sequences_.push_back(request->after_sequence());
    if (watch_from_steps_.size() == 1) break_after = break_first_watch_after_;
  }
  int sent = 0;
  for (const v1::JobEvent& e : events) {
    if (e.has_step() && e.step().step() < request->from_step()) continue;
    if (e.sequence() <= request->after_sequence()) continue;
    if (sent == break_after) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator restarting");
    }
    writer->Write(e);
    ++sent;
  }
  return grpc::Status::OK;
}

grpc::Status FakeCoordinator::ListWorkers(grpc::ServerContext*, const v1::ListWorkersRequest*,
                                          v1::ListWorkersResponse* response) {
  if (grpc::Status s = Enter("ListWorkers"); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  for (const v1::WorkerRecord& w : workers_) *response->add_workers() = w;
  return grpc::Status::OK;
}

}  // namespace tessera
