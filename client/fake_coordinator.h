// A scriptable in-process Coordinator gRPC server on 127.0.0.1:0 for the
// client and CLI tests: it can fail the next calls with given statuses,
// answer slowly, and end a watch stream early, and it records what it was
// asked. ListJobs pages like the real coordinator (default page size 100,
// offset tokens) and filters by state and owner; DeleteJob forgets a terminal job. CheckpointJob and
// SuspendJob act at once on a RUNNING job (committed_step becomes
// steps_done; SUSPENDED), ResumeJob queues a SUSPENDED one (PENDING), each
// FAILED_PRECONDITION otherwise. ExplainPlacement answers what the test set.
// Test-only.
#ifndef TESSERA_CLIENT_FAKE_COORDINATOR_H_
#define TESSERA_CLIENT_FAKE_COORDINATOR_H_

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/tessera/v1/coordinator.grpc.pb.h"

namespace tessera {

class FakeCoordinator final : public v1::Coordinator::Service {
 public:
  FakeCoordinator();
  ~FakeCoordinator() override;

  // "127.0.0.1:PORT" of the running server.
  const std::string& address() const { return address_; }

  // The next calls of `method` ("GetJob", "SubmitJob", ...) fail with these
  // statuses, in order, before calls succeed again.
  void FailNext(const std::string& method, std::vector<grpc::Status> statuses);
  // Every GetJob call waits this long (or until the client gives up).
  void SetGetJobDelay(absl::Duration delay);
  // The job and the events WatchJob streams for it (sequences assigned here).
  void AddJob(const v1::Job& job, const std::vector<v1::JobEvent>& events);
  void AddWorker(const v1::WorkerRecord& worker);
  // What ExplainPlacement answers (it records each spec it is asked about).
  void SetPlacement(const v1::PlacementExplanation& placement);
  std::vector<v1::JobSpec> explained() const;
  // The first subscription to WatchJob ends with UNAVAILABLE after sending
  // this many events (-1: never).
  void BreakFirstWatchAfter(int events);

  int calls(const std::string& method) const;
  std::vector<absl::Time> call_times(const std::string& method) const;
  std::vector<int> watch_from_steps() const;
  std::vector<int64_t> watch_after_sequences() const;
  std::vector<v1::JobSpec> submitted() const;

  grpc::Status SubmitJob(grpc::ServerContext* context, const v1::SubmitJobRequest* request,
                         v1::SubmitJobResponse* response) override;
  grpc::Status GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                      v1::Job* response) override;
  grpc::Status ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override;
  grpc::Status CancelJob(grpc::ServerContext* context, const v1::CancelJobRequest* request,
                         v1::Job* response) override;
  grpc::Status DeleteJob(grpc::ServerContext* context, const v1::DeleteJobRequest* request,
                         v1::DeleteJobResponse* response) override;
  grpc::Status CheckpointJob(grpc::ServerContext* context, const v1::CheckpointJobRequest* request,
                             v1::Job* response) override;
  grpc::Status SuspendJob(grpc::ServerContext* context, const v1::SuspendJobRequest* request,
                          v1::Job* response) override;
  grpc::Status ResumeJob(grpc::ServerContext* context, const v1::ResumeJobRequest* request,
                         v1::Job* response) override;
  grpc::Status ExplainPlacement(grpc::ServerContext* context,
                                const v1::ExplainPlacementRequest* request,
                                v1::PlacementExplanation* response) override;
  grpc::Status WatchJob(grpc::ServerContext* context, const v1::WatchJobRequest* request,
                        grpc::ServerWriter<v1::JobEvent>* writer) override;
  grpc::Status ListWorkers(grpc::ServerContext* context, const v1::ListWorkersRequest* request,
                           v1::ListWorkersResponse* response) override;

 private:
  // Records the call; a scripted failure if one is queued, else OK.
  grpc::Status Enter(const std::string& method);
  // The job, if it exists and is in `state`; else NOT_FOUND or
  // FAILED_PRECONDITION in `status`.
  v1::Job* JobIn(const std::string& job_id, v1::JobState state, grpc::Status* status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<std::string, std::deque<grpc::Status>> failures_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<absl::Time>> calls_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> job_order_ ABSL_GUARDED_BY(mu_);  // oldest first
  std::map<std::string, v1::Job> jobs_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<v1::JobEvent>> events_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::WorkerRecord> workers_ ABSL_GUARDED_BY(mu_);
  std::vector<int> watch_from_steps_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> watch_after_sequences_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::JobSpec> submitted_ ABSL_GUARDED_BY(mu_);
  v1::PlacementExplanation placement_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::JobSpec> explained_ ABSL_GUARDED_BY(mu_);
  absl::Duration get_job_delay_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  int break_first_watch_after_ ABSL_GUARDED_BY(mu_) = -1;

  std::string address_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace tessera

#endif  // TESSERA_CLIENT_FAKE_COORDINATOR_H_
