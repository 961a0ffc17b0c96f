// YAML/JSON job files onto JobSpec (see job_file.h).
#include "client/job_file.h"

#include <fstream>
#include <regex>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"
#include "yaml-cpp/yaml.h"

namespace tessera {
namespace {

// Plain (unquoted) YAML scalars take JSON types; quoted ones stay strings.
nlohmann::json YamlToJson(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      nlohmann::json obj = nlohmann::json::object();
      for (const auto& kv : node) obj[kv.first.as<std::string>()] = YamlToJson(kv.second);
      return obj;
    }
    case YAML::NodeType::Sequence: {
      nlohmann::json arr = nlohmann::json::array();
      for (const auto& item : node) arr.push_back(YamlToJson(item));
      return arr;
    }
    case YAML::NodeType::Scalar: {
      const std::string value = node.Scalar();
      if (node.Tag() == "!") return value;  // quoted
      static const std::regex kInt("^[-+]?[0-9]+$");
      static const std::regex kFloat("^[-+]?([0-9]+\\.?[0-9]*|\\.[0-9]+)([eE][-+]?[0-9]+)?$");
      if (value == "true" || value == "True") return true;
      if (value == "false" || value == "False") return false;
      if (value == "null" || value == "~") return nullptr;
      if (std::regex_match(value, kInt)) {
        try {
          return std::stoll(value);
        } catch (...) {
          return value;
        }
      }
      if (std::regex_match(value, kFloat)) return std::stod(value);
      return value;
    }
    default:
      return nullptr;
  }
}

}  // namespace

absl::StatusOr<v1::JobSpec> ParseJobSpec(const std::string& text, const std::string& source) {
  std::string json;
  absl::string_view trimmed = absl::StripLeadingAsciiWhitespace(text);
  if (!trimmed.empty() && trimmed[0] == '{') {
    json = text;
  } else {
    try {
      YAML::Node root = YAML::Load(text);
      if (!root.IsMap()) {
        return absl::InvalidArgumentError(
            absl::StrCat(source, ": a job file must be a mapping of JobSpec fields"));
      }
      json = YamlToJson(root).dump();
    } catch (const YAML::Exception& e) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": line ", e.mark.line + 1,
                                                     ", column ", e.mark.column + 1, ": ", e.msg));
    }
  }
  v1::JobSpec spec;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto status = google::protobuf::util::JsonStringToMessage(json, &spec, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": ", std::string(status.message().data(), status.message().size())));
  }
  return spec;
}

absl::StatusOr<v1::JobSpec> ReadJobFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read job file ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseJobSpec(ss.str(), path);
}

std::string JobSpecToJson(const v1::JobSpec& spec) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(spec, &out, options);
  return out;
}

}  // namespace tessera
