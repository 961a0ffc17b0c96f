// The on-disk layout of a job's checkpoints, shared by the workers (which
// write and read the rank files) and the coordinator (which commits, resolves
// and prunes steps). Under the root `checkpoint.dir`:
//
//   step-<N>/                 state after N optimizer steps
//     rank-<R>.manifest       rank R's manifest (formats/checkpoint_io.h)
//     rank-<R>.state          rank R's files named by its manifest
//     COMMITTED               written by the coordinator, last, once every
//                             rank's Checkpoint succeeded
//
// A step without COMMITTED is incomplete (a write in progress or one that
// failed) and is never loaded. "latest" is the newest committed step.
//
// checkpoint.dir must name the same directory on the coordinator and on every
// worker: a shared filesystem (NFS, a cluster filesystem) when they run on
// different machines. The coordinator checks that each rank's manifest is
// visible to it before committing, so a directory that is not shared fails the
// job at its first checkpoint instead of producing steps nobody can load.
//
// Paths: the root may not contain a ".." component, and every name inside a
// step directory is a plain file name (no '/', not "." or ".."), so nothing
// read from a checkpoint can point outside its root; files are opened
// without following symbolic links.
#ifndef TESSERA_COMMON_CHECKPOINT_LAYOUT_H_
#define TESSERA_COMMON_CHECKPOINT_LAYOUT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera {

inline constexpr char kCommitMarkerName[] = "COMMITTED";

std::string StepDirName(int64_t step);  // "step-<N>"
std::string StepDir(const std::string& root, int64_t step);
std::string RankManifestName(int rank);  // "rank-<R>.manifest"

// The step of a directory name "step-<N>" (N a canonical decimal >= 0), or
// nullopt for any other name.
std::optional<int64_t> ParseStepDirName(absl::string_view name);

// INVALID_ARGUMENT (naming checkpoint.dir) for an empty root, one with a NUL
// byte or a ".." component.
absl::Status ValidateCheckpointRoot(const std::string& root);
// INVALID_ARGUMENT unless `name` is a plain file name that stays inside its
// directory: non-empty, at most 255 bytes, no '/', no control characters
// (NUL, newline), not "." or "..".
absl::Status ValidateEntryName(absl::string_view name);

// Creates the root and every missing parent (as mkdir -p), so that a job's
// checkpoint directory exists before its first step. The error names
// checkpoint.dir and the path that could not be made: INVALID_ARGUMENT when
// a component exists and is not a directory, PERMISSION_DENIED when it may
// not be created (or the file system is read-only), RESOURCE_EXHAUSTED when
// the disk is full.
absl::Status CreateCheckpointRoot(const std::string& root);

// Creates the root (one level; its parent must exist) and step-<N> under it.
absl::Status CreateStepDir(const std::string& root, int64_t step);

// Steps with a directory under root, ascending. A missing root has none.
absl::StatusOr<std::vector<int64_t>> ListStepDirs(const std::string& root);

struct CommitRecord {
  int64_t step = 0;
  int world_size = 0;  // ranks whose files the step holds
};

// Writes step-<N>/COMMITTED durably (temp, fsync, rename, directory fsync).
absl::Status WriteCommitMarker(const std::string& root, const CommitRecord& record);
// NOT_FOUND when step-<N> has no COMMITTED marker; DATA_LOSS when the marker
// is malformed, fails its checksum or names another step.
absl::StatusOr<CommitRecord> ReadCommitMarker(const std::string& root, int64_t step);
// Committed steps, ascending (DATA_LOSS if some marker is corrupt).
absl::StatusOr<std::vector<int64_t>> ListCommittedSteps(const std::string& root);

// Removes step-<N>: its COMMITTED marker first (durably, so a crash midway
// never leaves a committed but partial step), then its files, then the
// directory. FAILED_PRECONDITION if it holds anything but regular files; OK
// if it does not exist.
absl::Status RemoveStepDir(const std::string& root, int64_t step);

}  // namespace tessera

#endif  // TESSERA_COMMON_CHECKPOINT_LAYOUT_H_
