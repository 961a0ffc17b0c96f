// Bounded text for stored messages (see request_limits.h).
#include "server/request_limits.h"

#include "absl/strings/str_cat.h"

namespace tessera {

std::string TruncateUtf8(absl::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  constexpr absl::string_view kMark = " [truncated]";
  size_t keep = max_bytes > kMark.size() ? max_bytes - kMark.size() : 0;
  // Back off over continuation bytes (10xxxxxx) to the start of a character.
  while (keep > 0 && (static_cast<unsigned char>(text[keep]) & 0xC0) == 0x80) --keep;
  return absl::StrCat(text.substr(0, keep), kMark.substr(0, max_bytes - keep));
}

}  // namespace tessera
