// The daemons' usage configuration (see daemon_usage.h).
#include "common/daemon_usage.h"

#include <memory>
#include <utility>

#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/build_info.h"

namespace tessera {

bool IsOwnFlagFile(absl::string_view file, const std::vector<std::string>& flag_files) {
  for (const std::string& own : flag_files) {
    if (file == own || absl::EndsWith(file, absl::StrCat("/", own))) return true;
  }
  return false;
}

void ConfigureDaemonUsage(const std::string& program, std::vector<std::string> flag_files) {
  auto files = std::make_shared<const std::vector<std::string>>(std::move(flag_files));
  auto own = [files](absl::string_view file) { return IsOwnFlagFile(file, *files); };
  absl::FlagsUsageConfig config;
  config.contains_help_flags = own;
  config.contains_helpshort_flags = own;
  config.version_string = [program] { return VersionLine(program) + "\n"; };
  absl::SetFlagsUsageConfig(config);
}

}  // namespace tessera
