// See checkpoint_compatibility.h.
#include "formats/checkpoint_compatibility.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/sha256.h"
#include "formats/spec_hash.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"

namespace tessera {
namespace {

constexpr int kDefaultAmaxHistory = 16;  // job.proto: amax_history_len 0 means 16

std::string FieldPath(
    const std::vector<google::protobuf::util::MessageDifferencer::SpecificField>& path) {
  std::string out;
  for (const auto& f : path) {
    if (f.field == nullptr) continue;
    absl::StrAppend(&out, out.empty() ? "" : ".", f.field->name());
    if (f.index >= 0) absl::StrAppend(&out, "[", f.index, "]");
  }
  return out;
}

// The value of the last field of `path` in `message`, as text; "unset" for
// a field the message does not have.
std::string FieldValue(
    const google::protobuf::Message& message,
    const std::vector<google::protobuf::util::MessageDifferencer::SpecificField>& path) {
  const google::protobuf::Message* m = &message;
  for (size_t i = 0; i < path.size(); ++i) {
    const google::protobuf::FieldDescriptor* field = path[i].field;
    if (field == nullptr) return "?";
    const google::protobuf::Reflection* r = m->GetReflection();
    if (field->is_repeated()) {
      if (path[i].index < 0 || path[i].index >= r->FieldSize(*m, field)) return "unset";
      if (field->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) {
        m = &r->GetRepeatedMessage(*m, field, path[i].index);
        if (i + 1 == path.size()) return absl::StrCat("{", m->ShortDebugString(), "}");
        continue;
      }
      std::string text;
      google::protobuf::TextFormat::PrintFieldValueToString(*m, field, path[i].index, &text);
      return text;
    }
    if (field->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) {
      if (!r->HasField(*m, field)) return "unset";
      m = &r->GetMessage(*m, field);
      if (i + 1 == path.size()) return absl::StrCat("{", m->ShortDebugString(), "}");
      continue;
    }
    std::string text;
    google::protobuf::TextFormat::PrintFieldValueToString(*m, field, -1, &text);
    return text;
  }
  return "?";
}

// Collects "path: the checkpoint has X, this job Y" for every leaf that differs.
class DifferenceList : public google::protobuf::util::MessageDifferencer::Reporter {
 public:
  using Path = std::vector<google::protobuf::util::MessageDifferencer::SpecificField>;
  DifferenceList(const google::protobuf::Message& saved, const google::protobuf::Message& now)
      : saved_(saved), now_(now) {}
  void ReportAdded(const google::protobuf::Message&, const google::protobuf::Message&,
                   const Path& path) override {
    Note(path);
  }
  void ReportDeleted(const google::protobuf::Message&, const google::protobuf::Message&,
                     const Path& path) override {
    Note(path);
  }
  void ReportModified(const google::protobuf::Message&, const google::protobuf::Message&,
                      const Path& path) override {
    Note(path);
  }
  const std::vector<std::string>& lines() const { return lines_; }

 private:
  void Note(const Path& path) {
    lines_.push_back(absl::StrCat(FieldPath(path), ": the checkpoint has ",
                                  FieldValue(saved_, path), ", this job ", FieldValue(now_, path)));
  }
  const google::protobuf::Message& saved_;
  const google::protobuf::Message& now_;
  std::vector<std::string> lines_;
};

}  // namespace

ManifestSpec ManifestSpecOf(const v1::JobSpec& spec) {
  return ManifestSpec{CheckpointSpecHash(spec), DeterministicBytes(CheckpointShapingSpec(spec)),
                      DeterministicBytes(spec.fp8())};
}

absl::Status CheckCheckpointFitsJob(const RankManifest& manifest, const v1::JobSpec& spec,
                                    const std::string& what) {
  if (manifest.version < 2) {
    if (manifest.spec.hash == LegacyCheckpointSpecHash(spec)) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": the checkpoint was written by a job with a different model, optimizer, fp8 "
        "recipe, data or seed (spec hash ", manifest.spec.hash.substr(0, 12), "..., this job's ",
        LegacyCheckpointSpecHash(spec).substr(0, 12), "...). It predates checkpoints that record "
        "their spec and FP8 recipe, so it resumes only with every one of those unchanged, the "
        "FP8 recipe included"));
  }
  const std::string hash = CheckpointSpecHash(spec);
  if (manifest.spec.hash == hash) return absl::OkStatus();
  v1::JobSpec saved;
  if (!saved.ParseFromString(manifest.spec.fields) ||
      Sha256Hex(DeterministicBytes(saved)) != manifest.spec.hash) {
    return absl::DataLossError(
        absl::StrCat(what, ": the recorded spec does not match the recorded spec hash"));
  }
  const v1::JobSpec now = CheckpointShapingSpec(spec);
  DifferenceList differences(saved, now);
  google::protobuf::util::MessageDifferencer differencer;
  differencer.set_report_matches(false);
  differencer.ReportDifferencesTo(&differences);
  differencer.Compare(saved, now);
  return absl::FailedPreconditionError(absl::StrCat(
      what, ": the checkpoint was written by a job with a different model, optimizer, data or "
      "seed: ",
      differences.lines().empty() ? std::string("(no field differs; the hash does)")
                                  : absl::StrJoin(differences.lines(), "; "),
      ". Only fp8, world_size, steps and settings that shape no saved state may change on "
      "resume"));
}

absl::StatusOr<v1::Fp8Recipe> SavedFp8Recipe(const RankManifest& manifest,
                                             const v1::JobSpec& spec, const std::string& what) {
  if (manifest.version < 2) return spec.fp8();
  v1::Fp8Recipe recipe;
  if (!recipe.ParseFromString(manifest.spec.fp8_recipe)) {
    return absl::DataLossError(absl::StrCat(what, ": the recorded FP8 recipe does not parse"));
  }
  return recipe;
}

v1::Fp8Recipe EffectiveFp8Recipe(const v1::Fp8Recipe& recipe) {
  v1::Fp8Recipe effective;
  if (recipe.disabled()) {
    effective.set_disabled(true);
    return effective;
  }
  if (recipe.has_current()) {
    *effective.mutable_current() = recipe.current();
    return effective;
  }
  v1::DelayedScaling* delayed = effective.mutable_delayed();
  *delayed = recipe.delayed();
  if (delayed->amax_history_len() == 0) delayed->set_amax_history_len(kDefaultAmaxHistory);
  if (delayed->amax_compute() == v1::DelayedScaling::AMAX_COMPUTE_UNSPECIFIED) {
    delayed->set_amax_compute(v1::DelayedScaling::MAX);
  }
  return effective;
}

bool Fp8RecipesDiffer(const v1::Fp8Recipe& a, const v1::Fp8Recipe& b) {
  return DeterministicBytes(EffectiveFp8Recipe(a)) != DeterministicBytes(EffectiveFp8Recipe(b));
}

std::string DescribeFp8Recipe(const v1::Fp8Recipe& recipe) {
  const v1::Fp8Recipe r = EffectiveFp8Recipe(recipe);
  if (r.disabled()) return "disabled (bf16)";
  if (r.has_current()) {
    return r.current().margin() == 0
               ? std::string("current scaling")
               : absl::StrCat("current scaling (margin ", r.current().margin(), ")");
  }
  std::string out = absl::StrCat("delayed scaling (amax history ", r.delayed().amax_history_len());
  if (r.delayed().margin() != 0) absl::StrAppend(&out, ", margin ", r.delayed().margin());
  if (r.delayed().amax_compute() == v1::DelayedScaling::MOST_RECENT) {
    absl::StrAppend(&out, ", most recent amax");
  }
  return out + ")";
}

std::string DescribeFp8RecipeChange(const v1::Fp8Recipe& saved, const v1::Fp8Recipe& now) {
  if (!Fp8RecipesDiffer(saved, now)) return std::string();
  return absl::StrCat("FP8 recipe changed from ", DescribeFp8Recipe(saved), " to ",
                      DescribeFp8Recipe(now));
}

}  // namespace tessera
