// Hybrid sharding through the product path: a coordinator and four CPU
// worker daemons on loopback run a job with world_size 4 and
// parallelism.shard_group_size 2 (two shard groups of two, replicated), with
// checkpoints. The job succeeds with every step reported once; a committed
// step holds the state files of one shard group only (the replicas hold the
// same shards); and a plain FSDP job on two workers resumes from it.
#include <dirent.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/tessera/v1/coordinator.grpc.pb.h"
#include "tests/coordinator_calls.h"
#include "tests/process_harness.h"

namespace tessera {
namespace {

v1::JobSpec HybridJob(const std::string& checkpoint_dir) {
  v1::JobSpec spec;
  spec.set_name("hybrid");
  v1::ModelConfig* model = spec.mutable_model();
  model->set_vocab_size(256);
  model->set_d_model(64);
  model->set_n_layers(3);
  model->set_n_heads(2);
  model->set_ffn_dim(128);
  model->set_seq_len(32);
  spec.mutable_data()->mutable_synthetic()->set_task(v1::SyntheticData::ADDITION);
  spec.mutable_data()->set_micro_batch_size(2);
  spec.mutable_optimizer()->set_lr(3e-3f);
  spec.set_world_size(4);
  spec.mutable_parallelism()->set_shard_group_size(2);
  spec.set_reshard_after_forward(true);
  spec.set_device_kind(v1::CPU);
  spec.set_steps(6);
  spec.set_seed(5);
  spec.mutable_checkpoint()->set_dir(checkpoint_dir);
  spec.mutable_checkpoint()->set_interval_steps(3);
  return spec;
}

int StateFiles(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent* e = readdir(d)) n += std::strstr(e->d_name, ".state") != nullptr ? 1 : 0;
  closedir(d);
  return n;
}

class HybridShardingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cluster = testing::LocalCluster::Start(4, {});
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    stub_ = v1::Coordinator::NewStub(
        grpc::CreateChannel(cluster_->address(), grpc::InsecureChannelCredentials()));
  }

  v1::Job WaitEnded(const std::string& id) {
    const absl::Time deadline = absl::Now() + absl::Seconds(120);
    v1::Job job;
    while (absl::Now() < deadline) {
      v1::GetJobRequest req;
      req.set_job_id(id);
      job = v1::Job();
      grpc::Status s = stub_->GetJob(testing::ContextWithDeadline(absl::Seconds(10)).get(), req, &job);
      EXPECT_TRUE(s.ok()) << s.error_message();
      if (job.state() == v1::SUCCEEDED || job.state() == v1::FAILED ||
          job.state() == v1::CANCELLED) {
        return job;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    ADD_FAILURE() << "job " << id << " did not end\n" << cluster_->Logs();
    return job;
  }

  std::unique_ptr<testing::LocalCluster> cluster_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

TEST_F(HybridShardingTest, TwoByTwoJobCheckpointsOneShardGroupAndResumesAsPlainFsdp) {
  const std::string root = cluster_->dir() + "/ckpt";
  const v1::JobSpec hybrid = HybridJob(root);
  const v1::Job done = WaitEnded(testing::SubmitOrFail(*stub_, hybrid).id());
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.reason() << "\n" << cluster_->Logs();
  EXPECT_EQ(done.steps_done(), 6);
  EXPECT_EQ(done.committed_step(), 6);
  EXPECT_EQ(StateFiles(root + "/step-6"), 2);
  EXPECT_EQ(StateFiles(root + "/step-3"), 2);

  v1::JobSpec resumed = hybrid;
  resumed.set_world_size(2);
  resumed.clear_parallelism();
  resumed.set_steps(8);
  resumed.mutable_checkpoint()->set_resume_from("latest");
  const v1::Job next = WaitEnded(testing::SubmitOrFail(*stub_, resumed).id());
  ASSERT_EQ(next.state(), v1::SUCCEEDED) << next.reason() << "\n" << cluster_->Logs();
  EXPECT_EQ(next.steps_done(), 8);
  EXPECT_TRUE(std::isfinite(next.last_metrics().loss()));
}

}  // namespace
}  // namespace tessera
