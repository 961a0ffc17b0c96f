// YAML/JSON job files onto JobSpec and back (see job_file.h).
//
// Both formats end in google::protobuf::util::JsonStringToMessage, so the
// schema is the proto's. yaml-cpp and nlohmann-json report errors by
// throwing; every throw is caught here and becomes an INVALID_ARGUMENT.
// Source lines for schema errors come from yaml-cpp's node marks (it also
// reads JSON), looked up by the field path protobuf names.
#include "client/job_file.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"
#include "yaml-cpp/yaml.h"

namespace tessera {
namespace {

using Json = nlohmann::json;
using LineMap = std::map<std::string, int>;  // field path ("model.d_model") -> 1-based line

std::string Join(const std::string& path, const std::string& key) {
  if (path.empty()) return key;
  return key.empty() ? path : absl::StrCat(path, ".", key);
}

absl::Status Invalid(const std::string& source, int line, const std::string& what) {
  if (line > 0) return absl::InvalidArgumentError(absl::StrCat(source, ": line ", line, ": ", what));
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", what));
}

// Records the line of every mapping key, by field path.
void CollectLines(const YAML::Node& node, const std::string& path, LineMap* lines) {
  if (node.IsMap()) {
    for (const auto& kv : node) {
      std::string key_path = Join(path, kv.first.Scalar());
      lines->emplace(key_path, kv.first.Mark().line + 1);
      CollectLines(kv.second, key_path, lines);
    }
  } else if (node.IsSequence()) {
    int i = 0;
    for (const auto& item : node) CollectLines(item, absl::StrCat(path, "[", i++, "]"), lines);
  }
}

// Plain (unquoted) YAML scalars take JSON types; quoted ones stay strings.
// Integers too large for int64 stay strings, which protobuf accepts for
// uint64 fields.
absl::StatusOr<Json> YamlToJson(const YAML::Node& node, const std::string& path,
                                const std::string& source) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      Json obj = Json::object();
      for (const auto& kv : node) {
        const std::string key = kv.first.Scalar();
        if (obj.contains(key)) {
          return Invalid(source, kv.first.Mark().line + 1,
                         absl::StrCat(Join(path, key), ": duplicate field"));
        }
        absl::StatusOr<Json> value = YamlToJson(kv.second, Join(path, key), source);
        if (!value.ok()) return value.status();
        obj[key] = *std::move(value);
      }
      return obj;
    }
    case YAML::NodeType::Sequence: {
      Json arr = Json::array();
      int i = 0;
      for (const auto& item : node) {
        absl::StatusOr<Json> value = YamlToJson(item, absl::StrCat(path, "[", i++, "]"), source);
        if (!value.ok()) return value.status();
        arr.push_back(*std::move(value));
      }
      return arr;
    }
    case YAML::NodeType::Scalar: {
      const std::string& value = node.Scalar();
      if (node.Tag() == "!") return Json(value);  // quoted
      static const std::regex kInt("^[-+]?[0-9]+$");
      static const std::regex kFloat("^[-+]?([0-9]+\\.?[0-9]*|\\.[0-9]+)([eE][-+]?[0-9]+)?$");
      if (value == "true" || value == "True") return Json(true);
      if (value == "false" || value == "False") return Json(false);
      if (value == "null" || value == "~") return Json(nullptr);
      if (std::regex_match(value, kInt)) {
        errno = 0;
        char* end = nullptr;
        long long parsed = std::strtoll(value.c_str(), &end, 10);
        if (errno == ERANGE) return Json(value);
        return Json(static_cast<int64_t>(parsed));
      }
      if (std::regex_match(value, kFloat)) return Json(std::strtod(value.c_str(), nullptr));
      return Json(value);
    }
    default:
      return Json(nullptr);
  }
}

// The proto JSON parser also accepts lowerCamelCase names; job files use the
// proto names only, so there is exactly one spelling of every field.
absl::Status CheckFieldNames(const Json& json, const std::string& path, const LineMap& lines,
                             const std::string& source) {
  if (json.is_object()) {
    for (const auto& [key, value] : json.items()) {
      std::string key_path = Join(path, key);
      for (char c : key) {
        if (std::isupper(static_cast<unsigned char>(c))) {
          auto it = lines.find(key_path);
          return Invalid(source, it == lines.end() ? 0 : it->second,
                         absl::StrCat(key_path,
                                      ": unknown field (job files use the proto's snake_case "
                                      "field names)"));
        }
      }
      if (absl::Status s = CheckFieldNames(value, key_path, lines, source); !s.ok()) return s;
    }
  } else if (json.is_array()) {
    int i = 0;
    for (const Json& item : json) {
      absl::Status s = CheckFieldNames(item, absl::StrCat(path, "[", i++, "]"), lines, source);
      if (!s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

// Rewrites protobuf's located errors ("(model) d_modle: Cannot find field.",
// "stepz: Cannot find field.", "(model.d_model): invalid value ...") as
// "line N: model.d_modle: unknown field" and the like.
absl::Status SchemaError(absl::string_view message, const LineMap& lines,
                         const std::string& source) {
  static const std::regex kLocated("^(?:\\(([^)]*)\\))?\\s*([A-Za-z0-9_]*):\\s*(.*)$");
  std::string text(message);
  std::smatch m;
  if (!std::regex_match(text, m, kLocated)) return Invalid(source, 0, text);
  std::string field = Join(m[1].str(), m[2].str());
  std::string what = m[3].str();
  if (absl::StartsWith(what, "Cannot find field")) what = "unknown field";
  auto it = lines.find(field);
  return Invalid(source, it == lines.end() ? 0 : it->second, absl::StrCat(field, ": ", what));
}

int LineOfOffset(const std::string& text, size_t offset) {
  offset = std::min(offset, text.size());
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + offset, '\n'));
}

bool LooksLikeJson(const std::string& text) {
  absl::string_view trimmed = absl::StripLeadingAsciiWhitespace(text);
  return !trimmed.empty() && trimmed[0] == '{';
}

}  // namespace

absl::StatusOr<v1::JobSpec> ParseJobSpec(const std::string& text, const std::string& source,
                                         JobFileFormat format) {
  if (format == JobFileFormat::kAuto) {
    format = LooksLikeJson(text) ? JobFileFormat::kJson : JobFileFormat::kYaml;
  }
  Json json;
  LineMap lines;
  if (format == JobFileFormat::kJson) {
    try {
      json = Json::parse(text);
    } catch (const Json::parse_error& e) {
      return Invalid(source, LineOfOffset(text, e.byte), "malformed JSON");
    }
    try {
      CollectLines(YAML::Load(text), "", &lines);  // only for line numbers
    } catch (const YAML::Exception&) {
      lines.clear();
    }
  } else {
    YAML::Node root;
    try {
      root = YAML::Load(text);
    } catch (const YAML::Exception& e) {
      return Invalid(source, e.mark.line + 1, e.msg);
    }
    CollectLines(root, "", &lines);
    absl::StatusOr<Json> converted = YamlToJson(root, "", source);
    if (!converted.ok()) return converted.status();
    json = *std::move(converted);
  }
  if (!json.is_object()) {
    return Invalid(source, 0, "a job file must be a mapping of JobSpec fields");
  }
  if (absl::Status s = CheckFieldNames(json, "", lines, source); !s.ok()) return s;

  v1::JobSpec spec;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto status = google::protobuf::util::JsonStringToMessage(json.dump(), &spec, options);
  if (!status.ok()) {
    return SchemaError(absl::string_view(status.message().data(), status.message().size()),
                       lines, source);
  }
  return spec;
}

absl::StatusOr<v1::JobSpec> ReadJobFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read job file ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string lower = absl::AsciiStrToLower(path);
  JobFileFormat format = JobFileFormat::kAuto;
  if (absl::EndsWith(lower, ".json")) format = JobFileFormat::kJson;
  if (absl::EndsWith(lower, ".yaml") || absl::EndsWith(lower, ".yml")) format = JobFileFormat::kYaml;
  return ParseJobSpec(ss.str(), path, format);
}

namespace {

// Keeps the proto's field order, so written files read like job.proto.
using OrderedJson = nlohmann::ordered_json;

OrderedJson SpecAsJson(const v1::JobSpec& spec) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(spec, &out, options);
  return OrderedJson::parse(out);
}

// A string needs quotes unless YAML would read it back as the same string.
bool NeedsQuotes(const std::string& s) {
  static const std::regex kPlain("^[A-Za-z_/][A-Za-z0-9_./-]*$");
  static const std::regex kSpecial("^(true|false|null|yes|no|on|off|y|n)$", std::regex::icase);
  return !std::regex_match(s, kPlain) || std::regex_match(s, kSpecial);
}

void AppendYaml(const OrderedJson& obj, const google::protobuf::Descriptor* descriptor, int indent,
                std::string* out) {
  for (const auto& [key, value] : obj.items()) {
    const google::protobuf::FieldDescriptor* field =
        descriptor == nullptr ? nullptr : descriptor->FindFieldByName(key);
    absl::StrAppend(out, std::string(indent, ' '), key, ":");
    if (value.is_object()) {
      absl::StrAppend(out, "\n");
      AppendYaml(value, field == nullptr ? nullptr : field->message_type(), indent + 2, out);
      continue;
    }
    std::string scalar;
    if (value.is_string()) {
      const std::string& s = value.get_ref<const std::string&>();
      // 64-bit integers are strings in proto JSON; in YAML they are numbers.
      bool is_int64 = field != nullptr &&
                      (field->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_INT64 ||
                       field->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_UINT64);
      scalar = is_int64 || !NeedsQuotes(s) ? s : value.dump();
    } else {
      scalar = value.dump();  // numbers, booleans, lists in JSON flow style
    }
    absl::StrAppend(out, " ", scalar, "\n");
  }
}

}  // namespace

std::string JobSpecToJson(const v1::JobSpec& spec) { return SpecAsJson(spec).dump(2) + "\n"; }

std::string JobSpecToYaml(const v1::JobSpec& spec) {
  std::string out;
  AppendYaml(SpecAsJson(spec), v1::JobSpec::descriptor(), 0, &out);
  return out;
}

}  // namespace tessera
