// Quotas end to end: a coordinator with TLS, user tokens for alice and bob
// and a quota file (alice 1 worker, everyone else 2), strict FIFO
// (--starvation_timeout_s=0), three CPU workers, and the CLI run as each
// user.
//
// - alice's second job waits, `tessera status` naming her quota, while a
//   worker is free;
// - bob's job, queued behind it, starts at once: the waiting job holds
//   nothing back;
// - alice's waiting job starts when her other job ends;
// - a quota file made bad and sent SIGHUP keeps the quotas in force and the
//   coordinator says which line is wrong; a good one with alice raised to
//   2 lets her next waiting job start.
// A coordinator started with a bad quota file stops with exit code 2,
// naming the file and the line.
#include <signal.h>

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

class QuotasTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("quotas");
    absl::StatusOr<TestClusterCredentials> credentials =
        TestClusterCredentials::Make(dir_ + "/certs");
    ASSERT_TRUE(credentials.ok()) << credentials.status();
    credentials_ = std::make_unique<TestClusterCredentials>(*std::move(credentials));
    std::ofstream(credentials_->Path("user.token")) << "alice user " << kAliceToken << "\n"
                                                    << "bob user " << kBobToken << "\n";
    std::ofstream(TokenFile("alice")) << kAliceToken << "\n";
    std::ofstream(TokenFile("bob")) << kBobToken << "\n";
    std::ofstream(QuotaFile()) << "# USER MAX_WORKERS\nalice 1\n* 2\n";
    address_ = absl::StrCat("127.0.0.1:", PickFreePort());
    auto coordinator = ChildProcess::Start(
        BinaryPath("server/tessera-coordinator"),
        credentials_->CoordinatorFlags({"--listen=" + address_, "--state_dir=" + dir_ + "/state",
                                        "--heartbeat_interval_ms=200", "--starvation_timeout_s=0",
                                        "--quota_file=" + QuotaFile()}),
        dir_ + "/coordinator.log");
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = *std::move(coordinator);
    ASSERT_TRUE(coordinator_->WaitForLine("listening on", absl::Seconds(30)).ok())
        << coordinator_->Log();
    EXPECT_TRUE(absl::StrContains(coordinator_->Log(),
                                  "quotas from " + QuotaFile() + ": alice 1; others 2"))
        << coordinator_->Log();
    for (int i = 0; i < 3; ++i) {
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
  std::string QuotaFile() { return dir_ + "/quotas"; }

  // The CLI run as `user`.
  CommandResult As(const std::string& user, std::vector<std::string> args) {
    args.push_back("--coordinator=" + address_);
    args.push_back("--tls_ca=" + credentials_->Path("ca.pem"));
    args.push_back("--token_file=" + TokenFile(user));
    return RunCommand(BinaryPath("client/tessera"), args, absl::Seconds(60));
  }

  // Submits a one-rank CPU job as `user` that runs until cancelled; its id.
  std::string Submit(const std::string& user) {
    const std::string path = dir_ + "/one-rank.yaml";
    std::ofstream(path) << "name: one-rank\n"
                        << "model: {vocab_size: 256, d_model: 32, n_layers: 1, n_heads: 2, "
                           "ffn_dim: 64, seq_len: 16}\n"
                        << "data: {synthetic: {task: COPY}, micro_batch_size: 2}\n"
                        << "optimizer: {lr: 0.003, warmup_steps: 1}\n"
                        << "world_size: 1\ndevice_kind: CPU\nsteps: 1000000\nseed: 3\n";
    CommandResult submitted = As(user, {"submit", path});
    EXPECT_EQ(submitted.exit_code, 0) << submitted.output << Logs();
    EXPECT_TRUE(absl::StartsWith(submitted.output, "submitted job-")) << submitted.output;
    return submitted.output.substr(10, submitted.output.find(' ', 10) - 10);
  }

  // Polls `tessera status` as alice until the output holds every one of `needles`.
  std::string WaitForStatus(const std::string& id, const std::vector<std::string>& needles) {
    const absl::Time deadline = absl::Now() + absl::Seconds(90);
    std::string last;
    while (absl::Now() < deadline) {
      last = As("alice", {"status", id}).output;
      bool all = true;
      for (const std::string& n : needles) all = all && absl::StrContains(last, n);
      if (all) return last;
      absl::SleepFor(absl::Milliseconds(200));
    }
    ADD_FAILURE() << "status of " << id << " never showed what was waited for:\n" << last << Logs();
    return last;
  }

  // Writes the quota file, sends SIGHUP, and waits for the coordinator's
  // answer (`reply`, its `count`-th such line).
  void Reload(const std::string& text, const std::string& reply, int count) {
    std::ofstream(QuotaFile()) << text;
    ASSERT_EQ(kill(coordinator_->pid(), SIGHUP), 0);
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (absl::Now() < deadline) {
      const std::string log = coordinator_->Log();
      int seen = 0;
      for (size_t at = log.find(reply); at != std::string::npos; at = log.find(reply, at + 1)) {
        ++seen;
      }
      if (seen >= count) return;
      absl::SleepFor(absl::Milliseconds(50));
    }
    ADD_FAILURE() << "the coordinator never answered SIGHUP with \"" << reply << "\"" << Logs();
  }

  std::string Logs() {
    std::string out = "\n--- coordinator\n" + coordinator_->Log();
    for (const auto& w : workers_) out += "\n--- worker\n" + w->Log();
    return out;
  }

  std::string dir_;
  std::string address_;
  std::unique_ptr<TestClusterCredentials> credentials_;
  std::unique_ptr<ChildProcess> coordinator_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
};

TEST_F(QuotasTest, AJobOverQuotaWaitsWithoutBlockingOthersAndStartsWhenAllowed) {
  const std::string first = Submit("alice");
  WaitForStatus(first, {"owner     alice", "state     RUNNING"});

  // Two workers are free, but alice may hold one.
  const std::string quota_reason =
      "reason    waiting for quota: user alice may hold 1 worker, holds 1, this job needs 1";
  const std::string second = Submit("alice");
  WaitForStatus(second, {"state     PENDING", quota_reason});

  // bob's job, behind it in the queue, starts even under strict FIFO.
  const std::string bobs = Submit("bob");
  WaitForStatus(bobs, {"owner     bob", "state     RUNNING"});
  WaitForStatus(second, {"state     PENDING", quota_reason});

  // It starts when alice's other job ends.
  ASSERT_EQ(As("alice", {"cancel", first}).exit_code, 0);
  WaitForStatus(first, {"state     CANCELLED"});
  WaitForStatus(second, {"state     RUNNING"});

  // Her next job waits again; a bad file changes nothing, and says why.
  const std::string third = Submit("alice");
  WaitForStatus(third, {"state     PENDING", quota_reason});
  Reload("alice 2\nbob lots\n",
         "SIGHUP: keeping the quotas in force: " + QuotaFile() +
             ": line 2: MAX_WORKERS \"lots\" must be a whole number",
         1);
  absl::SleepFor(absl::Seconds(1));  // several scheduling rounds
  WaitForStatus(third, {"state     PENDING", quota_reason});

  // A raised quota lets it start.
  Reload("alice 2\n* 2\n", "SIGHUP: quotas reloaded from " + QuotaFile() + ": alice 2; others 2",
         1);
  WaitForStatus(third, {"state     RUNNING"});
  EXPECT_TRUE(absl::StrContains(As("alice", {"status", second}).output, "state     RUNNING"));

  for (const std::string& id : {second, third}) {
    EXPECT_EQ(As("alice", {"cancel", id}).exit_code, 0);
  }
  EXPECT_EQ(As("bob", {"cancel", bobs}).exit_code, 0);
}

TEST(QuotaFileAtStartup, ABadFileStopsTheCoordinatorNamingTheLine) {
  const std::string dir = MakeTempDir("bad-quotas");
  const std::string quotas = dir + "/quotas";
  std::ofstream(quotas) << "alice 1\n# fine so far\nbob 1 2\n";
  const std::vector<std::string> flags = {absl::StrCat("--listen=127.0.0.1:", PickFreePort()),
                                          "--state_dir=" + dir + "/state"};

  std::vector<std::string> bad = flags;
  bad.push_back("--quota_file=" + quotas);
  auto coordinator =
      ChildProcess::Start(BinaryPath("server/tessera-coordinator"), bad, dir + "/bad.log");
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  EXPECT_EQ((*coordinator)->WaitExit(absl::Seconds(30)), 2) << (*coordinator)->Log();
  EXPECT_TRUE(absl::StrContains(
      (*coordinator)->Log(),
      "tessera-coordinator: --quota_file: " + quotas + ": line 3: expected `USER MAX_WORKERS`"))
      << (*coordinator)->Log();

  std::vector<std::string> missing = flags;
  missing.push_back("--quota_file=" + dir + "/no-such-file");
  coordinator =
      ChildProcess::Start(BinaryPath("server/tessera-coordinator"), missing, dir + "/missing.log");
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  EXPECT_EQ((*coordinator)->WaitExit(absl::Seconds(30)), 2) << (*coordinator)->Log();
  EXPECT_TRUE(absl::StrContains((*coordinator)->Log(), dir + "/no-such-file"))
      << (*coordinator)->Log();
}

}  // namespace
}  // namespace tessera
