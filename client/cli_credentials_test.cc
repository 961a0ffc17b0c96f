#include "client/cli_credentials.h"

#include <cstdlib>
#include <fstream>
#include <map>

#include "gtest/gtest.h"

namespace tessera {
namespace {

EnvLookup Env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

ParsedArgs Args(std::map<std::string, std::string> flags) {
  ParsedArgs args;
  args.command = "jobs";
  args.flags = std::move(flags);
  return args;
}

std::string TokenFile(const std::string& text) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/token";
  std::ofstream(path) << text;
  return path;
}

TEST(CliCredentialsTest, TokenFromFileFlagBeatsEnvironment) {
  const std::string path = TokenFile("file-token-0123456789\n");
  absl::StatusOr<ClientOptions> o = CliClientOptions(
      Args({{"token_file", path}}), Env({{"TESSERA_TOKEN", "env-token-0123456789"}}));
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->token, "file-token-0123456789");
}

TEST(CliCredentialsTest, TokenFromEnvironmentFileOrValue) {
  const std::string path = TokenFile("file-token-0123456789\n");
  EXPECT_EQ(CliClientOptions(Args({}), Env({{"TESSERA_TOKEN_FILE", path}}))->token,
            "file-token-0123456789");
  EXPECT_EQ(CliClientOptions(Args({}), Env({{"TESSERA_TOKEN", "env-token-0123456789"}}))->token,
            "env-token-0123456789");
  EXPECT_EQ(CliClientOptions(Args({}), Env({}))->token, "");
}

TEST(CliCredentialsTest, BadTokenSourcesNameTheirOrigin) {
  absl::StatusOr<ClientOptions> missing =
      CliClientOptions(Args({{"token_file", "/nonexistent/token"}}), Env({}));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("--token_file"), std::string::npos);
  absl::StatusOr<ClientOptions> short_env =
      CliClientOptions(Args({}), Env({{"TESSERA_TOKEN", "short"}}));
  EXPECT_NE(short_env.status().message().find("TESSERA_TOKEN"), std::string::npos);
}

TEST(CliCredentialsTest, TlsFilesFromFlagsOrEnvironment) {
  absl::StatusOr<ClientOptions> o =
      CliClientOptions(Args({{"tls_ca", "/ca.pem"}}),
                       Env({{"TESSERA_TLS_CERT", "/c.pem"}, {"TESSERA_TLS_KEY", "/k"}}));
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->tls_ca_file, "/ca.pem");
  EXPECT_EQ(o->tls_cert_file, "/c.pem");
  EXPECT_EQ(o->tls_key_file, "/k");
}

}  // namespace
}  // namespace tessera
