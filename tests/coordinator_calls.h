// Test-only shorthands for calling the coordinator's v1 API from the
// multi-process tests: a client context with a deadline, SubmitJob that
// records a gtest failure (with gRPC's message) instead of returning a
// status, polling a job until a condition holds, each step's loss from its
// events, and the small two-rank CPU job the recovery tests train.
#ifndef TESSERA_TESTS_COORDINATOR_CALLS_H_
#define TESSERA_TESTS_COORDINATOR_CALLS_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/tessera/v1/coordinator.grpc.pb.h"

namespace tessera {
namespace testing {

// A context whose deadline is `timeout` from now.
std::unique_ptr<grpc::ClientContext> ContextWithDeadline(absl::Duration timeout = absl::Seconds(10));

// Submits `spec`; on an error status adds a test failure and returns an
// empty Job.
v1::Job SubmitOrFail(v1::Coordinator::Stub& stub, const v1::JobSpec& spec);

// Whether a job in `state` has ended: SUCCEEDED, FAILED or CANCELLED.
bool IsTerminal(v1::JobState state);

// GetJob; on an error status adds a test failure and returns an empty Job.
v1::Job GetJobOrFail(v1::Coordinator::Stub& stub, const std::string& job_id);

// Polls GetJob every 10 ms until `done(job)` holds, and returns that job;
// after `timeout`, adds a test failure naming the job's state and reason,
// then `context()` (e.g. the processes' logs), and returns the last job.
v1::Job WaitForJobOrFail(v1::Coordinator::Stub& stub, const std::string& job_id,
                         const std::function<bool(const v1::Job&)>& done, absl::Duration timeout,
                         const std::function<std::string()>& context);

// Each step's loss (the last record of the step) from the events of a job
// that has ended, and in `records` how many records each step has.
std::map<int, float> StepLossesOrFail(v1::Coordinator::Stub& stub, const std::string& job_id,
                                      std::map<int, int>* records);

// Every event of a job that has ended (WatchJob from the start, to its
// terminal event); a stream error adds a test failure.
std::vector<v1::JobEvent> JobEventsOrFail(v1::Coordinator::Stub& stub, const std::string& job_id);

// A two-rank CPU job small enough to run tens of steps a second on two
// cores (d_model 64, 2 layers, the synthetic ADDITION task), named `name`,
// seeded with `seed`. With a non-empty `checkpoint_dir` it checkpoints
// every `checkpoint_interval` steps and keeps the newest 2.
v1::JobSpec SmallCpuJob(const std::string& name, int steps, int seed,
                        const std::string& checkpoint_dir = "", int checkpoint_interval = 5);

}  // namespace testing
}  // namespace tessera

#endif  // TESSERA_TESTS_COORDINATOR_CALLS_H_
