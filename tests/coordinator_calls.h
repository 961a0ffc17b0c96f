// Test-only shorthands for calling the coordinator's v1 API from the
// multi-process tests: a client context with a deadline, and SubmitJob that
// records a gtest failure (with gRPC's message) instead of returning a status.
#ifndef TESSERA_TESTS_COORDINATOR_CALLS_H_
#define TESSERA_TESTS_COORDINATOR_CALLS_H_

#include <memory>

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

}  // namespace testing
}  // namespace tessera

#endif  // TESSERA_TESTS_COORDINATOR_CALLS_H_
