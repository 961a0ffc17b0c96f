// Rank manifests and the verified write/read of a rank's checkpoint files
// (see checkpoint_io.h).
#include "formats/checkpoint_io.h"

#include <unistd.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/regular_file.h"
#include "common/checkpoint_layout.h"
#include "common/sha256.h"

namespace tessera {
namespace {

constexpr char kManifestMagicPrefix[] = "tessera-rank-manifest ";
constexpr int64_t kMaxManifestBytes = int64_t{1} << 20;
constexpr size_t kMaxManifestFiles = 4096;

bool IsHexDigest(absl::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// "key value" -> value, or false.
bool Value(absl::string_view line, absl::string_view key, absl::string_view* value) {
  if (!absl::ConsumePrefix(&line, key) || !absl::ConsumePrefix(&line, " ")) return false;
  *value = line;
  return true;
}

bool DecodeHex(absl::string_view hex, std::string* bytes) {
  if (hex.size() % 2 != 0) return false;
  bytes->clear();
  for (size_t i = 0; i < hex.size(); i += 2) {
    int v = 0;
    for (char c : hex.substr(i, 2)) {
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) return false;
      v = v * 16 + d;
    }
    bytes->push_back(static_cast<char>(v));
  }
  return true;
}

std::string EncodeHex(absl::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : bytes) {
    hex.push_back(kDigits[c >> 4]);
    hex.push_back(kDigits[c & 15]);
  }
  return hex;
}

std::string ManifestPath(const std::string& root, int64_t step, int rank) {
  return absl::StrCat(StepDir(root, step), "/", RankManifestName(rank));
}

}  // namespace

std::string EncodeManifest(const RankManifest& m) {
  std::string text = absl::StrCat(kManifestMagicPrefix, kManifestVersion, "\nstep ", m.step,
                                  "\nrank ", m.rank, "\nworld_size ", m.world_size,
                                  "\nspec_hash ", m.spec.hash, "\nspec ", EncodeHex(m.spec.fields),
                                  "\nfp8_recipe ", EncodeHex(m.spec.fp8_recipe),
                                  "\nnumerics_stack ", EncodeHex(m.spec.numerics_stack), "\n");
  for (const ManifestEntry& f : m.files) {
    absl::StrAppend(&text, "file ", f.size, " ", f.sha256, " ", f.name, "\n");
  }
  absl::StrAppend(&text, "sha256 ", Sha256Hex(text), "\n");
  return text;
}

absl::StatusOr<RankManifest> DecodeManifest(absl::string_view text, const std::string& what) {
  auto corrupt = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat(what, ": ", why));
  };
  // The checksum line covers everything before it.
  if (text.empty() || text.back() != '\n') return corrupt("truncated (no final newline)");
  const size_t last = text.rfind('\n', text.size() - 2);
  if (last == absl::string_view::npos) return corrupt("not a rank manifest");
  const absl::string_view body = text.substr(0, last + 1);
  absl::string_view digest;
  if (!Value(text.substr(last + 1, text.size() - last - 2), "sha256", &digest) ||
      digest != Sha256Hex(body)) {
    return corrupt("checksum mismatch (the manifest was altered or truncated)");
  }
  std::vector<absl::string_view> lines = absl::StrSplit(body.substr(0, body.size() - 1), '\n');
  RankManifest m;
  absl::string_view v;
  if (lines.size() < 5 || !Value(lines[0], "tessera-rank-manifest", &v) ||
      !absl::SimpleAtoi(v, &m.version) || m.version < 1 || m.version > kManifestVersion) {
    return corrupt("not a rank manifest");
  }
  if (!Value(lines[1], "step", &v) || !absl::SimpleAtoi(v, &m.step) ||
      !Value(lines[2], "rank", &v) || !absl::SimpleAtoi(v, &m.rank) ||
      !Value(lines[3], "world_size", &v) || !absl::SimpleAtoi(v, &m.world_size) ||
      !Value(lines[4], "spec_hash", &v) || !IsHexDigest(v)) {
    return corrupt("malformed header");
  }
  m.spec.hash = std::string(v);
  if (m.world_size < 1 || m.rank < 0 || m.rank >= m.world_size || m.step < 0) {
    return corrupt("rank, world_size or step out of range");
  }
  size_t first_file = 5;
  if (m.version >= 2) {
    if (lines.size() < 7 || !Value(lines[5], "spec", &v) || !DecodeHex(v, &m.spec.fields) ||
        !Value(lines[6], "fp8_recipe", &v) || !DecodeHex(v, &m.spec.fp8_recipe)) {
      return corrupt("malformed spec or fp8_recipe line");
    }
    first_file = 7;
  }
  if (m.version >= 3) {
    if (lines.size() < 8 || !Value(lines[7], "numerics_stack", &v) ||
        !DecodeHex(v, &m.spec.numerics_stack)) {
      return corrupt("malformed numerics_stack line");
    }
    first_file = 8;
  }
  if (lines.size() - first_file > kMaxManifestFiles) return corrupt("too many files");
  for (size_t i = first_file; i < lines.size(); ++i) {
    absl::string_view rest;
    if (!Value(lines[i], "file", &rest)) return corrupt(absl::StrCat("line ", i + 1, ": not a file"));
    std::vector<absl::string_view> parts = absl::StrSplit(rest, absl::MaxSplits(' ', 2));
    ManifestEntry f;
    if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &f.size) || f.size < 0 ||
        !IsHexDigest(parts[1])) {
      return corrupt(absl::StrCat("line ", i + 1, ": malformed file entry"));
    }
    if (absl::Status s = ValidateEntryName(parts[2]); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", s.message()));
    }
    f.sha256 = std::string(parts[1]);
    f.name = std::string(parts[2]);
    for (const ManifestEntry& other : m.files) {
      if (other.name == f.name) return corrupt(absl::StrCat("file ", f.name, " listed twice"));
    }
    m.files.push_back(std::move(f));
  }
  return m;
}

RankCheckpointWriter::RankCheckpointWriter(std::string root, std::string step_dir,
                                           RankManifest manifest)
    : root_(std::move(root)), step_dir_(std::move(step_dir)), manifest_(std::move(manifest)) {}

absl::StatusOr<std::unique_ptr<RankCheckpointWriter>> RankCheckpointWriter::Begin(
    const std::string& root, int64_t step, int rank, int world_size, ManifestSpec spec) {
  if (absl::Status s = CreateStepDir(root, step); !s.ok()) return s;
  RankManifest m;
  m.step = step;
  m.rank = rank;
  m.world_size = world_size;
  m.spec = std::move(spec);
  return std::unique_ptr<RankCheckpointWriter>(
      new RankCheckpointWriter(root, StepDir(root, step), std::move(m)));
}

RankCheckpointWriter::~RankCheckpointWriter() {
  if (finished_) return;
  for (const std::string& path : written_) ::unlink(path.c_str());
  // Succeeds only when no other rank has written into the step.
  if (::rmdir(step_dir_.c_str()) == 0) FsyncDirectory(root_).IgnoreError();
}

absl::Status RankCheckpointWriter::AddFile(
    const std::string& name, const std::function<absl::Status(DurableFileWriter&)>& fill) {
  if (finished_) return absl::FailedPreconditionError("checkpoint already finished");
  if (absl::Status s = ValidateEntryName(name); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<DurableFileWriter>> file =
      DurableFileWriter::Create(step_dir_, name);
  if (!file.ok()) return file.status();
  if (absl::Status s = fill(**file); !s.ok()) return s;
  // Listed before the rename, so a failure after it still removes the file.
  written_.push_back((*file)->path());
  if (absl::Status s = (*file)->Commit(); !s.ok()) return s;
  manifest_.files.push_back({name, (*file)->size(), (*file)->sha256()});
  return absl::OkStatus();
}

absl::StatusOr<std::string> RankCheckpointWriter::Finish() {
  if (finished_) return absl::FailedPreconditionError("checkpoint already finished");
  const std::string name = RankManifestName(manifest_.rank);
  written_.push_back(absl::StrCat(step_dir_, "/", name));
  if (absl::Status s = WriteFileDurably(step_dir_, name, EncodeManifest(manifest_)); !s.ok()) {
    return s;
  }
  finished_ = true;
  return written_.back();
}

absl::StatusOr<RankManifest> ReadRankManifest(const std::string& root, int64_t step, int rank) {
  if (absl::Status s = ValidateCheckpointRoot(root); !s.ok()) return s;
  const std::string path = ManifestPath(root, step, rank);
  absl::StatusOr<std::string> text =
      ReadRegularFile(path, kMaxManifestBytes, Symlinks::kRefuse);
  if (!text.ok()) {
    if (text.status().code() == absl::StatusCode::kInvalidArgument) return text.status();
    return absl::DataLossError(absl::StrCat(path, ": cannot read the rank manifest: ",
                                            text.status().message()));
  }
  absl::StatusOr<RankManifest> m = DecodeManifest(*text, path);
  if (!m.ok()) return m.status();
  if (m->step != step || m->rank != rank) {
    return absl::DataLossError(absl::StrCat(path, ": records step ", m->step, " rank ", m->rank,
                                            ", expected step ", step, " rank ", rank));
  }
  return m;
}

absl::Status CheckManifestWorldSize(const RankManifest& m, int world_size,
                                    const std::string& what) {
  if (m.world_size != world_size) {
    return absl::DataLossError(absl::StrCat(what, ": records world size ", m.world_size,
                                            ", but the step was committed with ", world_size));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadVerifiedFile(const std::string& root, const RankManifest& m,
                                             const std::string& name) {
  const ManifestEntry* entry = nullptr;
  for (const ManifestEntry& f : m.files) {
    if (f.name == name) entry = &f;
  }
  const std::string path = absl::StrCat(StepDir(root, m.step), "/", name);
  if (entry == nullptr) {
    return absl::DataLossError(absl::StrCat(path, ": not listed in rank ", m.rank, "'s manifest"));
  }
  if (absl::Status s = ValidateEntryName(name); !s.ok()) return s;
  absl::StatusOr<std::string> data = ReadRegularFile(path, entry->size, Symlinks::kRefuse);
  if (!data.ok()) {
    if (data.status().code() == absl::StatusCode::kInvalidArgument) return data.status();
    const std::string why = data.status().code() == absl::StatusCode::kOutOfRange
                                ? absl::StrCat("larger than the ", entry->size,
                                               " bytes its manifest records")
                                : std::string(data.status().message());
    return absl::DataLossError(absl::StrCat(path, ": ", why));
  }
  if (static_cast<int64_t>(data->size()) != entry->size) {
    return absl::DataLossError(absl::StrCat(path, ": truncated: ", data->size(), " bytes, its "
                                            "manifest records ", entry->size));
  }
  if (Sha256Hex(*data) != entry->sha256) {
    return absl::DataLossError(
        absl::StrCat(path, ": checksum mismatch: the file's bytes were altered"));
  }
  return data;
}

}  // namespace tessera
