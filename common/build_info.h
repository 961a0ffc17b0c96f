// What build a binary is: Tessera's version and the git commit its sources
// were at, for `--version` on every binary, `tessera version` and the
// coordinator's tessera_build_info metric. The commit comes from Bazel's
// workspace status (tools/workspace_status.sh, run for every build by
// .bazelrc) through a stamped genrule; a build without it (sources outside
// git, or the status command left out) says "unknown commit" rather than
// guessing.
#ifndef TESSERA_COMMON_BUILD_INFO_H_
#define TESSERA_COMMON_BUILD_INFO_H_

#include <string>

namespace tessera {

// Tessera's release version; raised when a release is cut.
inline constexpr char kTesseraVersion[] = "0.1.0";

// The full commit hash, or "" when the build was not stamped.
std::string BuildCommit();
// Whether the sources had uncommitted changes to tracked files: "clean",
// "modified", or "" when unknown.
std::string BuildTree();

// "PROGRAM VERSION (commit HASH)", with ", modified" inside the parentheses
// for a tree with uncommitted changes, or "PROGRAM VERSION (unknown
// commit)" for an empty `commit`.
std::string VersionLine(const std::string& program, const std::string& version,
                        const std::string& commit, const std::string& tree);
// VersionLine of this build.
std::string VersionLine(const std::string& program);

}  // namespace tessera

#endif  // TESSERA_COMMON_BUILD_INFO_H_
