// See checkpoint_state.h.
#include "formats/checkpoint_state.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_layout.h"
#include "common/status_macros.h"
#include "formats/checkpoint_compatibility.h"
#include "formats/checkpoint_io.h"

namespace tessera {
namespace {

// Bounds-checked reads from a verified file. The checksum already matched,
// so a failure here means the writer and reader disagree on the format.
class Cursor {
 public:
  Cursor(const std::string& bytes, const std::string& what) : bytes_(bytes), what_(what) {}
  absl::Status Int(int64_t* v) {
    const char* p = nullptr;
    RETURN_IF_ERROR(Take(sizeof(*v), &p));
    std::memcpy(v, p, sizeof(*v));
    return absl::OkStatus();
  }
  absl::Status Take(int64_t size, const char** p) {
    if (size < 0 || size > static_cast<int64_t>(bytes_.size() - offset_)) {
      return absl::DataLossError(absl::StrCat(what_, ": malformed state file: a field at byte ",
                                              offset_, " runs past its end"));
    }
    *p = bytes_.data() + offset_;
    offset_ += static_cast<size_t>(size);
    return absl::OkStatus();
  }
  bool AtEnd() const { return offset_ == bytes_.size(); }

 private:
  const std::string& bytes_;
  const std::string what_;
  size_t offset_ = 0;
};

}  // namespace

std::string StateFileName(int rank) { return absl::StrCat("rank-", rank, ".state"); }

absl::Status ParseState(const std::string& what, SavedState& s) {
  Cursor in(s.bytes, what);
  const char* magic = nullptr;
  RETURN_IF_ERROR(in.Take(8, &magic));
  if (std::memcmp(magic, kStateMagic, 8) != 0) {
    return absl::DataLossError(absl::StrCat(what, ": not a Tessera state file"));
  }
  int64_t count = 0;
  RETURN_IF_ERROR(in.Int(&s.step));
  RETURN_IF_ERROR(in.Int(&s.rank));
  RETURN_IF_ERROR(in.Int(&s.world));
  RETURN_IF_ERROR(in.Int(&s.data_position));
  RETURN_IF_ERROR(in.Int(&count));
  if (count < 0 || count > 1 << 20) {
    return absl::DataLossError(absl::StrCat(what, ": parameter count ", count));
  }
  s.params.resize(count);
  for (SavedParam& p : s.params) {
    int64_t name_len = 0;
    const char* name = nullptr;
    RETURN_IF_ERROR(in.Int(&name_len));
    RETURN_IF_ERROR(in.Take(name_len, &name));
    p.name.assign(name, name_len);
    for (int64_t* v : {&p.rows, &p.cols, &p.dtype, &p.first, &p.n}) RETURN_IF_ERROR(in.Int(v));
    if (p.n < 0 || p.n > (int64_t{1} << 40) ||
        (p.dtype != kStateDTypeE4M3 && p.dtype != kStateDTypeBFloat16)) {
      return absl::DataLossError(absl::StrCat(what, ": parameter ", p.name, " is malformed"));
    }
    RETURN_IF_ERROR(in.Take(p.n * 4, &p.master));
    RETURN_IF_ERROR(in.Take(p.n * 4, &p.exp_avg));
    RETURN_IF_ERROR(in.Take(p.n * 4, &p.exp_avg_sq));
    RETURN_IF_ERROR(in.Take(p.n * (p.dtype == kStateDTypeBFloat16 ? 2 : 1), &p.compute));
  }
  RETURN_IF_ERROR(in.Int(&s.meta_count));
  if (s.meta_count < 0 || s.meta_count > (int64_t{1} << 30)) {
    return absl::DataLossError(absl::StrCat(what, ": quantizer block size ", s.meta_count));
  }
  RETURN_IF_ERROR(in.Take(s.meta_count * 4, &s.meta));
  if (!in.AtEnd()) return absl::DataLossError(absl::StrCat(what, ": trailing bytes"));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<FullParameter>> ReadFullParameters(const std::string& dir, int step,
                                                              const v1::JobSpec* spec) {
  ASSIGN_OR_RETURN(const CommitRecord commit, ReadCommitMarker(dir, step));
  const int world = commit.world_size;
  std::vector<FullParameter> full;
  for (int r = 0; r < world; ++r) {
    SavedState state;
    ASSIGN_OR_RETURN(const RankManifest manifest, ReadRankManifest(dir, step, r));
    const std::string what = absl::StrCat(StepDir(dir, step), "/", StateFileName(r));
    const std::string manifest_path = absl::StrCat(StepDir(dir, step), "/", RankManifestName(r));
    if (spec != nullptr) RETURN_IF_ERROR(CheckCheckpointFitsJob(manifest, *spec, manifest_path));
    RETURN_IF_ERROR(CheckManifestWorldSize(manifest, world, manifest_path));
    ASSIGN_OR_RETURN(state.bytes, ReadVerifiedFile(dir, manifest, StateFileName(r)));
    RETURN_IF_ERROR(ParseState(what, state));
    if (state.step != step || state.rank != r || state.world != world) {
      return absl::DataLossError(absl::StrCat(what, ": header (step ", state.step, ", rank ",
                                              state.rank, " of ", state.world,
                                              ") does not match its place"));
    }
    if (r == 0) {
      for (const SavedParam& q : state.params) {
        if (q.rows <= 0 || q.cols <= 0 || q.rows > (int64_t{1} << 31) ||
            q.rows * q.cols > (int64_t{1} << 36)) {
          return absl::DataLossError(
              absl::StrCat(what, ": parameter ", q.name, " has shape ", q.rows, " x ", q.cols));
        }
        full.push_back({q.name, q.rows, q.cols, std::vector<float>(q.rows * q.cols)});
      }
    }
    if (state.params.size() != full.size()) {
      return absl::DataLossError(absl::StrCat(what, ": ", state.params.size(),
                                              " parameters, rank 0 has ", full.size()));
    }
    for (size_t i = 0; i < full.size(); ++i) {
      const SavedParam& q = state.params[i];
      FullParameter& p = full[i];
      if (q.name != p.name || q.rows != p.rows || q.cols != p.cols || q.first < 0 ||
          q.n < 0 || q.first + q.n > p.rows * p.cols) {
        return absl::DataLossError(
            absl::StrCat(what, ": parameter ", i, " (", q.name, ") does not match rank 0's"));
      }
      std::memcpy(p.values.data() + q.first, q.master, q.n * sizeof(float));
    }
  }
  return full;
}

}  // namespace tessera
