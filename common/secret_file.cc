// Credential files (see secret_file.h).
#include "common/secret_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tessera {
namespace {

absl::Status Bad(const std::string& flag, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(flag, ": ", what));
}

std::vector<std::string> Tokens(const std::string& text) {
  std::vector<std::string> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    out.emplace_back(line);
  }
  return out;
}

absl::Status CheckToken(const std::string& source, const std::string& token) {
  if (token.size() < kMinTokenBytes) {
    return Bad(source, absl::StrCat("a token must be at least ", kMinTokenBytes,
                                    " characters (e.g. `openssl rand -hex 32`)"));
  }
  for (char c : token) {
    // Tokens travel as HTTP/2 header values: printable ASCII, no spaces.
    if (c <= 0x20 || c >= 0x7f)
      return Bad(source, "a token must be printable ASCII without spaces");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ReadSecretFile(const std::string& flag, const std::string& path) {
  if (path.empty()) return Bad(flag, "no file given");
  std::ifstream in(path, std::ios::binary);
  if (!in) return Bad(flag, absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  std::string text;
  char buffer[4096];
  while (in.read(buffer, sizeof(buffer)) || in.gcount() > 0) {
    text.append(buffer, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxSecretFileBytes) {
      return Bad(flag, absl::StrCat(path, " is larger than ", kMaxSecretFileBytes, " bytes"));
    }
  }
  if (in.bad()) return Bad(flag, absl::StrCat("cannot read ", path));
  if (text.empty()) return Bad(flag, absl::StrCat(path, " is empty"));
  return text;
}

absl::StatusOr<std::vector<std::string>> ReadTokenFile(const std::string& flag,
                                                       const std::string& path) {
  absl::StatusOr<std::string> text = ReadSecretFile(flag, path);
  if (!text.ok()) return text.status();
  std::vector<std::string> tokens = Tokens(*text);
  if (tokens.empty()) return Bad(flag, absl::StrCat(path, " holds no token"));
  for (const std::string& t : tokens) {
    if (absl::Status s = CheckToken(flag, t); !s.ok()) return s;
  }
  return tokens;
}

absl::StatusOr<std::string> ParseSingleToken(const std::string& source, const std::string& text) {
  std::vector<std::string> tokens = Tokens(text);
  if (tokens.size() != 1) {
    return Bad(source, absl::StrCat("must hold exactly one token (found ", tokens.size(), ")"));
  }
  if (absl::Status s = CheckToken(source, tokens[0]); !s.ok()) return s;
  return tokens[0];
}

}  // namespace tessera
