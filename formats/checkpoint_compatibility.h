// Which job may load which checkpoint, and what a resumed job changes.
//
// A checkpoint loads into a job whose model, optimizer, data and seed are
// those it was written under (the spec hash, spec_hash.h); otherwise the job
// is refused with FAILED_PRECONDITION naming each field that differs, from
// the fields the manifest records. The FP8 recipe may change: FP8 to bf16 and
// back, delayed to current scaling and back, or a delayed recipe's history
// length, margin or amax rule. The checkpoint records the recipe it was
// written under, and the trainer re-derives its compute weights from the
// fp32 masters when it differs (worker/trainer/fsdp_checkpoint.cc).
//
// A checkpoint written before recipes were recorded (a version 1 manifest,
// formats/checkpoint_io.h) has a hash that covers the recipe too: it resumes
// only under the recipe it was written with, and a job with another recipe
// is refused with FAILED_PRECONDITION saying so (its state files do not say
// which delayed-scaling parameters they were written under).
#ifndef TESSERA_FORMATS_CHECKPOINT_COMPATIBILITY_H_
#define TESSERA_FORMATS_CHECKPOINT_COMPATIBILITY_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "formats/checkpoint_io.h"
#include "proto/tessera/v1/job.pb.h"

namespace tessera {

// What a manifest written by `spec`'s job records of it.
ManifestSpec ManifestSpecOf(const v1::JobSpec& spec);

// OK when `spec`'s job may load the checkpoint `manifest` belongs to;
// FAILED_PRECONDITION otherwise, naming each differing field ("model.d_model:
// the checkpoint has 32, this job 64"). `what` names the manifest in errors.
// DATA_LOSS when a version 2 manifest's recorded fields do not parse or do
// not match its own hash.
absl::Status CheckCheckpointFitsJob(const RankManifest& manifest, const v1::JobSpec& spec,
                                    const std::string& what);

// The recipe the checkpoint was written under: the recorded one, or for a
// version 1 manifest (which CheckCheckpointFitsJob has accepted) `spec`'s.
absl::StatusOr<v1::Fp8Recipe> SavedFp8Recipe(const RankManifest& manifest,
                                             const v1::JobSpec& spec, const std::string& what);

// The recipe as it runs: a disabled recipe keeps only `disabled` (its
// scaling fields are never read), a delayed one has its defaults filled in
// (history 16, MAX), and an unset scaling is delayed scaling.
v1::Fp8Recipe EffectiveFp8Recipe(const v1::Fp8Recipe& recipe);

// Whether two recipes run differently (their effective recipes differ).
bool Fp8RecipesDiffer(const v1::Fp8Recipe& a, const v1::Fp8Recipe& b);

// "disabled (bf16)", "delayed scaling (amax history 16)", "current scaling",
// with a margin or the most-recent amax rule where set.
std::string DescribeFp8Recipe(const v1::Fp8Recipe& recipe);

// "FP8 recipe changed from <saved> to <now>", or empty when they run alike.
std::string DescribeFp8RecipeChange(const v1::Fp8Recipe& saved, const v1::Fp8Recipe& now);

}  // namespace tessera

#endif  // TESSERA_FORMATS_CHECKPOINT_COMPATIBILITY_H_
