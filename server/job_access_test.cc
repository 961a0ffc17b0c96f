#include "server/job_access.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

v1::Job JobOwnedBy(const std::string& owner) {
  v1::Job job;
  job.set_id("job-7");
  job.set_owner(owner);
  return job;
}

TEST(JobAccessTest, TheOwnerMayChangeTheirJob) {
  EXPECT_TRUE(CheckMayChangeJob(Principal{"alice", false}, JobOwnedBy("alice"), "cancel").ok());
}

TEST(JobAccessTest, AnotherUserIsDeniedNamingUserActionJobAndOwner) {
  absl::Status s = CheckMayChangeJob(Principal{"bob", false}, JobOwnedBy("alice"), "suspend");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("user bob may not suspend job job-7: it belongs to alice"));
}

TEST(JobAccessTest, AdminsMayChangeAnyJob) {
  EXPECT_TRUE(CheckMayChangeJob(Principal{"ops", true}, JobOwnedBy("alice"), "delete").ok());
  EXPECT_TRUE(CheckMayChangeJob(Principal{"ops", true}, JobOwnedBy(""), "delete").ok());
  EXPECT_TRUE(CheckMayChangeJob(Principal::Unchecked(), JobOwnedBy("alice"), "cancel").ok());
}

TEST(JobAccessTest, AJobWithoutOwnerIsForAdminsOnly) {
  // A user whose name is empty cannot occur with tokens checked, but an
  // empty owner must still not match it.
  absl::Status s = CheckMayChangeJob(Principal{"", false}, JobOwnedBy(""), "resume");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(s.message()), HasSubstr("has no owner"));
}

}  // namespace
}  // namespace tessera
