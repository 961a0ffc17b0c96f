// Text files to a byte-level token file (see text_to_tokens.h). Each file is
// read in fixed-size chunks; every byte becomes one token, so the vocabulary
// is [0, 256) whatever the encoding of the text.
#include "client/text_to_tokens.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "formats/token_file.h"

namespace tessera {

absl::Status BuildByteTokenFileFromText(const std::vector<std::string>& text_paths,
                                        const std::string& out_path) {
  std::vector<uint32_t> tokens;
  char chunk[1 << 16];
  for (const std::string& path : text_paths) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read text file ", path));
    while (in.read(chunk, sizeof(chunk)) || in.gcount() > 0) {
      for (std::streamsize i = 0; i < in.gcount(); ++i) {
        tokens.push_back(static_cast<uint8_t>(chunk[i]));
      }
    }
    if (in.bad()) return absl::DataLossError(absl::StrCat("reading text file ", path, " failed"));
  }
  return WriteTokenFile(out_path, tokens, TokenizerInfo::Byte());
}

}  // namespace tessera
