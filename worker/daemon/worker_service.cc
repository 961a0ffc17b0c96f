// Thin gRPC layer over WorkerCore (see worker_service.h).
#include "worker/daemon/worker_service.h"

#include "absl/time/time.h"
#include "common/data_root.h"
#include "common/grpc_status.h"
#include "worker/daemon/rendezvous_client.h"
#include "worker/trainer/step_clock.h"

namespace tessera {
namespace {

// When the coordinator leaves InitCollectiveRequest.timeout_ms unset.
constexpr absl::Duration kDefaultCollectiveTimeout = absl::Seconds(60);

// A rank's part of one FP8 tensor; the fractions are the coordinator's to
// compute once it has summed the ranks.
v1::Fp8TensorStats ToFp8TensorStats(const Fp8TensorReport& tensor) {
  v1::Fp8TensorStats out;
  out.set_block(tensor.block);
  out.set_linear(tensor.linear);
  switch (tensor.role) {
    case Fp8TensorReport::Role::kWeight:
      out.set_role(v1::Fp8TensorStats::WEIGHT);
      break;
    case Fp8TensorReport::Role::kInput:
      out.set_role(v1::Fp8TensorStats::INPUT);
      break;
    case Fp8TensorReport::Role::kGradient:
      out.set_role(v1::Fp8TensorStats::GRADIENT);
      break;
  }
  out.set_format(tensor.e5m2 ? "e5m2" : "e4m3");
  out.set_amax(tensor.amax);
  out.set_scale(tensor.scale);
  out.set_saturated(tensor.saturated);
  out.set_underflowed(tensor.underflowed);
  out.set_elements(tensor.elements);
  return out;
}

}  // namespace

grpc::Status WorkerServiceImpl::SetupJob(grpc::ServerContext* context,
                                         const v1::SetupJobRequest* req,
                                         v1::SetupJobResponse* resp) {
  if (grpc::Status s = Authorize(security_.access.get(), context, Role::kWorker); !s.ok()) {
    return s;
  }
  if (!req->spec().checkpoint().dir().empty()) {
    if (absl::Status s = CheckUnderDataRoot(security_.data_root, "spec.checkpoint.dir",
                                            req->spec().checkpoint().dir());
        !s.ok()) {
      return ToGrpcStatus(s);
    }
  }
  absl::StatusOr<v1::SetupJobResponse> r = core_->SetupJob(*req);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = *r;
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::InitCollective(grpc::ServerContext* context,
                                               const v1::InitCollectiveRequest* req,
                                               v1::InitCollectiveResponse*) {
  if (grpc::Status s = Authorize(security_.access.get(), context, Role::kWorker); !s.ok()) {
    return s;
  }
  if (req->rendezvous_address().empty()) {
    return ToGrpcStatus(absl::InvalidArgumentError("rendezvous_address: must be set"));
  }
  RendezvousClient store(req->rendezvous_address(), req->job_id(),
                         security_.coordinator_credentials);
  const absl::Duration timeout =
      req->timeout_ms() > 0 ? absl::Milliseconds(req->timeout_ms()) : kDefaultCollectiveTimeout;
  const std::string& host = req->host().empty() ? host_ : req->host();
  return ToGrpcStatus(core_->InitCollective(req->job_id(), &store, host, timeout));
}

grpc::Status WorkerServiceImpl::RunSteps(grpc::ServerContext* context,
                                         const v1::RunStepsRequest* req,
                                         grpc::ServerWriter<v1::StepResult>* writer) {
  if (grpc::Status s = Authorize(security_.access.get(), context, Role::kWorker); !s.ok()) {
    return s;
  }
  const int rank = core_->rank();
  absl::Status status = core_->RunSteps(
      req->job_id(), req->first_step(), req->num_steps(), [&](const StepReport& report) {
        v1::StepResult result;
        result.set_step(report.step);
        result.set_rank(rank);
        result.set_loss(report.loss);
        result.set_grad_norm(report.grad_norm);
        result.set_lr(report.lr);
        result.set_tokens(report.tokens);
        result.set_compute_time_s(report.compute_time_s);
        result.set_peak_memory_bytes(report.peak_memory_bytes);
        v1::StepPhases* phases = result.mutable_phases();
        phases->set_forward_s(report.phases.forward_s);
        phases->set_loss_s(report.phases.loss_s);
        phases->set_backward_s(report.phases.backward_s);
        phases->set_recompute_s(report.phases.recompute_s);
        phases->set_optimizer_s(report.phases.optimizer_s);
        phases->set_collective_s(report.phases.collective_s);
        *phases->mutable_collective_waits() = CollectiveWaitsProto(report.phases);
        phases->set_host_s(report.phases.host_s);
        if (report.validation.has_value()) {
          result.mutable_validation()->set_loss(report.validation->loss);
          result.mutable_validation()->set_tokens(report.validation->tokens);
          for (const ValidationReport::Source& source : report.validation->sources) {
            v1::SourceValidationLoss* out = result.mutable_validation()->add_sources();
            out->set_path(source.path);
            out->set_loss(source.loss);
            out->set_tokens(source.tokens);
          }
        }
        for (const Fp8TensorReport& tensor : report.fp8_stats) {
          *result.add_fp8_stats() = ToFp8TensorStats(tensor);
        }
        if (report.shadow.has_value()) {
          v1::ShadowLoss* shadow = result.mutable_shadow();
          shadow->set_fp8_loss(report.shadow->fp8_loss);
          shadow->set_bf16_loss(report.shadow->bf16_loss);
          shadow->set_gap(report.shadow->fp8_loss - report.shadow->bf16_loss);
          shadow->set_tokens(report.shadow->tokens);
          shadow->set_time_s(report.shadow->time_s);
        }
        // A caller that went away stops hearing; the steps still finish so
        // the ranks stay in step until the coordinator aborts the job.
        if (!context->IsCancelled()) writer->Write(result);
      });
  return ToGrpcStatus(status);
}

grpc::Status WorkerServiceImpl::Checkpoint(grpc::ServerContext* context,
                                           const v1::CheckpointRequest* req,
                                           v1::CheckpointResponse* resp) {
  if (grpc::Status s = Authorize(security_.access.get(), context, Role::kWorker); !s.ok()) {
    return s;
  }
  if (!req->dir().empty()) {
    if (absl::Status s = CheckUnderDataRoot(security_.data_root, "dir", req->dir()); !s.ok()) {
      return ToGrpcStatus(s);
    }
  }
  absl::StatusOr<CheckpointStarted> started =
      core_->Checkpoint(req->job_id(), req->step(), req->dir());
  if (!started.ok()) return ToGrpcStatus(started.status());
  resp->set_path(started->manifest_path);
  resp->set_bytes(started->bytes);
  resp->set_wait_s(started->wait_s);
  resp->set_snapshot_s(started->snapshot_s);
  resp->set_background(started->background);
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::AwaitCheckpoint(grpc::ServerContext* context,
                                                const v1::AwaitCheckpointRequest* req,
                                                v1::AwaitCheckpointResponse* resp) {
  if (grpc::Status s = Authorize(security_.access.get(), context, Role::kWorker); !s.ok()) {
    return s;
  }
  absl::StatusOr<CheckpointWritten> written = core_->AwaitCheckpoint(req->job_id(), req->step());
  if (!written.ok()) return ToGrpcStatus(written.status());
  resp->set_path(written->manifest_path);
  resp->set_bytes(written->bytes);
  resp->set_write_s(written->write_s);
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::Abort(grpc::ServerContext* context, const v1::AbortRequest* req,
                                      v1::AbortResponse*) {
  if (grpc::Status s = Authorize(security_.access.get(), context, Role::kWorker); !s.ok()) {
    return s;
  }
  return ToGrpcStatus(core_->Abort(req->job_id(), req->reason()));
}

grpc::Status WorkerServiceImpl::HoldSteps(grpc::ServerContext* context,
                                          const v1::HoldStepsRequest* req,
                                          v1::HoldStepsResponse* resp) {
  if (grpc::Status s = Authorize(security_.access.get(), context, Role::kWorker); !s.ok()) {
    return s;
  }
  absl::StatusOr<int> next_step = core_->HoldSteps(req->job_id());
  if (!next_step.ok()) return ToGrpcStatus(next_step.status());
  resp->set_next_step(*next_step);
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::EndChunkAt(grpc::ServerContext* context,
                                           const v1::EndChunkAtRequest* req,
                                           v1::EndChunkAtResponse*) {
  if (grpc::Status s = Authorize(security_.access.get(), context, Role::kWorker); !s.ok()) {
    return s;
  }
  return ToGrpcStatus(core_->EndChunkAt(req->job_id(), req->step()));
}

grpc::Status WorkerServiceImpl::GetWorkerStatus(grpc::ServerContext* context,
                                                const v1::GetWorkerStatusRequest*,
                                                v1::WorkerStatus* resp) {
  if (grpc::Status s = Authorize(security_.access.get(), context, Role::kWorker); !s.ok()) {
    return s;
  }
  *resp = core_->Status();
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::GetJobLogs(grpc::ServerContext* context,
                                           const v1::GetJobLogsRequest* req,
                                           v1::GetJobLogsResponse* resp) {
  if (grpc::Status s = Authorize(security_.access.get(), context, Role::kWorker); !s.ok()) {
    return s;
  }
  if (req->job_id().empty()) {
    return ToGrpcStatus(absl::InvalidArgumentError("job_id: must be set"));
  }
  if (req->after_sequence() < 0) {
    return ToGrpcStatus(absl::InvalidArgumentError("after_sequence: must be >= 0"));
  }
  if (req->wait_ms() < 0 || req->wait_ms() > kMaxJobLogsWaitMs) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("wait_ms: must be in [0, ", kMaxJobLogsWaitMs, "] (got ", req->wait_ms(), ")")));
  }
  if (req->max_lines() < 0 || req->max_lines() > kMaxJobLogsLines) {
    return ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
        "max_lines: must be in [0, ", kMaxJobLogsLines, "] (got ", req->max_lines(), ")")));
  }
  resp->set_next_sequence(req->after_sequence());
  if (log_ == nullptr) return grpc::Status::OK;
  JobLog::Batch batch = log_->Read(req->job_id(), req->after_sequence(),
                                   req->max_lines() > 0 ? req->max_lines() : 1000,
                                   absl::Milliseconds(req->wait_ms()));
  for (v1::LogLine& line : batch.lines) *resp->add_lines() = std::move(line);
  resp->set_next_sequence(batch.next_sequence);
  resp->set_known(batch.known);
  return grpc::Status::OK;
}

}  // namespace tessera
