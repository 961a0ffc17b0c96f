// The version line in both branches (stamped and not), and this build's
// commit in the shape stamping gives, whichever it is.
#include "common/build_info.h"

#include <regex>

#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(BuildInfo, VersionLineNamesTheCommitOrSaysItIsUnknown) {
  EXPECT_EQ(VersionLine("tessera", "1.2.3", "0123abc", "clean"), "tessera 1.2.3 (commit 0123abc)");
  EXPECT_EQ(VersionLine("tessera-worker", "1.2.3", "0123abc", "modified"),
            "tessera-worker 1.2.3 (commit 0123abc, modified)");
  EXPECT_EQ(VersionLine("tessera-coordinator", "1.2.3", "", ""),
            "tessera-coordinator 1.2.3 (unknown commit)");
}

TEST(BuildInfo, ThisBuildIsStampedWithAFullHashOrNothing) {
  const std::string commit = BuildCommit();
  EXPECT_TRUE(commit.empty() || std::regex_match(commit, std::regex("[0-9a-f]{40,64}"))) << commit;
  const std::string tree = BuildTree();
  EXPECT_TRUE(tree.empty() || tree == "clean" || tree == "modified") << tree;
  EXPECT_EQ(commit.empty(), tree.empty());
  EXPECT_EQ(VersionLine("x").rfind(std::string("x ") + kTesseraVersion + " (", 0), 0u)
      << VersionLine("x");
}

}  // namespace
}  // namespace tessera
