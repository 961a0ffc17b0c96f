// SHA-256 digests for checkpoint manifests and the job spec hash. This is the
// one file that talks to OpenSSL's libcrypto (Debian's libssl-dev), so the
// rest of Tessera never includes an OpenSSL header. A digest is always
// rendered as 64 lowercase hex characters, the form manifests store.
#ifndef TESSERA_COMMON_SHA256_H_
#define TESSERA_COMMON_SHA256_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"

namespace tessera {

// Incremental hashing of a stream too large to hold at once (a rank's
// checkpoint file is written, and read back, in pieces).
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;

  void Update(const void* data, size_t size);
  void Update(absl::string_view data) { Update(data.data(), data.size()); }
  // The digest of everything passed to Update so far, as 64 hex characters.
  // The hasher is then reset to its empty state.
  std::string HexDigest();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// One-shot convenience.
std::string Sha256Hex(absl::string_view data);

}  // namespace tessera

#endif  // TESSERA_COMMON_SHA256_H_
