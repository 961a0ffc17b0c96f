// Who may change which job: a job's owner (the user who submitted it) and
// admins may cancel, delete, checkpoint, suspend and resume it; other users
// may only read it. On a coordinator that checks no tokens every caller is
// Principal::Unchecked(), an admin, so everything is allowed as before
// users existed. Kept apart from the coordinator so the rule is stated and
// tested once.
#ifndef TESSERA_SERVER_JOB_ACCESS_H_
#define TESSERA_SERVER_JOB_ACCESS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/access_policy.h"
#include "proto/tessera/v1/job.pb.h"

namespace tessera {

// OK if `by` may `action` ("cancel", "suspend", ...) `job`; otherwise
// PERMISSION_DENIED naming the user, the action, the job and its owner.
absl::Status CheckMayChangeJob(const Principal& by, const v1::Job& job, absl::string_view action);

// How an event or reason names the user: their name, or "" when calls are
// not checked.
inline const std::string& ActorOf(const Principal& by) { return by.user; }

}  // namespace tessera

#endif  // TESSERA_SERVER_JOB_ACCESS_H_
