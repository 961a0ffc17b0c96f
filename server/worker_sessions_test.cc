#include "server/worker_sessions.h"

#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(WorkerSessionsTest, HeartbeatMustComeFromTheSessionsWorker) {
  WorkerSessions sessions;
  const std::string a = sessions.Issue("w-1");
  const std::string b = sessions.Issue("w-2");
  EXPECT_NE(a, b);
  EXPECT_EQ(a.size(), 64u);
  EXPECT_TRUE(sessions.CheckHeartbeat(a, "w-1").ok());
  EXPECT_EQ(sessions.CheckHeartbeat(b, "w-1").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(sessions.CheckHeartbeat("", "w-1").code(), absl::StatusCode::kNotFound);
}

TEST(WorkerSessionsTest, OnlyRanksOfTheJobPassTheRendezvousCheck) {
  WorkerSessions sessions;
  const std::string a = sessions.Issue("w-1");
  const std::string b = sessions.Issue("w-2");
  auto job_of = [](const std::string& worker) { return worker == "w-1" ? "job-1" : ""; };
  EXPECT_TRUE(sessions.CheckRank(a, "job-1", job_of).ok());
  EXPECT_EQ(sessions.CheckRank(b, "job-1", job_of).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(sessions.CheckRank(a, "job-2", job_of).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(sessions.CheckRank("nope", "job-1", job_of).code(),
            absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace tessera
