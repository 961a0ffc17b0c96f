// See hf_import.h.
#include "formats/hf_import.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/regular_file.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace tessera {
namespace {

constexpr int64_t kMaxJsonBytes = int64_t{16} << 20;

absl::Status Bad(const std::string& reason) {
  return absl::InvalidArgumentError(absl::StrCat("model.init_from: ", reason));
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// A JSON file of at most kMaxJsonBytes as an object.
absl::StatusOr<nlohmann::json> ReadJsonObject(const std::string& path) {
  absl::StatusOr<std::string> text = ReadRegularFile(path, kMaxJsonBytes, Symlinks::kFollow);
  if (!text.ok()) {
    // Not there or not readable: perhaps only on this machine. Anything
    // else is the directory's fault.
    const absl::StatusCode code = text.status().code();
    return absl::Status(
        code == absl::StatusCode::kNotFound || code == absl::StatusCode::kPermissionDenied
            ? code
            : absl::StatusCode::kInvalidArgument,
        absl::StrCat("model.init_from: ", text.status().message()));
  }
  nlohmann::json json = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) return Bad(absl::StrCat(path, ": not a JSON object"));
  return json;
}

// A value from the file as it reads in JSON, cut short: error messages
// quote it.
std::string Shown(const nlohmann::json& value) {
  std::string text = value.dump();
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// config.json against the job's model.
absl::Status CheckConfig(const nlohmann::json& config, const std::string& path,
                         const v1::ModelConfig& model) {
  auto string_field = [&](const char* key, const char* want) -> absl::Status {
    auto it = config.find(key);
    if (it == config.end() || it->is_null()) return absl::OkStatus();
    if (!it->is_string() || it->get<std::string>() != want) {
      return Bad(absl::StrCat(path, ": ", key, " is ", Shown(*it), "; Tessera trains \"", want,
                              "\" models"));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(string_field("model_type", "llama"));
  RETURN_IF_ERROR(string_field("hidden_act", "silu"));
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    auto it = config.find(key);
    if (it != config.end() && !(it->is_boolean() && !it->get<bool>())) {
      return Bad(absl::StrCat(path, ": ", key, " is ", Shown(*it),
                              "; Tessera's Llama has no biases"));
    }
  }
  if (auto it = config.find("rope_scaling"); it != config.end() && !it->is_null()) {
    return Bad(absl::StrCat(path, ": rope_scaling ", Shown(*it),
                            " is not supported (Tessera's RoPE is unscaled)"));
  }
  // Newer transformers keep RoPE's settings in rope_parameters; only the
  // unscaled ("default") kind is Tessera's.
  nlohmann::json fields = config;
  if (auto rp = config.find("rope_parameters"); rp != config.end() && !rp->is_null()) {
    if (!rp->is_object()) return Bad(absl::StrCat(path, ": rope_parameters is not an object"));
    if (auto type = rp->find("rope_type");
        type != rp->end() && !(type->is_string() && type->get<std::string>() == "default")) {
      return Bad(absl::StrCat(path, ": rope_parameters.rope_type ", Shown(*type),
                              " is not supported (Tessera's RoPE is unscaled)"));
    }
    if (auto theta = rp->find("rope_theta"); theta != rp->end()) {
      auto top = config.find("rope_theta");
      if (top != config.end() && !top->is_null() && *top != *theta) {
        return Bad(absl::StrCat(path, ": rope_theta ", Shown(*top), " and rope_parameters.rope_theta ",
                                Shown(*theta), " disagree"));
      }
      fields["rope_theta"] = *theta;
    }
  }
  for (const HfLlamaConfigField& f : HfLlamaConfigFields(model)) {
    double value;
    auto it = fields.find(f.key);
    if (it == fields.end() || it->is_null()) {
      if (!f.hf_default.has_value()) return Bad(absl::StrCat(path, ": ", f.key, " is missing"));
      value = *f.hf_default;
    } else if (!it->is_number()) {
      return Bad(absl::StrCat(path, ": ", f.key, " is ", Shown(*it), ", not a number"));
    } else {
      value = it->get<double>();
    }
    // eps and theta are floats in the spec: equal to float precision.
    const bool same = f.is_float
                          ? std::fabs(value - f.value) <= 1e-6 * std::max(std::fabs(value), std::fabs(f.value))
                          : value == f.value;
    if (!same) {
      return Bad(absl::StrCat(path, ": ", f.key, " is ", value, ", but ", f.spec_field, " is ",
                              f.value, "; the job's model must match the checkpoint"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<HfLlamaSource>> HfLlamaSource::Open(const v1::ModelConfig& model,
                                                                   const std::string& dir_in) {
  const std::string dir(absl::StripSuffix(dir_in, "/"));
  std::unique_ptr<HfLlamaSource> source(new HfLlamaSource());
  ASSIGN_OR_RETURN(const std::vector<HfLlamaParameter> layout, HfLlamaLayout(model));
  for (const HfLlamaParameter& p : layout) source->layout_[p.tessera_name] = p;

  const std::string config_path = dir + "/config.json";
  ASSIGN_OR_RETURN(const nlohmann::json config, ReadJsonObject(config_path));
  RETURN_IF_ERROR(CheckConfig(config, config_path, model));
  bool tied = false;
  if (auto it = config.find("tie_word_embeddings"); it != config.end() && !it->is_null()) {
    if (!it->is_boolean()) return Bad(absl::StrCat(config_path, ": tie_word_embeddings is not true or false"));
    tied = it->get<bool>();
  }

  // The weight files: one model.safetensors, or the shards an index names.
  // `expected` is the file each tensor must be found in (sharded only).
  std::map<std::string, std::string> expected;
  std::vector<std::string> file_names;
  const std::string index_path = dir + "/model.safetensors.index.json";
  if (Exists(index_path)) {
    ASSIGN_OR_RETURN(const nlohmann::json index, ReadJsonObject(index_path));
    auto map = index.find("weight_map");
    if (map == index.end() || !map->is_object()) {
      return Bad(absl::StrCat(index_path, ": weight_map is not an object"));
    }
    std::set<std::string> distinct;
    for (auto it = map->begin(); it != map->end(); ++it) {
      if (!it.value().is_string()) return Bad(absl::StrCat(index_path, ": ", it.key(), " names no file"));
      const std::string file = it.value().get<std::string>();
      // Shards lie beside the index: a name is never a path.
      if (file.empty() || file == "." || file == ".." || absl::StrContains(file, "/")) {
        return Bad(absl::StrCat(index_path, ": ", it.key(), " names \"", file,
                                "\", not a file in the directory"));
      }
      expected[it.key()] = file;
      distinct.insert(file);
    }
    file_names.assign(distinct.begin(), distinct.end());
  } else {
    file_names.push_back("model.safetensors");
  }
  for (const std::string& name : file_names) {
    absl::StatusOr<std::unique_ptr<SafetensorsReader>> file =
        SafetensorsReader::Open(dir + "/" + name);
    if (!file.ok()) {
      return absl::Status(file.status().code(),
                          absl::StrCat("model.init_from: ", file.status().message()));
    }
    for (const auto& [tensor, info] : (*file)->tensors()) {
      (void)info;
      if (!expected.empty()) {
        auto e = expected.find(tensor);
        // A tensor the index places elsewhere (or not at all) is not read
        // from this file.
        if (e == expected.end() || e->second != name) continue;
      } else if (source->where_.count(tensor) > 0) {
        continue;
      }
      source->where_[tensor] = {file->get(), tensor};
    }
    source->files_.push_back(std::move(*file));
  }
  for (const auto& [tensor, file] : expected) {
    if (source->where_.count(tensor) == 0) {
      return Bad(absl::StrCat(dir, "/", file, ": holds no tensor ", tensor,
                              ", which model.safetensors.index.json places there"));
    }
  }

  // Every tensor of the layout, with its shape; nothing else.
  std::set<std::string> wanted;
  for (const HfLlamaParameter& p : layout) {
    for (const HfLlamaTensor& t : p.tensors) {
      wanted.insert(t.name);
      auto it = source->where_.find(t.name);
      if (it == source->where_.end() && t.name == "lm_head.weight" && tied) {
        // The embedding came first in the layout, so it is there.
        it = source->where_.emplace(t.name, source->where_.at("model.embed_tokens.weight")).first;
      }
      if (it == source->where_.end()) {
        return Bad(absl::StrCat(dir, ": tensor ", t.name, " is missing",
                                t.name == "lm_head.weight"
                                    ? " (and config.json does not say tie_word_embeddings)"
                                    : ""));
      }
      const SafetensorsTensor& info = it->second.file->tensors().at(it->second.name);
      const std::vector<int64_t> want =
          p.cols == 1 ? std::vector<int64_t>{t.rows} : std::vector<int64_t>{t.rows, p.cols};
      if (info.shape != want) {
        return Bad(absl::StrCat(dir, ": tensor ", t.name, " is ", ShapeText(info.shape),
                                ", the job's model needs ", ShapeText(want)));
      }
    }
  }
  for (const auto& [tensor, location] : source->where_) {
    if (wanted.count(tensor) > 0 || absl::EndsWith(tensor, "rotary_emb.inv_freq")) continue;
    return Bad(absl::StrCat(location.file->path(), ": tensor ", tensor,
                            " has no place in Tessera's Llama model"));
  }
  return source;
}

absl::Status HfLlamaSource::Read(const std::string& tessera_name, int64_t first, int64_t n,
                                 float* out) const {
  auto p = layout_.find(tessera_name);
  if (p == layout_.end()) {
    return absl::NotFoundError(absl::StrCat("model.init_from: no parameter ", tessera_name));
  }
  const int64_t cols = p->second.cols;
  for (const HfLlamaTensor& t : p->second.tensors) {
    const int64_t begin = t.row0 * cols, end = (t.row0 + t.rows) * cols;
    const int64_t lo = std::max(first, begin), hi = std::min(first + n, end);
    if (lo >= hi) continue;
    const Location& at = where_.at(t.name);
    float* values = out + (lo - first);
    RETURN_IF_ERROR(at.file->ReadAsFloat(at.name, lo - begin, hi - lo, values));
    for (int64_t i = 0; i < hi - lo; ++i) {
      if (!std::isfinite(values[i])) {
        return Bad(absl::StrCat(at.file->path(), ": tensor ", t.name, " holds ", values[i],
                                " at element ", lo - begin + i));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace tessera
