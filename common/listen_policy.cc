// Refusing to listen openly on non-loopback addresses (see listen_policy.h).
#include "common/listen_policy.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tessera {

bool IsLoopbackAddress(const std::string& listen) {
  if (absl::StartsWith(listen, "unix:") || absl::StartsWith(listen, "unix-abstract:")) return true;
  std::string address = listen;
  if (absl::StartsWith(address, "ipv4:")) address = address.substr(5);
  if (absl::StartsWith(address, "ipv6:")) address = address.substr(5);
  const size_t colon = address.rfind(':');
  std::string host =
      absl::AsciiStrToLower(colon == std::string::npos ? address : address.substr(0, colon));
  if (host == "localhost" || host == "[::1]" || host == "::1") return true;
  if (!absl::StartsWith(host, "127.")) return false;
  // 127.0.0.0/8: four dot-separated numbers.
  int dots = 0;
  for (char c : host) {
    if (c == '.') {
      ++dots;
    } else if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      return false;
    }
  }
  return dots == 3;
}

absl::Status CheckListenSecurity(const std::string& listen, bool secured, bool insecure,
                                 const std::string& what_secures) {
  if (secured || insecure || IsLoopbackAddress(listen)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("refusing to listen on ", listen,
                                                    " (not loopback) without ", what_secures,
                                                    "; pass --insecure to allow it"));
}

}  // namespace tessera
