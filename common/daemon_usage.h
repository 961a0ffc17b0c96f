// --help and --version for the daemons (tessera-coordinator, tessera-worker).
// Abseil's --help lists the flags defined in a file named after the program
// (tessera-coordinator.cc and the like); ours live in *_main.cc and a few
// common/ files, so it printed "No flags matched". This points --help (and
// --helpshort) at the files that define the daemon's own flags, so it lists
// each with its default and description, without the flags of Abseil and
// gRPC themselves (--helpfull still lists everything), and makes --version
// print the build's version and commit (build_info.h). Call before
// absl::ParseCommandLine.
#ifndef TESSERA_COMMON_DAEMON_USAGE_H_
#define TESSERA_COMMON_DAEMON_USAGE_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace tessera {

// `flag_files`: the source files, workspace-relative as Bazel compiles them
// (e.g. "server/coordinator_main.cc"), whose flags are the daemon's own.
void ConfigureDaemonUsage(const std::string& program, std::vector<std::string> flag_files);

// Whether `file` (a flag's source file as Abseil records it) is one of
// `flag_files`. Paths may carry a prefix (an execroot or "./").
bool IsOwnFlagFile(absl::string_view file, const std::vector<std::string>& flag_files);

}  // namespace tessera

#endif  // TESSERA_COMMON_DAEMON_USAGE_H_
