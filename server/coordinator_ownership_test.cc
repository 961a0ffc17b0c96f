// Job owners through the coordinator core with in-memory workers: a job
// records who submitted it; another user's cancel, delete, checkpoint,
// suspend and resume are PERMISSION_DENIED and change nothing; the owner and
// admins may do each, and every state change they ask for is an event
// naming them (a suspend and a cancel recorded later by the running attempt
// included); ListJobs filters by owner; owners survive a coordinator
// restart.
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "server/coordinator_core_test_base.h"
#include "server/fake_worker_connection.h"
#include "server/tiny_job_spec_for_test.h"

namespace tessera {
namespace {

constexpr auto kDenied = absl::StatusCode::kPermissionDenied;

const Principal kAlice{"alice", false};
const Principal kBob{"bob", false};
const Principal kOps{"ops", true};

class CoordinatorOwnershipTest : public CoordinatorCoreTest {
 protected:
  void Make(const std::string& state_dir = "") {
    CoordinatorOptions options = InMemoryOptions();
    options.state_dir = state_dir;
    StartCore(std::move(options));
  }
  // A long two-rank job of `by`, RUNNING with a few steps done.
  std::string StartRunning(const Principal& by, const std::string& checkpoint_dir) {
    v1::JobSpec spec = TinyJobSpec(2, 100000);
    spec.mutable_checkpoint()->set_dir(TestTempPath(checkpoint_dir));
    const std::string id = core_->SubmitJob(spec, by)->id();
    WaitUntilRunningSteps(id);
    return id;
  }
  // "STATE by ACTOR" for every state change ("STATE" alone without actor).
  std::vector<std::string> Changes(const std::string& id) {
    std::vector<std::string> out;
    for (const v1::JobEvent& e : Events(id)) {
      if (!e.has_state_change()) continue;
      std::string line = v1::JobState_Name(e.state_change().state());
      if (!e.state_change().actor().empty()) absl::StrAppend(&line, " by ", e.state_change().actor());
      out.push_back(line);
    }
    return out;
  }
};

TEST_F(CoordinatorOwnershipTest, AJobRecordsItsOwnerAndTheSubmitEventNamesThem) {
  Make();
  v1::Job job = *core_->SubmitJob(TinyJobSpec(2, 5), kAlice);
  EXPECT_EQ(job.owner(), "alice");
  EXPECT_EQ(core_->GetJob(job.id())->owner(), "alice");
  EXPECT_EQ(Changes(job.id()), std::vector<std::string>{"PENDING by alice"});
}

TEST_F(CoordinatorOwnershipTest, AnotherUserCanChangeNothingOfAQueuedJob) {
  Make();
  const std::string id = core_->SubmitJob(TinyJobSpec(2, 5), kAlice)->id();
  auto cancel = core_->CancelJob(id, "mine now", kBob);
  EXPECT_EQ(cancel.status().code(), kDenied);
  EXPECT_NE(cancel.status().message().find("user bob may not cancel job " + id +
                                           ": it belongs to alice"),
            std::string::npos)
      << cancel.status();
  EXPECT_EQ(core_->CheckpointJob(id, kBob).status().code(), kDenied);
  EXPECT_EQ(core_->SuspendJob(id, "", kBob).status().code(), kDenied);
  EXPECT_EQ(core_->ResumeJob(id, kBob).status().code(), kDenied);
  EXPECT_EQ(core_->DeleteJob(id, kBob).code(), kDenied);
  // The permission check comes before the state checks, and leaves no trace.
  EXPECT_EQ(core_->GetJob(id)->state(), v1::PENDING);
  EXPECT_EQ(Changes(id), std::vector<std::string>{"PENDING by alice"});
  // An unknown job is still NOT_FOUND, whoever asks.
  EXPECT_EQ(core_->CancelJob("job-99", "", kBob).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CoordinatorOwnershipTest, TheOwnerCancelsAndDeletesTheirOwnJob) {
  Make();
  const std::string id = core_->SubmitJob(TinyJobSpec(2, 5), kAlice)->id();
  v1::Job cancelled = *core_->CancelJob(id, "wrong data", kAlice);
  EXPECT_EQ(cancelled.state(), v1::CANCELLED);
  EXPECT_EQ(cancelled.reason(), "cancelled by alice: wrong data");
  EXPECT_EQ(Changes(id), (std::vector<std::string>{"PENDING by alice", "CANCELLED by alice"}));
  EXPECT_EQ(core_->DeleteJob(id, kBob).code(), kDenied);
  EXPECT_TRUE(core_->DeleteJob(id, kAlice).ok());
  EXPECT_EQ(core_->GetJob(id).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CoordinatorOwnershipTest, AnAdminCancelsAnotherUsersRunningJobAndIsNamed) {
  Make();
  AddWorkers(2);
  const std::string id = StartRunning(kAlice, "admin-cancel");
  EXPECT_EQ(core_->CancelJob(id, "", kBob).status().code(), kDenied);
  EXPECT_EQ(core_->GetJob(id)->state(), v1::RUNNING);
  ASSERT_TRUE(core_->CancelJob(id, "maintenance", kOps).ok());
  // The running attempt records the end; the event still names the admin.
  v1::Job done = WaitForState(id, v1::CANCELLED);
  EXPECT_EQ(done.reason(), "cancelled by ops: maintenance");
  const std::vector<std::string> changes = Changes(id);
  ASSERT_FALSE(changes.empty());
  EXPECT_EQ(changes.front(), "PENDING by alice");
  EXPECT_EQ(changes.back(), "CANCELLED by ops");
  // Changes the coordinator made itself carry no actor.
  for (size_t i = 1; i + 1 < changes.size(); ++i) {
    EXPECT_EQ(changes[i].find(" by "), std::string::npos) << changes[i];
  }
}

TEST_F(CoordinatorOwnershipTest, SuspendAndResumeNameWhoAskedAndOthersAreDenied) {
  Make();
  AddWorkers(2);
  const std::string id = StartRunning(kAlice, "suspend-resume");
  EXPECT_EQ(core_->SuspendJob(id, "", kBob).status().code(), kDenied);
  EXPECT_EQ(core_->CheckpointJob(id, kBob).status().code(), kDenied);
  ASSERT_TRUE(core_->SuspendJob(id, "", kAlice).ok());
  v1::Job suspended = WaitForState(id, v1::SUSPENDED);
  EXPECT_NE(suspended.reason().find("suspended by alice"), std::string::npos)
      << suspended.reason();
  EXPECT_EQ(Changes(id).back(), "SUSPENDED by alice");
  EXPECT_EQ(core_->ResumeJob(id, kBob).status().code(), kDenied);
  EXPECT_EQ(core_->GetJob(id)->state(), v1::SUSPENDED);
  v1::Job resumed = *core_->ResumeJob(id, kOps);
  EXPECT_EQ(resumed.state(), v1::PENDING);
  EXPECT_EQ(Changes(id).back(), "PENDING by ops");
  const v1::JobEvent last = (*core_->JobEvents(id))->Read(0, 0, absl::ZeroDuration()).events.back();
  EXPECT_EQ(last.state_change().reason().rfind("resumed by ops; will continue from checkpoint", 0),
            0u)
      << last.state_change().reason();
  ASSERT_TRUE(core_->CancelJob(id, "", kAlice).ok());
  WaitForState(id, v1::CANCELLED);
}

TEST_F(CoordinatorOwnershipTest, ListJobsFiltersByOwnerAcrossPages) {
  Make();
  std::vector<std::string> alices;
  for (int i = 0; i < 5; ++i) {
    alices.push_back(core_->SubmitJob(TinyJobSpec(2, 5), kAlice)->id());
    core_->SubmitJob(TinyJobSpec(2, 5), kBob).IgnoreError();
  }
  std::vector<std::string> listed;
  std::string token;
  do {
    auto page = core_->ListJobs({}, 2, token, "alice");
    ASSERT_TRUE(page.ok()) << page.status();
    for (const v1::Job& j : page->jobs) {
      EXPECT_EQ(j.owner(), "alice");
      listed.push_back(j.id());
    }
    token = page->next_page_token;
  } while (!token.empty());
  EXPECT_EQ(listed, std::vector<std::string>(alices.rbegin(), alices.rend()));
  EXPECT_EQ(core_->ListJobs({}, 0, "", "")->jobs.size(), 10u);
  EXPECT_TRUE(core_->ListJobs({}, 0, "", "carol")->jobs.empty());
  // A page token from one owner's listing is refused for another's.
  const std::string alice_token = core_->ListJobs({}, 2, "", "alice")->next_page_token;
  EXPECT_EQ(core_->ListJobs({}, 2, alice_token, "bob").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(core_->ListJobs({}, 0, "", std::string(65, 'a')).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CoordinatorOwnershipTest, OwnersAndActorsSurviveACoordinatorRestart) {
  const std::string state_dir = TestTempPath("ownership-state");
  Make(state_dir);
  const std::string id = core_->SubmitJob(TinyJobSpec(2, 5), kAlice)->id();
  core_->Shutdown();
  core_.reset();
  Make(state_dir);
  EXPECT_EQ(core_->GetJob(id)->owner(), "alice");
  EXPECT_EQ(Changes(id).front(), "PENDING by alice");
  EXPECT_EQ(core_->CancelJob(id, "", kBob).status().code(), kDenied);
}

TEST_F(CoordinatorOwnershipTest, WithoutTokensEveryCallerMayChangeEveryJob) {
  Make();
  const std::string id = core_->SubmitJob(TinyJobSpec(2, 5))->id();
  EXPECT_EQ(core_->GetJob(id)->owner(), "");
  v1::Job cancelled = *core_->CancelJob(id, "");
  EXPECT_EQ(cancelled.reason(), "cancelled by user");
  EXPECT_EQ(Changes(id), (std::vector<std::string>{"PENDING", "CANCELLED"}));
}

}  // namespace
}  // namespace tessera
