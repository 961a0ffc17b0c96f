// Collective network flags: parsing, interface lookup, environment (see
// collective_network.h).
#include "worker/daemon/collective_network.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stdlib.h>

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"

namespace tessera {

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseNcclEnv(
    absl::string_view flag_value) {
  std::vector<std::pair<std::string, std::string>> settings;
  if (flag_value.empty()) return settings;
  for (absl::string_view entry : absl::StrSplit(flag_value, ',')) {
    const size_t eq = entry.find('=');
    const auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat("--nccl_env: entry \"", entry, "\" ", why));
    };
    if (eq == absl::string_view::npos) return bad("is not KEY=VALUE");
    const absl::string_view key = entry.substr(0, eq), value = entry.substr(eq + 1);
    if (!absl::StartsWith(key, "NCCL_") || key.size() == 5) {
      return bad("must set an NCCL_ variable (NCCL_IB_HCA, NCCL_SOCKET_IFNAME, ...)");
    }
    for (char c : key) {
      if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) {
        return bad("has a key with characters other than A-Z, 0-9 and _");
      }
    }
    if (value.empty()) return bad("has an empty value");
    settings.emplace_back(std::string(key), std::string(value));
  }
  return settings;
}

absl::StatusOr<std::string> InterfaceAddress(const std::string& name) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return absl::InternalError("getifaddrs failed");
  std::string v4, v6;
  std::set<std::string> names;
  for (const ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_name == nullptr) continue;
    names.insert(a->ifa_name);
    if (name != a->ifa_name || a->ifa_addr == nullptr) continue;
    char text[INET6_ADDRSTRLEN] = {};
    if (a->ifa_addr->sa_family == AF_INET && v4.empty()) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
      if (inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text)) != nullptr) v4 = text;
    } else if (a->ifa_addr->sa_family == AF_INET6 && v6.empty()) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a->ifa_addr);
      if (inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text)) != nullptr) {
        v6 = absl::StrCat("[", text, "]");
      }
    }
  }
  freeifaddrs(list);
  if (!v4.empty()) return v4;
  if (!v6.empty()) return v6;
  return absl::NotFoundError(absl::StrCat("--collective_interface: no interface \"", name,
                                          "\" with an address here (there are: ",
                                          absl::StrJoin(names, ", "), ")"));
}

absl::Status ApplyCollectiveEnvironment(
    const std::string& interface, const std::vector<std::pair<std::string, std::string>>& nccl_env) {
  bool sets_ifname = false;
  for (const auto& [key, value] : nccl_env) sets_ifname = sets_ifname || key == "NCCL_SOCKET_IFNAME";
  if (!interface.empty() && !sets_ifname &&
      setenv("NCCL_SOCKET_IFNAME", interface.c_str(), /*overwrite=*/1) != 0) {
    return absl::InternalError("setenv NCCL_SOCKET_IFNAME failed");
  }
  for (const auto& [key, value] : nccl_env) {
    if (setenv(key.c_str(), value.c_str(), /*overwrite=*/1) != 0) {
      return absl::InternalError(absl::StrCat("setenv ", key, " failed"));
    }
  }
  return absl::OkStatus();
}

}  // namespace tessera
