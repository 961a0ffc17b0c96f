// The CLI's TLS files and token (see cli_credentials.h).
#include "client/cli_credentials.h"

#include "absl/strings/str_cat.h"
#include "common/secret_file.h"
#include "common/status_macros.h"

namespace tessera {
namespace {

std::string FlagOrEnv(const ParsedArgs& args, const std::string& flag, const char* variable,
                      const EnvLookup& env) {
  if (args.Has(flag)) return args.Get(flag);
  const char* value = env(variable);
  return value != nullptr ? value : "";
}

}  // namespace

absl::StatusOr<ClientOptions> CliClientOptions(const ParsedArgs& args, const EnvLookup& env) {
  ClientOptions options;
  options.tls_ca_file = FlagOrEnv(args, "tls_ca", "TESSERA_TLS_CA", env);
  options.tls_cert_file = FlagOrEnv(args, "tls_cert", "TESSERA_TLS_CERT", env);
  options.tls_key_file = FlagOrEnv(args, "tls_key", "TESSERA_TLS_KEY", env);
  const std::string token_file = FlagOrEnv(args, "token_file", "TESSERA_TOKEN_FILE", env);
  if (!token_file.empty()) {
    const std::string source = args.Has("token_file") ? "--token_file" : "TESSERA_TOKEN_FILE";
    ASSIGN_OR_RETURN(const std::string text, ReadSecretFile(source, token_file));
    ASSIGN_OR_RETURN(options.token, ParseSingleToken(source, text));
  } else if (const char* value = env("TESSERA_TOKEN"); value != nullptr && *value != '\0') {
    ASSIGN_OR_RETURN(options.token, ParseSingleToken("TESSERA_TOKEN", value));
  }
  return options;
}

}  // namespace tessera
