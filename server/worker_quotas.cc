// Parsing the quota file (see worker_quotas.h).
#include "server/worker_quotas.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/regular_file.h"
#include "common/user_tokens.h"

namespace tessera {
namespace {

constexpr char kOthers[] = "*";
constexpr char kUnlimited[] = "unlimited";

// MAX_WORKERS: `unlimited` (nullopt), or digits only (no sign, no spaces)
// naming 0..kMaxQuotaWorkers.
absl::StatusOr<std::optional<int>> ParseLimit(const std::string& field) {
  if (field == kUnlimited) return std::optional<int>();
  const bool digits =
      !field.empty() && field.size() <= 9 &&
      std::all_of(field.begin(), field.end(), [](char c) { return absl::ascii_isdigit(c); });
  int value = 0;
  if (!digits || !absl::SimpleAtoi(field, &value) || value > kMaxQuotaWorkers) {
    return absl::InvalidArgumentError(absl::StrCat("MAX_WORKERS \"", field,
                                                   "\" must be a whole number from 0 to ",
                                                   kMaxQuotaWorkers, ", or `unlimited`"));
  }
  return std::optional<int>(value);
}

std::string LimitText(const std::optional<int>& limit) {
  return limit ? absl::StrCat(*limit) : kUnlimited;
}

}  // namespace

std::optional<int> WorkerQuotas::LimitFor(const std::string& user) const {
  if (user.empty()) return std::nullopt;
  if (auto it = per_user.find(user); it != per_user.end()) return it->second;
  return others;
}

bool WorkerQuotas::FromDefault(const std::string& user) const {
  return !user.empty() && per_user.count(user) == 0 && others.has_value();
}

std::string WorkerQuotas::Summary() const {
  constexpr size_t kNamed = 8;  // named in the line; the rest are counted
  std::vector<std::string> parts;
  for (const auto& [user, limit] : per_user) {
    if (parts.size() == kNamed) {
      parts.push_back(absl::StrCat("and ", per_user.size() - kNamed, " more"));
      break;
    }
    parts.push_back(absl::StrCat(user, " ", LimitText(limit)));
  }
  std::string users = parts.empty() ? "no user listed" : absl::StrJoin(parts, ", ");
  return absl::StrCat(users, "; others ",
                      others ? absl::StrCat(*others) : std::string("unlimited"));
}

absl::StatusOr<WorkerQuotas> ParseWorkerQuotas(const std::string& path, const std::string& text) {
  WorkerQuotas quotas;
  std::map<std::string, int> line_of;  // user (or `*`) -> the line that set it
  int line_number = 0;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++line_number;
    absl::string_view line = raw.substr(0, raw.find('#'));
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    const std::string where = absl::StrCat(path, ": line ", line_number, ": ");
    std::vector<std::string> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (fields.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "expected `USER MAX_WORKERS` (USER: a user name or `*`), found ",
                       fields.size(), " fields"));
    }
    const std::string& user = fields[0];
    if (user != kOthers) {
      if (absl::Status s = CheckUserName(user); !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(where, s.message()));
      }
    }
    absl::StatusOr<std::optional<int>> limit = ParseLimit(fields[1]);
    if (!limit.ok())
      return absl::InvalidArgumentError(absl::StrCat(where, limit.status().message()));
    if (auto [it, added] = line_of.emplace(user, line_number); !added) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, user == kOthers ? std::string("`*`") : absl::StrCat("user ", user),
                       " already has a quota on line ", it->second, "; give each one line"));
    }
    if (user == kOthers) {
      quotas.others = *limit;  // `* unlimited`: the same as no `*` line
    } else {
      quotas.per_user[user] = *limit;
    }
  }
  return quotas;
}

absl::StatusOr<WorkerQuotas> ReadWorkerQuotaFile(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("the quota file's path is empty");
  absl::StatusOr<std::string> text = ReadRegularFile(path, kMaxQuotaFileBytes, Symlinks::kFollow);
  if (!text.ok()) return text.status();
  return ParseWorkerQuotas(path, *text);
}

}  // namespace tessera
