// YAML/JSON job files onto JobSpec and back (see job_file.h).
//
// Both formats end in google::protobuf::util::JsonStringToMessage, so the
// schema is the proto's. Before that, the text is bounded (size, nesting,
// value length) without recursion, and the document is walked against
// JobSpec's descriptor so that unknown and duplicate fields are named with
// their path and line. yaml-cpp and nlohmann-json report errors by throwing;
// every throw is caught here and becomes an INVALID_ARGUMENT. Source lines
// for schema errors come from yaml-cpp's node marks (it also reads JSON),
// looked up by the field path. No std::regex: its matcher recurses once per
// character and overflows the stack on long values.
#include "client/job_file.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "client/field_suggestion.h"
#include "common/status_macros.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"
#include "yaml-cpp/eventhandler.h"
#include "yaml-cpp/yaml.h"

namespace tessera {
namespace {

using Json = nlohmann::json;
// Field path ("model.d_model") -> 1-based lines of its keys, in file order
// (more than one when the field is duplicated).
using LineMap = std::map<std::string, std::vector<int>>;

std::string Join(const std::string& path, const std::string& key) {
  if (path.empty()) return key;
  return key.empty() ? path : absl::StrCat(path, ".", key);
}

absl::Status Invalid(const std::string& source, int line, const std::string& what) {
  if (line > 0) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": line ", line, ": ", what));
  }
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", what));
}

// Counts the nodes of one YAML document and notes where the first starts.
class DocumentNodes : public YAML::EventHandler {
 public:
  int count = 0;
  int first_line = 0;  // 1-based
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark& m, YAML::anchor_t) override { Note(m); }
  void OnScalar(const YAML::Mark& m, const std::string&, YAML::anchor_t,
                const std::string&) override {
    Note(m);
  }
  void OnSequenceStart(const YAML::Mark& m, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    Note(m);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& m, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    Note(m);
  }
  void OnMapEnd() override {}

 private:
  void Note(const YAML::Mark& m) {
    if (count++ == 0) first_line = m.line + 1;
  }
};

// Whether anything follows the first YAML document: 0 if nothing (empty
// documents after "---" markers are fine), else the 1-based line where a
// document with content starts, or -1 for text that yaml-cpp reads as empty
// documents without end. Reads at most kMaxDocuments documents: given such
// text, yaml-cpp's LoadAll never returns (found by fuzz/job_file_fuzzer).
int TrailingDocumentLine(const std::string& text) {
  constexpr int kMaxDocuments = 16;
  std::stringstream in(text);
  YAML::Parser parser(in);
  DocumentNodes first;
  if (!parser.HandleNextDocument(first)) return 0;
  for (int i = 1; i < kMaxDocuments; ++i) {
    DocumentNodes next;
    if (!parser.HandleNextDocument(next)) return 0;
    if (next.count > 0) return next.first_line;
  }
  return -1;
}

int LineOf(const LineMap& lines, const std::string& path, size_t occurrence = 0) {
  auto it = lines.find(path);
  if (it == lines.end() || it->second.empty()) return 0;
  return it->second[std::min(occurrence, it->second.size() - 1)];
}

int LineOfOffset(const std::string& text, size_t offset) {
  offset = std::min(offset, text.size());
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + offset, '\n'));
}

std::string TooDeep() { return absl::StrCat("nested deeper than ", kMaxJobFileDepth, " levels"); }

// `bytes` < 0: the scan stopped at the limit, so the exact size is unknown.
std::string TooLong(int64_t bytes) {
  return absl::StrCat("a value of ", bytes < 0 ? "more than " : "",
                      bytes < 0 ? kMaxJobFileValueBytes : bytes,
                      " bytes; job file values are at most ", kMaxJobFileValueBytes, " bytes");
}

// One pass over JSON text, before any parser sees it: the nesting depth of
// objects and arrays, and the length of every string and bare token
// (numbers, literals), so that neither a deep document nor a huge value
// reaches a recursive or copying stage.
absl::Status CheckJsonBounds(const std::string& text, const std::string& source) {
  int depth = 0;
  bool in_string = false;
  size_t token_start = std::string::npos;  // start of the string or bare token being read
  auto token_too_long = [&](size_t end) {
    return token_start != std::string::npos &&
           static_cast<int64_t>(end - token_start) > kMaxJobFileValueBytes;
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
        if (token_too_long(i + 1)) {
          return Invalid(source, LineOfOffset(text, token_start), TooLong(-1));
        }
        token_start = std::string::npos;
      }
      continue;
    }
    const bool structural = c == '{' || c == '[' || c == '}' || c == ']' || c == ',' || c == ':' ||
                            c == '"' || std::isspace(static_cast<unsigned char>(c));
    if (!structural) {
      if (token_start == std::string::npos) token_start = i;
      if (token_too_long(i + 1)) {
        return Invalid(source, LineOfOffset(text, token_start), TooLong(-1));
      }
      continue;
    }
    token_start = std::string::npos;
    if (c == '"') {
      in_string = true;
      token_start = i;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxJobFileDepth) return Invalid(source, LineOfOffset(text, i), TooDeep());
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    }
  }
  if (in_string && token_too_long(text.size())) {
    return Invalid(source, LineOfOffset(text, token_start), TooLong(-1));
  }
  return absl::OkStatus();
}

// Parses JSON. A key repeated within one object (nlohmann would keep the
// last one silently; YAML files get the same check) is reported through
// `duplicate`, its field path, so that the caller can name its line.
absl::StatusOr<Json> ParseJson(const std::string& text, const std::string& source,
                               std::string* duplicate) {
  struct Open {
    std::string path;
    std::string key;  // the key whose value is being read
    std::set<std::string> keys;
  };
  std::vector<Open> objects;
  auto on_event = [&](int, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
        objects.push_back(
            {objects.empty() ? "" : Join(objects.back().path, objects.back().key), "", {}});
        break;
      case Json::parse_event_t::object_end:
        if (!objects.empty()) objects.pop_back();
        break;
      case Json::parse_event_t::key:
        if (!objects.empty() && parsed.is_string()) {
          Open& o = objects.back();
          o.key = parsed.get<std::string>();
          if (!o.keys.insert(o.key).second && duplicate->empty()) {
            *duplicate = Join(o.path, o.key);
          }
        }
        break;
      default:
        break;
    }
    return true;
  };
  Json json;
  try {
    json = Json::parse(text, on_event);
  } catch (const Json::parse_error& e) {
    return Invalid(source, LineOfOffset(text, e.byte), "malformed JSON");
  } catch (const Json::out_of_range&) {
    return Invalid(source, 0, "number out of range (beyond a double)");
  } catch (const std::exception& e) {
    return Invalid(source, 0, absl::StrCat("cannot read JSON: ", e.what()));
  }
  return json;
}

// Nodes a YAML walk may still visit. Aliases let a few lines of YAML name
// a tree of exponential size ("billion laughs"); the walks stop at the
// budget instead of expanding it.
struct NodeBudget {
  int64_t left = kMaxJobFileNodes;
  bool Take() { return left-- > 0; }
};

// Records the line of every mapping key, by field path. Stops descending at
// the depth limit or the node budget (the conversion refuses such files).
void CollectLines(const YAML::Node& node, const std::string& path, int depth, NodeBudget* budget,
                  LineMap* lines) {
  if (depth > kMaxJobFileDepth || !budget->Take()) return;
  if (node.IsMap()) {
    for (const auto& kv : node) {
      std::string key_path = Join(path, kv.first.Scalar());
      (*lines)[key_path].push_back(kv.first.Mark().line + 1);
      CollectLines(kv.second, key_path, depth + 1, budget, lines);
    }
  } else if (node.IsSequence()) {
    int i = 0;
    for (const auto& item : node) {
      CollectLines(item, absl::StrCat(path, "[", i++, "]"), depth + 1, budget, lines);
    }
  }
}

size_t SkipSign(absl::string_view s) { return !s.empty() && (s[0] == '-' || s[0] == '+') ? 1 : 0; }

size_t SkipDigits(absl::string_view s, size_t i) {
  while (i < s.size() && absl::ascii_isdigit(static_cast<unsigned char>(s[i]))) ++i;
  return i;
}

// [-+]?[0-9]+
bool IsPlainInt(absl::string_view s) {
  size_t i = SkipSign(s);
  return i < s.size() && SkipDigits(s, i) == s.size();
}

// [-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?
bool IsPlainFloat(absl::string_view s) {
  size_t i = SkipSign(s);
  const size_t int_end = SkipDigits(s, i);
  size_t mantissa_end = int_end;
  if (mantissa_end < s.size() && s[mantissa_end] == '.') {
    const size_t frac_end = SkipDigits(s, mantissa_end + 1);
    if (int_end == i && frac_end == mantissa_end + 1) return false;  // "." alone
    mantissa_end = frac_end;
  } else if (int_end == i) {
    return false;
  }
  if (mantissa_end == s.size()) return true;
  if (s[mantissa_end] != 'e' && s[mantissa_end] != 'E') return false;
  size_t e = mantissa_end + 1;
  e += SkipSign(s.substr(e));
  const size_t exp_end = SkipDigits(s, e);
  return exp_end > e && exp_end == s.size();
}

// Plain (unquoted) YAML scalars take JSON types; quoted ones stay strings.
// Integers too large for int64 stay strings, which protobuf accepts for
// uint64 fields.
absl::StatusOr<Json> YamlToJson(const YAML::Node& node, const std::string& path, int depth,
                                NodeBudget* budget, const std::string& source) {
  if (depth > kMaxJobFileDepth) return Invalid(source, node.Mark().line + 1, TooDeep());
  if (!budget->Take()) {
    return Invalid(source, node.Mark().line + 1,
                   absl::StrCat("more than ", kMaxJobFileNodes,
                                " values (counting each use of an alias)"));
  }
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      Json obj = Json::object();
      for (const auto& kv : node) {
        const std::string& key = kv.first.Scalar();
        if (static_cast<int64_t>(key.size()) > kMaxJobFileValueBytes) {
          return Invalid(source, kv.first.Mark().line + 1,
                         TooLong(static_cast<int64_t>(key.size())));
        }
        if (obj.contains(key)) {
          return Invalid(source, kv.first.Mark().line + 1,
                         absl::StrCat(Join(path, key), ": duplicate field"));
        }
        ASSIGN_OR_RETURN(obj[key],
                         YamlToJson(kv.second, Join(path, key), depth + 1, budget, source));
      }
      return obj;
    }
    case YAML::NodeType::Sequence: {
      Json arr = Json::array();
      int i = 0;
      for (const auto& item : node) {
        ASSIGN_OR_RETURN(
            Json value,
            YamlToJson(item, absl::StrCat(path, "[", i++, "]"), depth + 1, budget, source));
        arr.push_back(std::move(value));
      }
      return arr;
    }
    case YAML::NodeType::Scalar: {
      const std::string& value = node.Scalar();
      if (static_cast<int64_t>(value.size()) > kMaxJobFileValueBytes) {
        return Invalid(source, node.Mark().line + 1,
                       absl::StrCat(path, ": ", TooLong(static_cast<int64_t>(value.size()))));
      }
      if (node.Tag() == "!") return Json(value);  // quoted
      if (value == "true" || value == "True") return Json(true);
      if (value == "false" || value == "False") return Json(false);
      if (value == "null" || value == "~") return Json(nullptr);
      if (IsPlainInt(value)) {
        errno = 0;
        char* end = nullptr;
        long long parsed = std::strtoll(value.c_str(), &end, 10);
        if (errno == ERANGE) return Json(value);
        return Json(static_cast<int64_t>(parsed));
      }
      if (IsPlainFloat(value)) return Json(std::strtod(value.c_str(), nullptr));
      return Json(value);
    }
    default:
      return Json(nullptr);
  }
}

struct SchemaProblem {
  int line = 0;  // 0: unknown
  std::string what;
};

// Walks the document against the message descriptor: every key must be a
// field of its message under its proto (snake_case) name, and no number
// may be out of double's range (nlohmann reads 1e999 as infinity, which
// would print as null and leave the field unset). Finds every problem, so
// the one reported is the first in the file.
void CheckSchema(const Json& json, const google::protobuf::Descriptor* message,
                 const std::string& path, const LineMap& lines,
                 std::vector<SchemaProblem>* problems) {
  if (json.is_number_float() && !std::isfinite(json.get<double>())) {
    problems->push_back({LineOf(lines, path), absl::StrCat(path, ": number out of range")});
    return;
  }
  if (json.is_array() && message != nullptr) {  // a repeated message: each element
    for (size_t i = 0; i < json.size(); ++i) {
      CheckSchema(json[i], message, absl::StrCat(path, "[", i, "]"), lines, problems);
    }
    return;
  }
  if (!json.is_object() || message == nullptr) return;
  for (const auto& [key, value] : json.items()) {
    const std::string key_path = Join(path, key);
    const google::protobuf::FieldDescriptor* field = message->FindFieldByName(key);
    if (field == nullptr) {
      std::string what = absl::StrCat(key_path, ": unknown field");
      if (std::any_of(key.begin(), key.end(), [](char c) { return absl::ascii_isupper(c); })) {
        absl::StrAppend(&what, " (job files use the proto's snake_case field names)");
      }
      std::string meant = SuggestFieldName(*message, key);
      if (!meant.empty()) absl::StrAppend(&what, "; did you mean ", meant, "?");
      problems->push_back({LineOf(lines, key_path), what});
      continue;
    }
    CheckSchema(value, field->message_type(), key_path, lines, problems);
  }
}

// Protobuf's located errors look like "(model) d_modle: Cannot find field.",
// "stepz: Cannot find field." or "(model.d_model): invalid value ...";
// they become "line N: model.d_modle: unknown field" and the like.
absl::Status SchemaError(absl::string_view message, const LineMap& lines,
                         const std::string& source) {
  absl::string_view rest = message;
  std::string parent;
  if (absl::ConsumePrefix(&rest, "(")) {
    const size_t close = rest.find(')');
    if (close == absl::string_view::npos) return Invalid(source, 0, std::string(message));
    parent = std::string(rest.substr(0, close));
    rest.remove_prefix(close + 1);
  }
  rest = absl::StripLeadingAsciiWhitespace(rest);
  size_t name_end = 0;
  while (
      name_end < rest.size() &&
      (absl::ascii_isalnum(static_cast<unsigned char>(rest[name_end])) || rest[name_end] == '_')) {
    ++name_end;
  }
  if (name_end >= rest.size() || rest[name_end] != ':') {
    return Invalid(source, 0, std::string(message));
  }
  const std::string field = Join(parent, std::string(rest.substr(0, name_end)));
  std::string what(absl::StripLeadingAsciiWhitespace(rest.substr(name_end + 1)));
  if (absl::StartsWith(what, "Cannot find field")) what = "unknown field";
  return Invalid(source, LineOf(lines, field), absl::StrCat(field, ": ", what));
}

bool LooksLikeJson(const std::string& text) {
  absl::string_view trimmed = absl::StripLeadingAsciiWhitespace(text);
  return !trimmed.empty() && trimmed[0] == '{';
}

std::string TooBig(int64_t bytes) {
  return absl::StrCat("the file is ", bytes, " bytes; job files are at most ", kMaxJobFileBytes,
                      " bytes");
}

}  // namespace

namespace {

// A negative zero in a job file ("lr: -0.0") means zero. Stored as read, it
// would be a field that is set yet prints as 0, and the spec would not
// survive its own JSON and YAML writers; so every float and double -0 in
// the parsed message becomes +0.
void ClearNegativeZeros(google::protobuf::Message& message) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* reflection = message.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);
  for (const FieldDescriptor* field : fields) {
    const bool repeated = field->is_repeated();
    const int count = repeated ? reflection->FieldSize(message, field) : 1;
    for (int i = 0; i < count; ++i) {
      switch (field->cpp_type()) {
        case FieldDescriptor::CPPTYPE_FLOAT: {
          const float v = repeated ? reflection->GetRepeatedFloat(message, field, i)
                                   : reflection->GetFloat(message, field);
          if (v == 0.0f && std::signbit(v)) {
            repeated ? reflection->SetRepeatedFloat(&message, field, i, 0.0f)
                     : reflection->SetFloat(&message, field, 0.0f);
          }
          break;
        }
        case FieldDescriptor::CPPTYPE_DOUBLE: {
          const double v = repeated ? reflection->GetRepeatedDouble(message, field, i)
                                    : reflection->GetDouble(message, field);
          if (v == 0.0 && std::signbit(v)) {
            repeated ? reflection->SetRepeatedDouble(&message, field, i, 0.0)
                     : reflection->SetDouble(&message, field, 0.0);
          }
          break;
        }
        case FieldDescriptor::CPPTYPE_MESSAGE:
          ClearNegativeZeros(repeated ? *reflection->MutableRepeatedMessage(&message, field, i)
                                      : *reflection->MutableMessage(&message, field));
          break;
        default:
          break;
      }
    }
  }
}

}  // namespace

absl::StatusOr<v1::JobSpec> ParseJobSpec(const std::string& text, const std::string& source,
                                         JobFileFormat format) {
  if (static_cast<int64_t>(text.size()) > kMaxJobFileBytes) {
    return Invalid(source, 0, TooBig(static_cast<int64_t>(text.size())));
  }
  if (format == JobFileFormat::kAuto) {
    format = LooksLikeJson(text) ? JobFileFormat::kJson : JobFileFormat::kYaml;
  }
  Json json;
  LineMap lines;
  if (format == JobFileFormat::kJson) {
    RETURN_IF_ERROR(CheckJsonBounds(text, source));
    std::string duplicate;
    ASSIGN_OR_RETURN(json, ParseJson(text, source, &duplicate));
    try {
      // Only for line numbers; valid JSON holds no YAML aliases.
      NodeBudget budget;
      CollectLines(YAML::Load(text), "", 0, &budget, &lines);
    } catch (const std::exception&) {
      lines.clear();
    }
    if (!duplicate.empty()) {
      return Invalid(source, LineOf(lines, duplicate, 1),
                     absl::StrCat(duplicate, ": duplicate field"));
    }
  } else {
    try {
      // yaml-cpp bounds its own recursion (a DeepRecursion error) while
      // parsing; the conversion below enforces the tighter job file limit.
      // Load reads the first document only, so text after a flow mapping
      // ("{...}\nmore") would be dropped without a word.
      if (const int line = TrailingDocumentLine(text); line != 0) {
        return Invalid(source, std::max(line, 0),
                       line > 0 ? "text after the job's mapping: a job file holds one YAML document"
                                : "text after the job's mapping that is not YAML");
      }
      YAML::Node root = YAML::Load(text);
      NodeBudget budget;
      ASSIGN_OR_RETURN(json, YamlToJson(root, "", 0, &budget, source));
      NodeBudget lines_budget;
      CollectLines(root, "", 0, &lines_budget, &lines);
    } catch (const YAML::Exception& e) {
      return Invalid(source, e.mark.line + 1, e.msg);
    } catch (const std::exception& e) {
      return Invalid(source, 0, absl::StrCat("cannot read YAML: ", e.what()));
    }
  }
  if (!json.is_object()) {
    return Invalid(source, 0, "a job file must be a mapping of JobSpec fields");
  }
  std::vector<SchemaProblem> problems;
  CheckSchema(json, v1::JobSpec::descriptor(), "", lines, &problems);
  if (!problems.empty()) {
    auto first = std::min_element(
        problems.begin(), problems.end(), [](const SchemaProblem& a, const SchemaProblem& b) {
          // Unknown lines (0) sort last.
          return (a.line == 0 ? INT32_MAX : a.line) < (b.line == 0 ? INT32_MAX : b.line);
        });
    return Invalid(source, first->line, first->what);
  }

  v1::JobSpec spec;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  // YAML passes string bytes through unchecked; JSON text must be UTF-8.
  std::string json_text;
  try {
    json_text = json.dump();
  } catch (const Json::type_error& e) {
    return Invalid(source, 0, absl::StrCat("a value is not valid UTF-8 (", e.what(), ")"));
  }
  auto status = google::protobuf::util::JsonStringToMessage(json_text, &spec, options);
  if (!status.ok()) {
    return SchemaError(absl::string_view(status.message().data(), status.message().size()), lines,
                       source);
  }
  ClearNegativeZeros(spec);
  return spec;
}

absl::StatusOr<v1::JobSpec> ReadJobFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read job file ", path));
  // One byte past the limit tells an oversized file (or stream) apart
  // without reading it all.
  std::string text(static_cast<size_t>(kMaxJobFileBytes) + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (static_cast<int64_t>(text.size()) > kMaxJobFileBytes) {
    struct stat st;
    if (stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      return Invalid(path, 0, TooBig(st.st_size));
    }
    return Invalid(
        path, 0,
        absl::StrCat("more than ", kMaxJobFileBytes, " bytes; job files are at most that long"));
  }
  std::string lower = absl::AsciiStrToLower(path);
  JobFileFormat format = JobFileFormat::kAuto;
  if (absl::EndsWith(lower, ".json")) format = JobFileFormat::kJson;
  if (absl::EndsWith(lower, ".yaml") || absl::EndsWith(lower, ".yml")) {
    format = JobFileFormat::kYaml;
  }
  return ParseJobSpec(text, path, format);
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
  // Plain: [A-Za-z_/][A-Za-z0-9_./-]*, and not a word YAML reads as a
  // boolean or null.
  if (s.empty() ||
      !(absl::ascii_isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_' || s[0] == '/')) {
    return true;
  }
  for (char c : s) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '/' &&
        c != '-') {
      return true;
    }
  }
  static const char* const kSpecial[] = {"true", "false", "null", "yes", "no",
                                         "on",   "off",   "y",    "n"};
  const std::string lower = absl::AsciiStrToLower(s);
  return std::any_of(std::begin(kSpecial), std::end(kSpecial),
                     [&](const char* word) { return lower == word; });
}

void AppendYaml(const OrderedJson& obj, const google::protobuf::Descriptor* descriptor, int indent,
                std::string* out) {
  for (const auto& [key, value] : obj.items()) {
    const google::protobuf::FieldDescriptor* field =
        descriptor == nullptr ? nullptr : descriptor->FindFieldByName(key);
    absl::StrAppend(out, std::string(indent, ' '), key, ":");
    if (value.is_object() && value.empty()) {
      absl::StrAppend(out, " {}\n");  // present but empty; a bare "key:" reads as null
      continue;
    }
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
  // An all-default spec: an empty document would not read back as a mapping.
  return out.empty() ? "{}\n" : out;
}

}  // namespace tessera
