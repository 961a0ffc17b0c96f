// Safe by default: a server reachable from other machines must encrypt and
// authenticate. Listening on anything but a loopback address (127.0.0.0/8,
// ::1, localhost) without TLS and tokens is refused unless the operator
// says --insecure, so a forgotten flag never exposes an open training
// service on a shared network. Loopback stays open, as the quickstart uses it.
#ifndef TESSERA_COMMON_LISTEN_POLICY_H_
#define TESSERA_COMMON_LISTEN_POLICY_H_

#include <string>

#include "absl/status/status.h"

namespace tessera {

// True for "127.x.y.z:P", "localhost:P", "[::1]:P" and unix sockets.
// A wildcard ("0.0.0.0:P", "[::]:P", ":P") or any other host is not.
bool IsLoopbackAddress(const std::string& listen);

// FAILED_PRECONDITION with one line naming what is missing when `listen` is
// not loopback and `secured` is false, unless `insecure`.
// `what_secures` names the flags that would secure it.
absl::Status CheckListenSecurity(const std::string& listen, bool secured, bool insecure,
                                 const std::string& what_secures);

}  // namespace tessera

#endif  // TESSERA_COMMON_LISTEN_POLICY_H_
