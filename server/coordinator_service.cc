// Thin gRPC services over the coordinator core (see coordinator_service.h).
#include "server/coordinator_service.h"

#include "absl/time/time.h"
#include "common/grpc_status.h"

namespace tessera {

grpc::Status CoordinatorService::SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest* req,
                                           v1::SubmitJobResponse* resp) {
  absl::StatusOr<v1::Job> job = core_->SubmitJob(req->spec());
  if (!job.ok()) return ToGrpcStatus(job.status());
  *resp->mutable_job() = *job;
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::GetJob(grpc::ServerContext*, const v1::GetJobRequest* req,
                                        v1::Job* resp) {
  absl::StatusOr<v1::Job> job = core_->GetJob(req->job_id());
  if (!job.ok()) return ToGrpcStatus(job.status());
  *resp = *job;
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* req,
                                          v1::ListJobsResponse* resp) {
  std::vector<v1::JobState> states;
  for (int s : req->states()) states.push_back(static_cast<v1::JobState>(s));
  absl::StatusOr<Coordinator::JobPage> page =
      core_->ListJobs(states, req->page_size(), req->page_token());
  if (!page.ok()) return ToGrpcStatus(page.status());
  for (v1::Job& job : page->jobs) *resp->add_jobs() = std::move(job);
  resp->set_next_page_token(page->next_page_token);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::DeleteJob(grpc::ServerContext*, const v1::DeleteJobRequest* req,
                                           v1::DeleteJobResponse*) {
  return ToGrpcStatus(core_->DeleteJob(req->job_id()));
}

grpc::Status CoordinatorService::CancelJob(grpc::ServerContext*, const v1::CancelJobRequest* req,
                                           v1::Job* resp) {
  absl::StatusOr<v1::Job> job = core_->CancelJob(req->job_id(), req->reason());
  if (!job.ok()) return ToGrpcStatus(job.status());
  *resp = *job;
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::WatchJob(grpc::ServerContext* context,
                                          const v1::WatchJobRequest* req,
                                          grpc::ServerWriter<v1::JobEvent>* writer) {
  absl::StatusOr<std::shared_ptr<EventLog>> log = core_->JobEvents(req->job_id());
  if (!log.ok()) return ToGrpcStatus(log.status());
  int64_t cursor = 0;
  while (!context->IsCancelled()) {
    EventLog::Batch batch = (*log)->Read(cursor, req->from_step(), absl::Milliseconds(500));
    for (const v1::JobEvent& event : batch.events) {
      if (!writer->Write(event)) return grpc::Status(grpc::StatusCode::CANCELLED, "client gone");
    }
    cursor = batch.next_cursor;
    if (batch.closed) return grpc::Status::OK;
  }
  return grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled by the client");
}

grpc::Status CoordinatorService::ListWorkers(grpc::ServerContext*, const v1::ListWorkersRequest*,
                                             v1::ListWorkersResponse* resp) {
  for (v1::WorkerRecord& w : core_->ListWorkers()) *resp->add_workers() = std::move(w);
  return grpc::Status::OK;
}

grpc::Status WorkerRegistryService::RegisterWorker(grpc::ServerContext*,
                                                   const v1::RegisterWorkerRequest* req,
                                                   v1::RegisterWorkerResponse* resp) {
  absl::StatusOr<v1::RegisterWorkerResponse> r = core_->RegisterWorker(*req);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = *r;
  return grpc::Status::OK;
}

grpc::Status WorkerRegistryService::Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* req,
                                              v1::HeartbeatResponse*) {
  return ToGrpcStatus(core_->Heartbeat(*req));
}

grpc::Status RendezvousService::RendezvousSet(grpc::ServerContext*,
                                              const v1::RendezvousSetRequest* req,
                                              v1::RendezvousSetResponse*) {
  return ToGrpcStatus(core_->rendezvous().Set(req->job_id(), req->key(), req->value()));
}

grpc::Status RendezvousService::RendezvousGet(grpc::ServerContext*,
                                              const v1::RendezvousGetRequest* req,
                                              v1::RendezvousGetResponse* resp) {
  std::vector<std::string> keys(req->keys().begin(), req->keys().end());
  absl::StatusOr<std::vector<std::string>> values =
      core_->rendezvous().Get(req->job_id(), keys, absl::Milliseconds(req->timeout_ms()));
  if (!values.ok()) return ToGrpcStatus(values.status());
  for (std::string& v : *values) resp->add_values(std::move(v));
  return grpc::Status::OK;
}

grpc::Status RendezvousService::RendezvousAdd(grpc::ServerContext*,
                                              const v1::RendezvousAddRequest* req,
                                              v1::RendezvousAddResponse* resp) {
  absl::StatusOr<int64_t> value = core_->rendezvous().Add(req->job_id(), req->key(), req->increment());
  if (!value.ok()) return ToGrpcStatus(value.status());
  resp->set_value(*value);
  return grpc::Status::OK;
}

}  // namespace tessera
