// How a worker picks the network its collectives use, for jobs that span
// hosts: --collective_interface names the interface whose address peers
// dial for Gloo (when --host is not given) and that NCCL bootstraps over
// (NCCL_SOCKET_IFNAME); --nccl_env passes NCCL's own settings (NCCL_IB_HCA,
// NCCL_SOCKET_IFNAME, NCCL_DEBUG, ...) into the worker's environment before
// any NCCL call. Both are parsed strictly: a bad entry stops the worker at
// startup, naming the flag and the entry.
#ifndef TESSERA_WORKER_DAEMON_COLLECTIVE_NETWORK_H_
#define TESSERA_WORKER_DAEMON_COLLECTIVE_NETWORK_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera {

// "KEY=VALUE,KEY=VALUE": every KEY starts with NCCL_ and is [A-Z0-9_]+;
// values are non-empty and hold no comma. Empty input: no settings.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseNcclEnv(
    absl::string_view flag_value);

// The address of network interface `name` (IPv4 preferred, else IPv6 in
// brackets), for peers to dial. NOT_FOUND names the interfaces there are.
absl::StatusOr<std::string> InterfaceAddress(const std::string& name);

// Sets NCCL_SOCKET_IFNAME to `interface` (when given and --nccl_env does
// not set it), then every --nccl_env entry, in the process environment.
absl::Status ApplyCollectiveEnvironment(
    const std::string& interface, const std::vector<std::pair<std::string, std::string>>& nccl_env);

}  // namespace tessera

#endif  // TESSERA_WORKER_DAEMON_COLLECTIVE_NETWORK_H_
