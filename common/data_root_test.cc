#include "common/data_root.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "gtest/gtest.h"

namespace tessera {
namespace {

class DataRootTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = std::string(std::getenv("TEST_TMPDIR")) + "/" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    mkdir(base_.c_str(), 0755);
    mkdir((base_ + "/root").c_str(), 0755);
    mkdir((base_ + "/outside").c_str(), 0755);
    ASSERT_EQ(symlink((base_ + "/outside").c_str(), (base_ + "/root/escape").c_str()), 0);
    absl::StatusOr<std::string> root = CanonicalDataRoot("--data_root", base_ + "/root");
    ASSERT_TRUE(root.ok()) << root.status();
    root_ = *root;
  }
  std::string base_, root_;
};

TEST_F(DataRootTest, PathsInsideTheRootPass) {
  EXPECT_TRUE(CheckUnderDataRoot(root_, "checkpoint.dir", base_ + "/root").ok());
  EXPECT_TRUE(CheckUnderDataRoot(root_, "checkpoint.dir", base_ + "/root/a/b/c").ok());
  EXPECT_TRUE(CheckUnderDataRoot(root_, "checkpoint.dir", base_ + "/root/./x//y").ok());
  EXPECT_TRUE(CheckUnderDataRoot("", "checkpoint.dir", "/anywhere").ok());
}

TEST_F(DataRootTest, PathsOutsideAreInvalidArgumentNamingTheField) {
  for (const std::string& p :
       {base_ + "/outside/ckpt", base_ + "/root/escape/ckpt", base_ + "/root/../outside",
        base_ + "/rootsibling", base_ + "/root/new/../../outside", std::string("/tmp")}) {
    absl::Status s = CheckUnderDataRoot(root_, "checkpoint.dir", p);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << p;
    EXPECT_NE(s.message().find("checkpoint.dir"), std::string::npos) << s;
  }
}

TEST_F(DataRootTest, RootMustBeAnExistingDirectory) {
  EXPECT_EQ(CanonicalDataRoot("--data_root", base_ + "/missing").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera
