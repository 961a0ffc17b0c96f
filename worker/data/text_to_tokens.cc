// Text files to a byte-level token file (see text_to_tokens.h).
#include "worker/data/text_to_tokens.h"

#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "worker/data/token_file.h"

namespace tessera {

absl::Status BuildByteTokenFileFromText(const std::vector<std::string>& text_paths,
                                        const std::string& out_path) {
  std::vector<uint32_t> tokens;
  for (const std::string& path : text_paths) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read text file ", path));
    for (auto it = std::istreambuf_iterator<char>(in); it != std::istreambuf_iterator<char>(); ++it) {
      tokens.push_back(static_cast<uint8_t>(*it));
    }
  }
  return WriteTokenFile(out_path, tokens);
}

}  // namespace tessera
