// Fuzzes the checkpoint readers: the rank manifest (worker/trainer/
// checkpoint_io.h: DecodeManifest, ReadRankManifest, ReadVerifiedFile) and
// the commit marker and names of common/checkpoint_layout.h, through their
// public functions only.
//
// Both formats end in a SHA-256 of their text, which a fuzzer cannot forge,
// so the first input byte picks a mode: bit 0 set, the harness appends the
// right "sha256 <hex>" line to the manifest text; bit 1 set, to the marker
// text. The rest of the input is written as step-1/rank-0.manifest and as
// step-1/COMMITTED under a scratch root. For a manifest that reads back, the
// files it lists are created (with the input as their bytes) and read
// through ReadVerifiedFile. Anything may be refused; nothing may crash, and
// an accepted manifest must stay inside its bounds and name plain files.
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_layout.h"
#include "common/sha256.h"
#include "formats/checkpoint_io.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/scratch_file.h"

namespace {

constexpr int64_t kStep = 1;
constexpr size_t kMaxFilesCreated = 8;

const std::string& ScratchRoot() {
  static const std::string root = MakeScratchDir("ckpt-fuzz");
  return root;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  WriteScratchFile(path, bytes.data(), bytes.size());
}

// The text with a correct checksum line appended (ending the body first).
std::string Sealed(std::string text) {
  if (text.empty() || text.back() != '\n') text.push_back('\n');
  return absl::StrCat(text, "sha256 ", tessera::Sha256Hex(text), "\n");
}

void CheckAccepted(const tessera::RankManifest& m) {
  FUZZ_CHECK(m.step >= 0 && m.world_size >= 1 && m.rank >= 0 && m.rank < m.world_size,
             "an accepted manifest has step, rank or world size out of range");
  for (const tessera::ManifestEntry& f : m.files) {
    FUZZ_CHECK(tessera::ValidateEntryName(f.name).ok(), "an accepted manifest names a bad path");
    FUZZ_CHECK(f.size >= 0 && f.sha256.size() == 64, "an accepted manifest has a bad entry");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);

  // Pure parsers first.
  tessera::ParseStepDirName(text);
  tessera::ValidateEntryName(text).IgnoreError();
  tessera::ValidateCheckpointRoot(text).IgnoreError();
  const std::string manifest_text = (mode & 1) ? Sealed(text) : text;
  absl::StatusOr<tessera::RankManifest> decoded = tessera::DecodeManifest(manifest_text, "fuzz");
  if (decoded.ok()) CheckAccepted(*decoded);

  // The same text as files of a step directory, read back from disk.
  const std::string& root = ScratchRoot();
  FUZZ_CHECK(tessera::CreateStepDir(root, kStep).ok(), "cannot create the scratch step");
  const std::string step_dir = tessera::StepDir(root, kStep);
  WriteFile(absl::StrCat(step_dir, "/", tessera::RankManifestName(0)), manifest_text);
  WriteFile(absl::StrCat(step_dir, "/", tessera::kCommitMarkerName),
            (mode & 2) ? Sealed(text) : text);
  tessera::ReadCommitMarker(root, kStep).status().IgnoreError();
  tessera::ListCommittedSteps(root).status().IgnoreError();
  absl::StatusOr<tessera::RankManifest> read = tessera::ReadRankManifest(root, kStep, 0);
  std::vector<std::string> created;
  if (read.ok()) {
    CheckAccepted(*read);
    for (const tessera::ManifestEntry& f : read->files) {
      if (created.size() == kMaxFilesCreated) break;
      const std::string path = absl::StrCat(step_dir, "/", f.name);
      if (path == absl::StrCat(step_dir, "/", tessera::RankManifestName(0)) ||
          f.name == tessera::kCommitMarkerName) {
        continue;
      }
      WriteFile(path, text);
      created.push_back(path);
      tessera::ReadVerifiedFile(root, *read, f.name).status().IgnoreError();
    }
    tessera::ReadVerifiedFile(root, *read, "not-listed").status().IgnoreError();
  }
  for (const std::string& path : created) unlink(path.c_str());
  // The step is removed for the next input (marker first, as documented).
  tessera::RemoveStepDir(root, kStep).IgnoreError();
  return 0;
}
