// This build's version and commit (see build_info.h).
#include "common/build_info.h"

#include "absl/strings/str_cat.h"

namespace tessera {

// Defined in the generated build_commit.cc.
extern const char kBuildCommit[];
extern const char kBuildTree[];

std::string BuildCommit() { return kBuildCommit; }
std::string BuildTree() { return kBuildTree; }

std::string VersionLine(const std::string& program, const std::string& version,
                        const std::string& commit, const std::string& tree) {
  if (commit.empty()) return absl::StrCat(program, " ", version, " (unknown commit)");
  return absl::StrCat(program, " ", version, " (commit ", commit,
                      tree == "modified" ? ", modified" : "", ")");
}

std::string VersionLine(const std::string& program) {
  return VersionLine(program, kTesseraVersion, BuildCommit(), BuildTree());
}

}  // namespace tessera
