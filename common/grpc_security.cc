// TLS credentials, call headers and call authorization over gRPC (see
// grpc_security.h).
#include "common/grpc_security.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_keepalive.h"
#include "common/grpc_status.h"
#include "common/listen_policy.h"
#include "common/secret_file.h"
#include "common/user_tokens.h"
#include "grpcpp/create_channel.h"

namespace tessera {
namespace {

absl::Status CheckPem(const std::string& flag, const std::string& text, const char* kind) {
  if (!absl::StrContains(text, "-----BEGIN ") || !absl::StrContains(text, kind)) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": not a PEM file holding a ", kind));
  }
  return absl::OkStatus();
}

struct Pem {
  std::string cert, key, ca;
};

// Reads whichever of the three files are named. `need_pair`: cert and key
// go together; `need_ca`: the CA is required once a certificate is given.
absl::StatusOr<Pem> ReadPem(const TlsFlags& tls, bool ca_required_with_cert) {
  if (tls.cert.empty() != tls.key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(tls.cert.empty() ? "--tls_cert" : "--tls_key",
                                                   ": must be given together with ",
                                                   tls.cert.empty() ? "--tls_key" : "--tls_cert"));
  }
  if (ca_required_with_cert && !tls.cert.empty() && tls.ca.empty()) {
    return absl::InvalidArgumentError(
        "--tls_ca: must be given with --tls_cert (client certificates are verified against it)");
  }
  Pem pem;
  if (!tls.cert.empty()) {
    absl::StatusOr<std::string> cert = ReadSecretFile("--tls_cert", tls.cert);
    if (!cert.ok()) return cert.status();
    if (absl::Status s = CheckPem("--tls_cert", *cert, "CERTIFICATE"); !s.ok()) return s;
    absl::StatusOr<std::string> key = ReadSecretFile("--tls_key", tls.key);
    if (!key.ok()) return key.status();
    if (absl::Status s = CheckPem("--tls_key", *key, "PRIVATE KEY"); !s.ok()) return s;
    pem.cert = *cert;
    pem.key = *key;
  }
  if (!tls.ca.empty()) {
    absl::StatusOr<std::string> ca = ReadSecretFile("--tls_ca", tls.ca);
    if (!ca.ok()) return ca.status();
    if (absl::Status s = CheckPem("--tls_ca", *ca, "CERTIFICATE"); !s.ok()) return s;
    pem.ca = *ca;
  }
  return pem;
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFor(const Pem& pem) {
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = pem.ca;  // empty: the system's roots
  options.pem_private_key = pem.key;
  options.pem_cert_chain = pem.cert;
  return grpc::SslCredentials(options);
}

}  // namespace

ClientCredentials::ClientCredentials() : channel_credentials_(grpc::InsecureChannelCredentials()) {}

absl::StatusOr<std::shared_ptr<ClientCredentials>> ClientCredentials::Load(const TlsFlags& tls,
                                                                           std::string token) {
  auto out = std::make_shared<ClientCredentials>();
  out->token_ = std::move(token);
  if (!tls.any()) return out;
  absl::StatusOr<Pem> pem = ReadPem(tls, /*ca_required_with_cert=*/false);
  if (!pem.ok()) return pem.status();
  out->tls_ = true;
  out->channel_credentials_ = ChannelCredentialsFor(*pem);
  return out;
}

std::shared_ptr<grpc::Channel> ClientCredentials::Channel(
    const std::string& address, const grpc::ChannelArguments& args) const {
  return grpc::CreateCustomChannel(address, channel_credentials_, args);
}

std::shared_ptr<grpc::Channel> ClientCredentials::KeepaliveChannel(
    const std::string& address) const {
  grpc::ChannelArguments args;
  ApplyClientKeepalive(args);
  return Channel(address, args);
}

void ClientCredentials::Apply(grpc::ClientContext* context) const {
  if (!token_.empty()) context->AddMetadata("authorization", BearerHeader(token_));
  absl::MutexLock lock(&mu_);
  if (!session_.empty()) context->AddMetadata(kWorkerSessionHeader, session_);
}

void ClientCredentials::set_session(const std::string& session) {
  absl::MutexLock lock(&mu_);
  session_ = session;
}

absl::StatusOr<ServerSecurity> LoadServerSecurity(const ServerSecurityFlags& flags) {
  if (flags.tls.any() && (flags.tls.cert.empty() || flags.tls.ca.empty())) {
    return absl::InvalidArgumentError(
        "--tls_cert, --tls_key and --tls_ca: a server needs all three (mTLS)");
  }
  absl::StatusOr<Pem> pem = ReadPem(flags.tls, /*ca_required_with_cert=*/true);
  if (!pem.ok()) return pem.status();
  const bool tls = !pem->cert.empty();
  if (flags.require_client_cert && !tls) {
    return absl::InvalidArgumentError(
        "--require_client_cert: needs TLS (--tls_cert, --tls_key, --tls_ca)");
  }

  std::vector<UserToken> user_tokens;
  std::string worker_token;
  if (flags.has_user_api && flags.user_tokens_file.empty() != flags.worker_token_file.empty()) {
    return absl::InvalidArgumentError(
        "--user_tokens_file and --worker_token_file: give both or neither (one credential "
        "alone would leave the other API open)");
  }
  if (!flags.user_tokens_file.empty()) {
    absl::StatusOr<std::vector<UserToken>> tokens =
        ReadUserTokenFile("--user_tokens_file", flags.user_tokens_file);
    if (!tokens.ok()) return tokens.status();
    user_tokens = *std::move(tokens);
  }
  if (!flags.worker_token_file.empty()) {
    absl::StatusOr<std::vector<std::string>> tokens =
        ReadTokenFile("--worker_token_file", flags.worker_token_file);
    if (!tokens.ok()) return tokens.status();
    if (tokens->size() != 1) {
      return absl::InvalidArgumentError("--worker_token_file: must hold exactly one token");
    }
    worker_token = (*tokens)[0];
    for (const UserToken& u : user_tokens) {
      if (u.token == worker_token) {
        return absl::InvalidArgumentError(
            "--user_tokens_file: a user token equals the worker credential; they must differ");
      }
    }
  }
  const bool tokens = !worker_token.empty();
  const std::string needs =
      flags.has_user_api ? "TLS (--tls_cert, --tls_key, --tls_ca) and tokens (--user_tokens_file, "
                           "--worker_token_file)"
                         : "TLS (--tls_cert, --tls_key, --tls_ca) and the worker credential "
                           "(--worker_token_file)";
  if (absl::Status s = CheckListenSecurity(flags.listen, tls && tokens, flags.insecure, needs);
      !s.ok()) {
    return s;
  }

  ServerSecurity out;
  out.secured = tls && tokens;
  out.unnamed_user_tokens = CountUnnamedTokens(user_tokens);
  out.access =
      std::make_shared<AccessPolicy>(user_tokens, worker_token, /*worker_needs_client_cert=*/tls);
  if (tls) {
    grpc::SslServerCredentialsOptions options(
        flags.has_user_api && !flags.require_client_cert
            ? GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY
            : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    options.pem_root_certs = pem->ca;
    options.pem_key_cert_pairs.push_back({pem->key, pem->cert});
    out.server_credentials = grpc::SslServerCredentials(options);
  } else {
    out.server_credentials = grpc::InsecureServerCredentials();
  }
  absl::StatusOr<std::shared_ptr<ClientCredentials>> outgoing =
      ClientCredentials::Load(flags.tls, worker_token);
  if (!outgoing.ok()) return outgoing.status();
  out.outgoing = *std::move(outgoing);
  return out;
}

std::string OpenHandshakeWarning(const ServerSecurityFlags& flags) {
  if (!flags.has_user_api || !flags.tls.any() || flags.require_client_cert ||
      IsLoopbackAddress(flags.listen)) {
    return "";
  }
  return absl::StrCat(
      flags.program, ": WARNING: peers without a client certificate reach gRPC's HTTP/2 layer "
      "on ", flags.listen, " before any token is checked, and gRPC 1.51 cannot bound an endless "
      "header block from them; pass --require_client_cert or put deploy/nginx/ in front "
      "(README: \"Running on a shared network\")");
}

std::string ClientMetadata(const grpc::ServerContextBase* context, const std::string& key) {
  const auto& metadata = context->client_metadata();
  auto it = metadata.find(key);
  if (it == metadata.end()) return "";
  return std::string(it->second.data(), it->second.size());
}

grpc::Status Authorize(const AccessPolicy* policy, const grpc::ServerContextBase* context, Role role) {
  if (policy == nullptr || !policy->enforced()) return grpc::Status::OK;
  Caller caller;
  caller.authorization = ClientMetadata(context, "authorization");
  std::shared_ptr<const grpc::AuthContext> auth = context->auth_context();
  caller.verified_client_cert = auth != nullptr && auth->IsPeerAuthenticated();
  return ToGrpcStatus(policy->Check(role, caller));
}

grpc::Status AuthenticateUser(const AccessPolicy* policy, const grpc::ServerContextBase* context,
                              Principal* who) {
  if (policy == nullptr || !policy->enforced()) {
    *who = Principal::Unchecked();
    return grpc::Status::OK;
  }
  Caller caller;
  caller.authorization = ClientMetadata(context, "authorization");
  std::shared_ptr<const grpc::AuthContext> auth = context->auth_context();
  caller.verified_client_cert = auth != nullptr && auth->IsPeerAuthenticated();
  absl::StatusOr<Principal> principal = policy->AuthenticateUser(caller);
  if (!principal.ok()) return ToGrpcStatus(principal.status());
  *who = *std::move(principal);
  return grpc::Status::OK;
}

}  // namespace tessera
