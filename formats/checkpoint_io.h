// Verified per-rank checkpoint files. A rank writes its files for step N into
// <root>/step-N/ (common/checkpoint_layout.h), each durably (temp name,
// fsync, rename, directory fsync), and then its manifest, rank-<R>.manifest,
// which records the step, rank, world size, spec hash (spec_hash.h), the
// spec fields the hash covers and the FP8 recipe the state was written under
// (so a job that cannot load the checkpoint is told which field differs, and
// one that changes the recipe knows what it changes from:
// checkpoint_compatibility.h) and, for every file, its size and SHA-256. The manifest is written last, so a rank
// whose manifest exists finished writing; the manifest carries a SHA-256 of
// its own text, so a damaged manifest is detected too.
//
// Reading checks everything: a missing, truncated, extended or altered file
// (or manifest) is DATA_LOSS naming the file; a name in a manifest that is not
// a plain file name inside the step directory is INVALID_ARGUMENT, as is a
// root with a ".." component. A write that fails removes its temporary file
// and every file the rank already wrote for the step, and then the step
// directory if no other rank has files in it.
//
// Manifest text, one field per line:
//   tessera-rank-manifest 3
//   step <N>
//   rank <R>
//   world_size <W>
//   spec_hash <64 hex>
//   spec <hex>        (the covered JobSpec fields, deterministic protobuf bytes)
//   fp8_recipe <hex>  (the Fp8Recipe, likewise; empty hex for the default)
//   numerics_stack <hex>  (the writing engine's device and library versions,
//                     Ops::NumericsStack(), as UTF-8 text)
//   file <size> <sha256 hex> <name>      (one line per file)
//   sha256 <64 hex digest of every line above, newlines included>
// Version 1 manifests have no spec and fp8_recipe lines, and their spec hash
// covers the FP8 recipe too (spec_hash.h's LegacyCheckpointSpecHash);
// version 2 manifests have no numerics_stack line. Both are still read.
#ifndef TESSERA_FORMATS_CHECKPOINT_IO_H_
#define TESSERA_FORMATS_CHECKPOINT_IO_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/durable_file.h"

namespace tessera {

struct ManifestEntry {
  std::string name;
  int64_t size = 0;
  std::string sha256;  // 64 hex characters
};

// What a manifest records of the job that wrote it (formats/spec_hash.h).
struct ManifestSpec {
  std::string hash;        // 64 hex characters
  std::string fields;      // serialized v1::JobSpec of the covered fields
  std::string fp8_recipe;  // serialized v1::Fp8Recipe the state was written under
  // The writing engine's Ops::NumericsStack(); empty from version 1 and 2
  // manifests.
  std::string numerics_stack;
};

inline constexpr int kManifestVersion = 3;
// The longest numerics stack a manifest records; a longer one is cut here.
inline constexpr size_t kMaxManifestNumericsStackChars = 320;

struct RankManifest {
  int version = kManifestVersion;  // 1: spec.hash covers fp8; fields and fp8_recipe are empty
                                   // 2: no numerics_stack
  int64_t step = 0;
  int rank = 0;
  int world_size = 1;
  ManifestSpec spec;
  std::vector<ManifestEntry> files;
};

std::string EncodeManifest(const RankManifest& manifest);
// `what` names the manifest in errors.
absl::StatusOr<RankManifest> DecodeManifest(absl::string_view text, const std::string& what);

class RankCheckpointWriter {
 public:
  // Validates the root and creates <root>/step-<step>/.
  static absl::StatusOr<std::unique_ptr<RankCheckpointWriter>> Begin(const std::string& root,
                                                                    int64_t step, int rank,
                                                                    int world_size,
                                                                    ManifestSpec spec);
  // Removes what it wrote unless Finish succeeded (see above).
  ~RankCheckpointWriter();
  RankCheckpointWriter(const RankCheckpointWriter&) = delete;
  RankCheckpointWriter& operator=(const RankCheckpointWriter&) = delete;

  // Writes one file of the step: `fill` appends its bytes to the writer.
  absl::Status AddFile(const std::string& name,
                       const std::function<absl::Status(DurableFileWriter&)>& fill);
  // Writes the manifest; returns its path.
  absl::StatusOr<std::string> Finish();

 private:
  RankCheckpointWriter(std::string root, std::string step_dir, RankManifest manifest);

  std::string root_, step_dir_;
  RankManifest manifest_;
  std::vector<std::string> written_;  // paths to remove if never finished
  bool finished_ = false;
};

// Reads and checks rank R's manifest of step N: its own checksum, its names,
// and that it records step N and rank R. DATA_LOSS when missing or damaged.
absl::StatusOr<RankManifest> ReadRankManifest(const std::string& root, int64_t step, int rank);

// DATA_LOSS when the manifest's world size is not `world_size` (ranks of
// the step disagree). Whether the job may load the checkpoint at all is
// checkpoint_compatibility.h's CheckCheckpointFitsJob.
absl::Status CheckManifestWorldSize(const RankManifest& manifest, int world_size,
                                    const std::string& what);

// Reads the manifest's file `name` and verifies its size and checksum.
absl::StatusOr<std::string> ReadVerifiedFile(const std::string& root, const RankManifest& manifest,
                                             const std::string& name);

}  // namespace tessera

#endif  // TESSERA_FORMATS_CHECKPOINT_IO_H_
