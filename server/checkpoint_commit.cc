// Commit, discard, prune and resume resolution of checkpoint steps (see
// checkpoint_commit.h).
#include "server/checkpoint_commit.h"

#include <unistd.h>

#include <algorithm>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint_layout.h"
#include "common/status_macros.h"
#include "formats/checkpoint_compatibility.h"
#include "formats/checkpoint_io.h"

namespace tessera {

absl::StatusOr<int> ResolveResumeStep(const v1::CheckpointConfig& config, int steps) {
  const std::string& from = config.resume_from();
  if (from.empty()) return 0;
  RETURN_IF_ERROR(ValidateCheckpointRoot(config.dir()));
  if (from == "latest") {
    ASSIGN_OR_RETURN(const std::vector<int64_t> committed, ListCommittedSteps(config.dir()));
    if (committed.empty()) {
      return absl::NotFoundError(
          absl::StrCat("\"latest\": no committed checkpoint under ", config.dir()));
    }
    const int64_t latest = committed.back();
    if (latest >= steps) {
      return absl::FailedPreconditionError(absl::StrCat(
          "\"latest\" is step ", latest, ", which is not before steps (", steps,
          "): nothing is left to run; raise steps to train further"));
    }
    return static_cast<int>(latest);
  }
  int step = 0;
  if (!absl::SimpleAtoi(from, &step) || step < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("must be \"latest\" or a step number >= 1 (got \"", from, "\")"));
  }
  RETURN_IF_ERROR(ReadCommitMarker(config.dir(), step).status());
  return step;
}

std::string DescribeResumeChange(const v1::JobSpec& spec, int step) {
  const std::string& dir = spec.checkpoint().dir();
  if (dir.empty() || step < 1) return std::string();
  absl::StatusOr<RankManifest> manifest = ReadRankManifest(dir, step, 0);
  if (!manifest.ok() || !CheckCheckpointFitsJob(*manifest, spec, "").ok()) return std::string();
  absl::StatusOr<v1::Fp8Recipe> saved = SavedFp8Recipe(*manifest, spec, "");
  if (!saved.ok()) return std::string();
  return DescribeFp8RecipeChange(*saved, spec.fp8());
}

absl::Status PrepareStep(const std::string& root, int step) { return RemoveStepDir(root, step); }

absl::Status CommitStep(const std::string& root, int step, int world_size) {
  for (int rank = 0; rank < world_size; ++rank) {
    const std::string manifest = absl::StrCat(StepDir(root, step), "/", RankManifestName(rank));
    if (::access(manifest.c_str(), F_OK) != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", rank, " reported its checkpoint of step ", step, ", but ", manifest,
          " is not visible to the coordinator: checkpoint.dir must be a directory shared by the "
          "coordinator and every worker"));
    }
  }
  return WriteCommitMarker(root, {step, world_size});
}

absl::Status DiscardStep(const std::string& root, int step) { return RemoveStepDir(root, step); }

absl::Status PruneSteps(const std::string& root, int newest, int keep_last) {
  ASSIGN_OR_RETURN(const std::vector<int64_t> all, ListStepDirs(root));
  ASSIGN_OR_RETURN(const std::vector<int64_t> committed, ListCommittedSteps(root));
  // Committed steps at or below `newest`, newest first: the first keep_last stay.
  std::vector<int64_t> kept;
  for (auto it = committed.rbegin(); it != committed.rend(); ++it) {
    if (*it <= newest && (keep_last == 0 || static_cast<int>(kept.size()) < keep_last)) {
      kept.push_back(*it);
    }
  }
  for (int64_t step : all) {
    if (step >= newest) continue;
    if (std::find(kept.begin(), kept.end(), step) != kept.end()) continue;
    RETURN_IF_ERROR(RemoveStepDir(root, step));
  }
  return absl::OkStatus();
}

}  // namespace tessera
