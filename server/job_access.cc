// The job ownership rule (see job_access.h).
#include "server/job_access.h"

#include "absl/strings/str_cat.h"

namespace tessera {

absl::Status CheckMayChangeJob(const Principal& by, const v1::Job& job, absl::string_view action) {
  if (by.admin) return absl::OkStatus();
  if (!job.owner().empty() && by.user == job.owner()) return absl::OkStatus();
  const std::string owner =
      job.owner().empty() ? "has no owner (only an admin may change it)"
                          : absl::StrCat("belongs to ", job.owner(),
                                         " (only its owner or an admin may change it)");
  return absl::PermissionDeniedError(
      absl::StrCat("user ", by.user, " may not ", action, " job ", job.id(), ": it ", owner));
}

}  // namespace tessera
