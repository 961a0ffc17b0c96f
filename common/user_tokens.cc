// Parsing the user token file (see user_tokens.h).
#include "common/user_tokens.h"

#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/secret_file.h"

namespace tessera {
namespace {

bool NameChar(char c) {
  return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '.' || c == '_' || c == '-';
}

}  // namespace

absl::Status CheckUserName(const std::string& name) {
  if (name.empty() || name.size() > kMaxUserNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a user name must be 1 to ", kMaxUserNameBytes, " characters"));
  }
  if (!absl::ascii_islower(name[0]) && !absl::ascii_isdigit(name[0])) {
    return absl::InvalidArgumentError(
        absl::StrCat("user name \"", name, "\" must start with a-z or 0-9"));
  }
  for (char c : name) {
    if (!NameChar(c)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "user name \"", name, "\" may hold only a-z, 0-9, '.', '_' and '-'"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<UserToken>> ParseUserTokens(const std::string& flag,
                                                       const std::string& text) {
  std::vector<UserToken> out;
  std::map<std::string, bool> role_of;   // user -> admin
  std::map<std::string, int> line_of;    // token -> line it was first seen on
  int line_number = 0;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++line_number;
    absl::string_view line = absl::StripAsciiWhitespace(raw);
    if (line.empty() || line[0] == '#') continue;
    const std::string where = absl::StrCat(flag, ": line ", line_number, ": ");
    std::vector<std::string> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    UserToken entry;
    std::string token_text;
    if (fields.size() == 1) {
      token_text = fields[0];
    } else if (fields.size() == 3) {
      entry.user = fields[0];
      if (absl::Status s = CheckUserName(entry.user); !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(where, s.message()));
      }
      if (fields[1] != "user" && fields[1] != "admin") {
        return absl::InvalidArgumentError(absl::StrCat(
            where, "role \"", fields[1], "\" is neither `user` nor `admin`"));
      }
      entry.admin = fields[1] == "admin";
      token_text = fields[2];
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "expected `NAME ROLE TOKEN` (ROLE: user or admin), found ", fields.size(),
          " fields"));
    }
    // The token's own checks (length, characters), named by line.
    absl::StatusOr<std::string> token = ParseSingleToken(absl::StrCat(where, "token"), token_text);
    if (!token.ok()) return token.status();
    entry.token = *std::move(token);
    if (entry.user.empty()) {
      entry.user = LegacyTokenUser(entry.token);
      entry.admin = true;
    }
    if (auto [it, added] = line_of.emplace(entry.token, line_number); !added) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "the same token as line ", it->second, "; each token names one user"));
    }
    if (auto [it, added] = role_of.emplace(entry.user, entry.admin);
        !added && it->second != entry.admin) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "user ", entry.user, " is listed as both `user` and `admin`; give one role"));
    }
    out.push_back(std::move(entry));
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, ": holds no token"));
  return out;
}

absl::StatusOr<std::vector<UserToken>> ReadUserTokenFile(const std::string& flag,
                                                         const std::string& path) {
  absl::StatusOr<std::string> text = ReadSecretFile(flag, path);
  if (!text.ok()) return text.status();
  return ParseUserTokens(absl::StrCat(flag, " ", path), *text);
}

int CountUnnamedTokens(const std::vector<UserToken>& tokens) {
  int n = 0;
  for (const UserToken& t : tokens) n += t.user == LegacyTokenUser(t.token) ? 1 : 0;
  return n;
}

}  // namespace tessera
