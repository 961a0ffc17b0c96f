// Users and roles end to end: a coordinator with TLS, mTLS workers and a
// user token file naming three users (alice and bob as users, ops as an
// admin), two CPU workers, and the CLI run as each user.
//
// - bob cannot cancel, suspend, checkpoint, resume or delete alice's job
//   (PERMISSION_DENIED, exit 1) and it runs on untouched;
// - ops, an admin, suspends and resumes it, and alice cancels and deletes it;
// - every one of those state changes is an event naming who made it, as
//   `tessera watch` prints it;
// - `tessera jobs` shows the owner, and `--mine` lists only the caller's.
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/process_harness.h"
#include "tests/test_cluster_credentials.h"

namespace tessera {
namespace {

using ::tessera::testing::BinaryPath;
using ::tessera::testing::ChildProcess;
using ::tessera::testing::CommandResult;
using ::tessera::testing::MakeTempDir;
using ::tessera::testing::PickFreePort;
using ::tessera::testing::RunCommand;
using ::tessera::testing::TestClusterCredentials;

constexpr char kAliceToken[] = "alice-0123456789abcdef0123456789";
constexpr char kBobToken[] = "bob-0123456789abcdef0123456789ab";
constexpr char kOpsToken[] = "ops-0123456789abcdef0123456789ab";

class UsersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("users");
    absl::StatusOr<TestClusterCredentials> credentials =
        TestClusterCredentials::Make(dir_ + "/certs");
    ASSERT_TRUE(credentials.ok()) << credentials.status();
    credentials_ = std::make_unique<TestClusterCredentials>(*std::move(credentials));
    // The coordinator reads its user tokens from the credentials' user.token.
    std::ofstream(credentials_->Path("user.token"))
        << "# name role token\n"
        << "alice user " << kAliceToken << "\n"
        << "bob user " << kBobToken << "\n"
        << "ops admin " << kOpsToken << "\n";
    for (const char* user : {"alice", "bob", "ops"}) {
      const std::string token = std::string(user) == "alice" ? kAliceToken
                                : std::string(user) == "bob" ? kBobToken
                                                             : kOpsToken;
      std::ofstream(TokenFile(user)) << token << "\n";
    }
    address_ = absl::StrCat("127.0.0.1:", PickFreePort());
    auto coordinator = ChildProcess::Start(
        BinaryPath("server/tessera-coordinator"),
        credentials_->CoordinatorFlags({"--listen=" + address_, "--state_dir=" + dir_ + "/state",
                                        "--heartbeat_interval_ms=200"}),
        dir_ + "/coordinator.log");
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = *std::move(coordinator);
    ASSERT_TRUE(coordinator_->WaitForLine("listening on", absl::Seconds(30)).ok())
        << coordinator_->Log();
    for (int i = 0; i < 2; ++i) {
      auto worker = ChildProcess::Start(
          BinaryPath("worker/tessera-worker"),
          credentials_->WorkerFlags({"--coordinator=" + address_, "--device=cpu"}),
          absl::StrCat(dir_, "/worker-", i, ".log"));
      ASSERT_TRUE(worker.ok()) << worker.status();
      workers_.push_back(*std::move(worker));
      ASSERT_TRUE(workers_.back()->WaitForLine("serving on", absl::Seconds(30)).ok())
          << workers_.back()->Log();
    }
  }

  std::string TokenFile(const std::string& user) { return dir_ + "/" + user + ".token"; }

  // The CLI run as `user`.
  CommandResult As(const std::string& user, std::vector<std::string> args) {
    args.push_back("--coordinator=" + address_);
    args.push_back("--tls_ca=" + credentials_->Path("ca.pem"));
    args.push_back("--token_file=" + TokenFile(user));
    return RunCommand(BinaryPath("client/tessera"), args, absl::Seconds(60));
  }

  // A two-rank CPU job long enough to be acted on while it runs.
  std::string JobFile() {
    const std::string path = dir_ + "/long.yaml";
    std::ofstream(path) << "name: long\n"
                        << "model: {vocab_size: 256, d_model: 32, n_layers: 1, n_heads: 2, "
                           "ffn_dim: 64, seq_len: 16}\n"
                        << "data: {synthetic: {task: COPY}, micro_batch_size: 2}\n"
                        << "optimizer: {lr: 0.003, warmup_steps: 1}\n"
                        << "world_size: 2\ndevice_kind: CPU\nsteps: 1000000\nseed: 3\n"
                        << "checkpoint: {dir: " << dir_ << "/ckpt}\n";
    return path;
  }

  // Polls `tessera status` as ops until the output holds every one of `needles`.
  std::string WaitForStatus(const std::string& id, const std::vector<std::string>& needles) {
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    std::string last;
    while (absl::Now() < deadline) {
      last = As("ops", {"status", id}).output;
      bool all = true;
      for (const std::string& n : needles) all = all && absl::StrContains(last, n);
      if (all) return last;
      absl::SleepFor(absl::Milliseconds(200));
    }
    ADD_FAILURE() << "status of " << id << " never showed what was waited for:\n" << last << Logs();
    return last;
  }

  std::string Logs() {
    std::string out = "\n--- coordinator\n" + coordinator_->Log();
    for (const auto& w : workers_) out += "\n--- worker\n" + w->Log();
    return out;
  }

  static void ExpectDenied(const CommandResult& r, const std::string& action) {
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(absl::StrContains(r.output, "PERMISSION_DENIED")) << r.output;
    EXPECT_TRUE(absl::StrContains(r.output, "user bob may not " + action)) << r.output;
    EXPECT_TRUE(absl::StrContains(r.output, "belongs to alice")) << r.output;
  }

  std::string dir_;
  std::string address_;
  std::unique_ptr<TestClusterCredentials> credentials_;
  std::unique_ptr<ChildProcess> coordinator_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
};

TEST_F(UsersTest, OnlyTheOwnerOrAnAdminChangesAJobAndEveryChangeNamesItsActor) {
  CommandResult submitted = As("alice", {"submit", JobFile()});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.output << Logs();
  ASSERT_TRUE(absl::StartsWith(submitted.output, "submitted job-")) << submitted.output;
  const std::string id = submitted.output.substr(10, submitted.output.find(' ', 10) - 10);
  WaitForStatus(id, {"owner     alice", "state     RUNNING"});

  // bob may read alice's job, but change nothing.
  EXPECT_EQ(As("bob", {"status", id}).exit_code, 0);
  ExpectDenied(As("bob", {"cancel", id}), "cancel");
  ExpectDenied(As("bob", {"suspend", id}), "suspend");
  ExpectDenied(As("bob", {"checkpoint", id}), "checkpoint");
  ExpectDenied(As("bob", {"resume", id}), "resume");
  ExpectDenied(As("bob", {"delete", id}), "delete");
  WaitForStatus(id, {"state     RUNNING"});

  // Owners in the listing; --mine is per token.
  CommandResult listed = As("bob", {"jobs"});
  EXPECT_TRUE(absl::StrContains(listed.output, "OWNER")) << listed.output;
  EXPECT_TRUE(absl::StrContains(listed.output, id + " ")) << listed.output;
  EXPECT_TRUE(absl::StrContains(listed.output, "alice")) << listed.output;
  EXPECT_FALSE(absl::StrContains(As("bob", {"jobs", "--mine"}).output, id + " "));
  EXPECT_TRUE(absl::StrContains(As("alice", {"jobs", "--mine"}).output, id + " "));

  // The admin suspends and resumes it; the owner cancels and deletes it.
  CommandResult suspended = As("ops", {"suspend", id, "--wait"});
  ASSERT_EQ(suspended.exit_code, 0) << suspended.output << Logs();
  WaitForStatus(id, {"state     SUSPENDED"});
  ExpectDenied(As("bob", {"resume", id}), "resume");
  ASSERT_EQ(As("ops", {"resume", id}).exit_code, 0);
  WaitForStatus(id, {"state     RUNNING"});
  CommandResult cancelled = As("alice", {"cancel", id, "--reason", "done with it"});
  ASSERT_EQ(cancelled.exit_code, 0) << cancelled.output;
  WaitForStatus(id, {"state     CANCELLED", "cancelled by alice: done with it"});

  CommandResult watched = As("bob", {"watch", id});
  EXPECT_TRUE(absl::StrContains(watched.output, "[PENDING]")) << watched.output;
  EXPECT_TRUE(absl::StrContains(watched.output, "(by alice)\n")) << watched.output;
  EXPECT_TRUE(absl::StrContains(watched.output, "[SUSPENDED]")) << watched.output;
  EXPECT_TRUE(absl::StrContains(watched.output, "suspended by ops")) << watched.output;
  EXPECT_TRUE(absl::StrContains(watched.output, "resumed by ops")) << watched.output;
  EXPECT_TRUE(
      absl::StrContains(watched.output, "[CANCELLED] cancelled by alice: done with it (by alice)"))
      << watched.output;
  // Exactly the changes people asked for name someone: submit, suspend,
  // resume and cancel.
  size_t named = 0;
  for (size_t at = watched.output.find("(by "); at != std::string::npos;
       at = watched.output.find("(by ", at + 1)) {
    ++named;
  }
  EXPECT_EQ(named, 4u) << watched.output;

  ExpectDenied(As("bob", {"delete", id}), "delete");
  EXPECT_EQ(As("alice", {"delete", id}).exit_code, 0);
  EXPECT_EQ(As("alice", {"status", id}).exit_code, 1);
}

TEST_F(UsersTest, TheWorkerCredentialStaysSeparateFromUserTokens) {
  // The worker credential cannot act as a user.
  std::ofstream(TokenFile("worker")) << credentials_->WorkerToken() << "\n";
  CommandResult as_worker = As("worker", {"jobs"});
  EXPECT_EQ(as_worker.exit_code, 1) << as_worker.output;
  EXPECT_TRUE(absl::StrContains(as_worker.output, "PERMISSION_DENIED")) << as_worker.output;
}

}  // namespace
}  // namespace tessera
