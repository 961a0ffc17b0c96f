// Thin gRPC services over the coordinator core (see coordinator_service.h).
#include "server/coordinator_service.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/grpc_status.h"
#include "server/call_guard.h"
#include "server/job_logs.h"
#include "server/job_watch_reactor.h"

namespace tessera {

grpc::Status CoordinatorService::SubmitJob(grpc::ServerContext* context,
                                           const v1::SubmitJobRequest* req,
                                           v1::SubmitJobResponse* resp) {
  Principal who;
  if (grpc::Status s = CallGuard::User(guard_, context, &who); !s.ok()) return s;
  absl::StatusOr<v1::Job> job = core_->SubmitJob(req->spec(), who);
  if (!job.ok()) return ToGrpcStatus(job.status());
  *resp->mutable_job() = *job;
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::GetJob(grpc::ServerContext* context, const v1::GetJobRequest* req,
                                        v1::Job* resp) {
  if (grpc::Status s = CallGuard::User(guard_, context); !s.ok()) return s;
  absl::StatusOr<v1::Job> job = core_->GetJob(req->job_id());
  if (!job.ok()) return ToGrpcStatus(job.status());
  *resp = *job;
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::ListJobs(grpc::ServerContext* context,
                                          const v1::ListJobsRequest* req,
                                          v1::ListJobsResponse* resp) {
  Principal who;
  if (grpc::Status s = CallGuard::User(guard_, context, &who); !s.ok()) return s;
  std::vector<v1::JobState> states;
  for (int s : req->states()) states.push_back(static_cast<v1::JobState>(s));
  absl::StatusOr<Coordinator::JobPage> page =
      core_->ListJobs(states, req->page_size(), req->page_token(),
                      req->only_mine() ? who.user : req->owner());
  if (!page.ok()) return ToGrpcStatus(page.status());
  for (v1::Job& job : page->jobs) *resp->add_jobs() = std::move(job);
  resp->set_next_page_token(page->next_page_token);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::DeleteJob(grpc::ServerContext* context,
                                           const v1::DeleteJobRequest* req,
                                           v1::DeleteJobResponse*) {
  Principal who;
  if (grpc::Status s = CallGuard::User(guard_, context, &who); !s.ok()) return s;
  return ToGrpcStatus(core_->DeleteJob(req->job_id(), who));
}

grpc::Status CoordinatorService::CancelJob(grpc::ServerContext* context,
                                           const v1::CancelJobRequest* req,
                                           v1::Job* resp) {
  Principal who;
  if (grpc::Status s = CallGuard::User(guard_, context, &who); !s.ok()) return s;
  absl::StatusOr<v1::Job> job = core_->CancelJob(req->job_id(), req->reason(), who);
  if (!job.ok()) return ToGrpcStatus(job.status());
  *resp = *job;
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::CheckpointJob(grpc::ServerContext* context,
                                               const v1::CheckpointJobRequest* req,
                                               v1::Job* resp) {
  Principal who;
  if (grpc::Status s = CallGuard::User(guard_, context, &who); !s.ok()) return s;
  absl::StatusOr<v1::Job> job = core_->CheckpointJob(req->job_id(), who);
  if (!job.ok()) return ToGrpcStatus(job.status());
  *resp = *job;
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::SuspendJob(grpc::ServerContext* context,
                                            const v1::SuspendJobRequest* req, v1::Job* resp) {
  Principal who;
  if (grpc::Status s = CallGuard::User(guard_, context, &who); !s.ok()) return s;
  absl::StatusOr<v1::Job> job = core_->SuspendJob(req->job_id(), req->reason(), who);
  if (!job.ok()) return ToGrpcStatus(job.status());
  *resp = *job;
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::ResumeJob(grpc::ServerContext* context,
                                           const v1::ResumeJobRequest* req, v1::Job* resp) {
  Principal who;
  if (grpc::Status s = CallGuard::User(guard_, context, &who); !s.ok()) return s;
  absl::StatusOr<v1::Job> job = core_->ResumeJob(req->job_id(), who);
  if (!job.ok()) return ToGrpcStatus(job.status());
  *resp = *job;
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::ExplainPlacement(grpc::ServerContext* context,
                                                  const v1::ExplainPlacementRequest* req,
                                                  v1::PlacementExplanation* resp) {
  Principal who;
  if (grpc::Status s = CallGuard::User(guard_, context, &who); !s.ok()) return s;
  absl::StatusOr<v1::PlacementExplanation> explanation = core_->ExplainPlacement(req->spec(), who);
  if (!explanation.ok()) return ToGrpcStatus(explanation.status());
  *resp = *std::move(explanation);
  return grpc::Status::OK;
}

grpc::ServerWriteReactor<v1::JobEvent>* CoordinatorService::WatchJob(
    grpc::CallbackServerContext* context, const v1::WatchJobRequest* req) {
  if (grpc::Status s = CallGuard::User(guard_, context); !s.ok()) {
    return JobWatchReactor::Refuse(s);
  }
  absl::StatusOr<std::shared_ptr<EventLog>> log = core_->JobEvents(req->job_id());
  if (!log.ok()) return JobWatchReactor::Refuse(ToGrpcStatus(log.status()));
  if (req->after_sequence() < 0) {
    return JobWatchReactor::Refuse(
        ToGrpcStatus(absl::InvalidArgumentError("after_sequence: must be >= 0")));
  }
  if (open_watch_streams_.fetch_add(1) >= max_watch_streams_) {
    open_watch_streams_.fetch_sub(1);
    return JobWatchReactor::Refuse(ToGrpcStatus(absl::ResourceExhaustedError(absl::StrCat(
        "too many open watch streams (", max_watch_streams_,
        ", the coordinator's --max_watch_streams); close some or try again later"))));
  }
  return JobWatchReactor::Start(*std::move(log), req->after_sequence(), req->from_step(),
                                [this] { open_watch_streams_.fetch_sub(1); });
}

grpc::Status CoordinatorService::StreamJobLogs(grpc::ServerContext* context,
                                               const v1::StreamJobLogsRequest* req,
                                               grpc::ServerWriter<v1::LogLine>* writer) {
  if (grpc::Status s = CallGuard::User(guard_, context); !s.ok()) return s;
  if (open_log_streams_.fetch_add(1) >= kMaxLogStreams) {
    open_log_streams_.fetch_sub(1);
    return ToGrpcStatus(absl::ResourceExhaustedError(absl::StrCat(
        "too many open log streams (", kMaxLogStreams, "); try again later")));
  }
  JobLogsRequest request;
  request.job_id = req->job_id();
  request.ranks.assign(req->ranks().begin(), req->ranks().end());
  request.follow = req->follow();
  const absl::Status status = tessera::StreamJobLogs(
      *core_, request, [writer](const v1::LogLine& line) { return writer->Write(line); },
      [context] { return context->IsCancelled(); });
  open_log_streams_.fetch_sub(1);
  return ToGrpcStatus(status);
}

grpc::Status CoordinatorService::ListWorkers(grpc::ServerContext* context,
                                             const v1::ListWorkersRequest*,
                                             v1::ListWorkersResponse* resp) {
  if (grpc::Status s = CallGuard::User(guard_, context); !s.ok()) return s;
  for (v1::WorkerRecord& w : core_->ListWorkers()) *resp->add_workers() = std::move(w);
  return grpc::Status::OK;
}

grpc::Status WorkerRegistryService::RegisterWorker(grpc::ServerContext* context,
                                                   const v1::RegisterWorkerRequest* req,
                                                   v1::RegisterWorkerResponse* resp) {
  if (grpc::Status s = CallGuard::Worker(guard_, context); !s.ok()) return s;
  absl::StatusOr<v1::RegisterWorkerResponse> r = core_->RegisterWorker(*req);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = *r;
  resp->set_session_token(CallGuard::Registered(guard_, resp->worker_id()));
  return grpc::Status::OK;
}

grpc::Status WorkerRegistryService::Heartbeat(grpc::ServerContext* context,
                                              const v1::HeartbeatRequest* req,
                                              v1::HeartbeatResponse* resp) {
  if (grpc::Status s = CallGuard::Heartbeat(guard_, context, req->worker_id()); !s.ok()) return s;
  absl::StatusOr<v1::HeartbeatResponse> r = core_->Heartbeat(*req);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = *r;
  return grpc::Status::OK;
}

grpc::Status RendezvousService::RendezvousSet(grpc::ServerContext* context,
                                              const v1::RendezvousSetRequest* req,
                                              v1::RendezvousSetResponse*) {
  if (grpc::Status s = CallGuard::Rank(guard_, context, req->job_id()); !s.ok()) return s;
  return ToGrpcStatus(core_->rendezvous().Set(req->job_id(), req->key(), req->value()));
}

grpc::Status RendezvousService::RendezvousGet(grpc::ServerContext* context,
                                              const v1::RendezvousGetRequest* req,
                                              v1::RendezvousGetResponse* resp) {
  if (grpc::Status s = CallGuard::Rank(guard_, context, req->job_id()); !s.ok()) return s;
  std::vector<std::string> keys(req->keys().begin(), req->keys().end());
  absl::StatusOr<std::vector<std::string>> values =
      core_->rendezvous().Get(req->job_id(), keys, absl::Milliseconds(req->timeout_ms()));
  if (!values.ok()) return ToGrpcStatus(values.status());
  for (std::string& v : *values) resp->add_values(std::move(v));
  return grpc::Status::OK;
}

grpc::Status RendezvousService::RendezvousAdd(grpc::ServerContext* context,
                                              const v1::RendezvousAddRequest* req,
                                              v1::RendezvousAddResponse* resp) {
  if (grpc::Status s = CallGuard::Rank(guard_, context, req->job_id()); !s.ok()) return s;
  absl::StatusOr<int64_t> value = core_->rendezvous().Add(req->job_id(), req->key(), req->increment());
  if (!value.ok()) return ToGrpcStatus(value.status());
  resp->set_value(*value);
  return grpc::Status::OK;
}

}  // namespace tessera
