// Where the CLI finds its credentials. TLS files come from --tls_ca,
// --tls_cert and --tls_key (or $TESSERA_TLS_CA, $TESSERA_TLS_CERT,
// $TESSERA_TLS_KEY). The bearer token is never a flag value, which `ps`
// would show to every user of the machine: it is read from the file named
// by --token_file or $TESSERA_TOKEN_FILE, else taken from $TESSERA_TOKEN.
#ifndef TESSERA_CLIENT_CLI_CREDENTIALS_H_
#define TESSERA_CLIENT_CLI_CREDENTIALS_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "client/cli_args.h"
#include "client/client.h"

namespace tessera {

// Reads an environment variable (tests pass their own); null or "" if unset.
using EnvLookup = std::function<const char*(const char*)>;

// Client options with the TLS files and token the flags and environment
// name. INVALID_ARGUMENT naming the flag or variable on a bad token source.
absl::StatusOr<ClientOptions> CliClientOptions(const ParsedArgs& args, const EnvLookup& env);

}  // namespace tessera

#endif  // TESSERA_CLIENT_CLI_CREDENTIALS_H_
