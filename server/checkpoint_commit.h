// The coordinator's part of checkpointing (layout in
// common/checkpoint_layout.h): it clears a step directory before the ranks
// write it, commits the step (COMMITTED, fsynced) only after every rank's
// Checkpoint succeeded, removes a step whose write failed, prunes old steps
// to checkpoint.keep_last, and resolves checkpoint.resume_from to the step
// the workers load. Nothing here speaks gRPC: the job runner calls it
// between its fan-outs.
//
// The coordinator touches checkpoint.dir itself, so the directory must be
// the same one on the coordinator and on every worker (a shared filesystem
// across machines). CommitStep checks that every rank's manifest is visible
// before writing the marker, so an unshared directory fails the first
// checkpoint with FAILED_PRECONDITION instead of committing nothing.
//
// One job at a time may use a checkpoint directory. "latest" is the newest
// committed step by number: a job resumed from an older step leaves newer
// steps of the earlier run in place, and pruning never touches steps newer
// than the one just committed.
#ifndef TESSERA_SERVER_CHECKPOINT_COMMIT_H_
#define TESSERA_SERVER_CHECKPOINT_COMMIT_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/tessera/v1/job.pb.h"

namespace tessera {

// 0 when resume_from is empty; otherwise the committed step to load: the
// newest committed step for "latest", else the number given. NOT_FOUND when
// that step (or, for "latest", any step) is not committed; FAILED_PRECONDITION
// when the newest committed step is not before `steps` (nothing left to run);
// INVALID_ARGUMENT for a resume_from that is neither.
absl::StatusOr<int> ResolveResumeStep(const v1::CheckpointConfig& config, int steps);

// What a job resuming from committed step `step` changes of the state it
// was saved with, for the job's events: "FP8 recipe changed from delayed
// scaling (amax history 16) to disabled (bf16)"
// (formats/checkpoint_compatibility.h). Empty when nothing changes, and when
// rank 0's manifest cannot be read here or the job may not load it: the
// workers then fail the job saying why.
std::string DescribeResumeChange(const v1::JobSpec& spec, int step);

// Removes a leftover step-<step> (an earlier failed or overwritten attempt)
// before the ranks write it.
absl::Status PrepareStep(const std::string& root, int step);

// Once every rank's Checkpoint succeeded: checks that each rank's manifest is
// visible here and writes COMMITTED. From then on the step is the one a
// restart resumes from; pruning older steps (PruneSteps) is the caller's
// next, separate act, so a prune that fails or takes long (removing a 100 GB
// step can take half a minute) never undoes or delays the commit.
absl::Status CommitStep(const std::string& root, int step, int world_size);

// After a failed Checkpoint: removes the step's partial directory.
absl::Status DiscardStep(const std::string& root, int step);

// Keeps the newest `keep_last` committed steps at or below `newest` (0 keeps
// all) and removes the older ones, and every uncommitted step below `newest`.
absl::Status PruneSteps(const std::string& root, int newest, int keep_last);

}  // namespace tessera

#endif  // TESSERA_SERVER_CHECKPOINT_COMMIT_H_
