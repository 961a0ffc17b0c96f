// SHA-256 over OpenSSL's EVP digest interface (see sha256.h). EVP calls on a
// valid context with SHA-256 only fail on allocation failure, which is a
// programmer-visible invariant here, so failures abort rather than thread a
// Status through every Update.
#include "common/sha256.h"

#include <openssl/evp.h>

#include <cstdlib>

namespace tessera {

struct Sha256::State {
  EVP_MD_CTX* ctx = nullptr;
};

namespace {

void CheckEvp(int ok) {
  if (ok != 1) std::abort();  // only on allocation failure inside libcrypto
}

void Reset(EVP_MD_CTX* ctx) { CheckEvp(EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr)); }

}  // namespace

Sha256::Sha256() : state_(std::make_unique<State>()) {
  state_->ctx = EVP_MD_CTX_new();
  if (state_->ctx == nullptr) std::abort();
  Reset(state_->ctx);
}

Sha256::~Sha256() {
  if (state_ != nullptr) EVP_MD_CTX_free(state_->ctx);
}

Sha256::Sha256(Sha256&&) noexcept = default;

Sha256& Sha256::operator=(Sha256&& other) noexcept {
  if (this != &other) {
    if (state_ != nullptr) EVP_MD_CTX_free(state_->ctx);
    state_ = std::move(other.state_);
  }
  return *this;
}

void Sha256::Update(const void* data, size_t size) {
  if (size == 0) return;
  CheckEvp(EVP_DigestUpdate(state_->ctx, data, size));
}

std::string Sha256::HexDigest() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  CheckEvp(EVP_DigestFinal_ex(state_->ctx, digest, &length));
  Reset(state_->ctx);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex(2 * length, '0');
  for (unsigned int i = 0; i < length; ++i) {
    hex[2 * i] = kHex[digest[i] >> 4];
    hex[2 * i + 1] = kHex[digest[i] & 0xf];
  }
  return hex;
}

std::string Sha256Hex(absl::string_view data) {
  Sha256 hasher;
  hasher.Update(data);
  return hasher.HexDigest();
}

}  // namespace tessera
