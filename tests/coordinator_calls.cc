// See coordinator_calls.h.
#include "tests/coordinator_calls.h"

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace testing {

std::unique_ptr<grpc::ClientContext> ContextWithDeadline(absl::Duration timeout) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  return ctx;
}

v1::Job SubmitOrFail(v1::Coordinator::Stub& stub, const v1::JobSpec& spec) {
  v1::SubmitJobRequest req;
  *req.mutable_spec() = spec;
  v1::SubmitJobResponse resp;
  const grpc::Status s = stub.SubmitJob(ContextWithDeadline().get(), req, &resp);
  EXPECT_TRUE(s.ok()) << "SubmitJob: " << s.error_message();
  return resp.job();
}

}  // namespace testing
}  // namespace tessera
