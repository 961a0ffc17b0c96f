// See coordinator_calls.h.
#include "tests/coordinator_calls.h"

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace testing {

bool IsTerminal(v1::JobState state) {
  return state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED;
}

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

v1::Job GetJobOrFail(v1::Coordinator::Stub& stub, const std::string& job_id) {
  v1::GetJobRequest req;
  req.set_job_id(job_id);
  v1::Job job;
  const grpc::Status s = stub.GetJob(ContextWithDeadline().get(), req, &job);
  EXPECT_TRUE(s.ok()) << "GetJob " << job_id << ": " << s.error_message();
  return job;
}

v1::Job WaitForJobOrFail(v1::Coordinator::Stub& stub, const std::string& job_id,
                         const std::function<bool(const v1::Job&)>& done, absl::Duration timeout,
                         const std::function<std::string()>& context) {
  const absl::Time deadline = absl::Now() + timeout;
  v1::Job job;
  while (absl::Now() < deadline) {
    job = GetJobOrFail(stub, job_id);
    if (done(job)) return job;
    absl::SleepFor(absl::Milliseconds(10));
  }
  ADD_FAILURE() << "timed out; job " << job_id << " is " << v1::JobState_Name(job.state())
                << ": " << job.reason() << "\n"
                << context();
  return job;
}

std::map<int, float> StepLossesOrFail(v1::Coordinator::Stub& stub, const std::string& job_id,
                                      std::map<int, int>* records) {
  std::map<int, float> losses;
  for (const v1::JobEvent& e : JobEventsOrFail(stub, job_id)) {
    if (!e.has_step()) continue;
    ++(*records)[e.step().step()];
    losses[e.step().step()] = e.step().loss();
  }
  return losses;
}

std::vector<v1::JobEvent> JobEventsOrFail(v1::Coordinator::Stub& stub, const std::string& job_id) {
  v1::WatchJobRequest req;
  req.set_job_id(job_id);
  auto ctx = ContextWithDeadline(absl::Seconds(60));
  auto reader = stub.WatchJob(ctx.get(), req);
  std::vector<v1::JobEvent> events;
  v1::JobEvent event;
  while (reader->Read(&event)) events.push_back(event);
  const grpc::Status s = reader->Finish();
  EXPECT_TRUE(s.ok()) << "WatchJob " << job_id << ": " << s.error_message();
  return events;
}

v1::JobSpec SmallCpuJob(const std::string& name, int steps, int seed,
                        const std::string& checkpoint_dir, int checkpoint_interval) {
  v1::JobSpec spec;
  spec.set_name(name);
  v1::ModelConfig* model = spec.mutable_model();
  model->set_vocab_size(256);
  model->set_d_model(64);
  model->set_n_layers(2);
  model->set_n_heads(2);
  model->set_ffn_dim(128);
  model->set_seq_len(32);
  spec.mutable_data()->mutable_synthetic()->set_task(v1::SyntheticData::ADDITION);
  spec.mutable_data()->set_micro_batch_size(4);
  spec.mutable_optimizer()->set_lr(3e-3f);
  spec.mutable_optimizer()->set_warmup_steps(2);
  spec.set_world_size(2);
  spec.set_device_kind(v1::CPU);
  spec.set_steps(steps);
  spec.set_seed(seed);
  if (!checkpoint_dir.empty()) {
    spec.mutable_checkpoint()->set_dir(checkpoint_dir);
    spec.mutable_checkpoint()->set_interval_steps(checkpoint_interval);
    spec.mutable_checkpoint()->set_keep_last(2);
  }
  return spec;
}

}  // namespace testing
}  // namespace tessera
