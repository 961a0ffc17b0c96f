// Text files to a byte-level token file (see text_to_tokens.h). Each file is
// read line by line (documents may end at blank lines); every byte becomes
// one token, so the vocabulary is [0, 256) whatever the encoding of the text.
#include "client/text_to_tokens.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "formats/token_file.h"

namespace tessera {

absl::Status BuildByteTokenFileFromText(const std::vector<std::string>& text_paths,
                                        const std::string& out_path, TextDocuments documents) {
  std::vector<uint32_t> tokens;
  DocumentStartRecorder starts(documents);
  std::string line;
  for (const std::string& path : text_paths) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read text file ", path));
    starts.BeginFile();
    while (std::getline(in, line)) {
      if (!in.eof()) line.push_back('\n');  // the last line may have none
      starts.AddLine(line, tokens.size(), line.size());
      for (char c : line) tokens.push_back(static_cast<uint8_t>(c));
    }
    if (in.bad()) return absl::DataLossError(absl::StrCat("reading text file ", path, " failed"));
  }
  return WriteTokenFile(out_path, tokens, TokenizerInfo::Byte(),
                        absl::MakeConstSpan(starts.starts()));
}

}  // namespace tessera
