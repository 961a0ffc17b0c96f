// Text files to a SentencePiece token file (see sentencepiece_text.h). One
// line at a time, which bounds the encoder's working memory by the longest
// line, and each line is decoded again and compared, so a line the model
// cannot reproduce (invalid UTF-8) stops the run instead of being altered.
#include "client/sentencepiece_text.h"

#include <atomic>
#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "client/sentencepiece_tokenizer.h"
#include "client/space_segments.h"
#include "formats/token_file.h"

namespace tessera {

absl::StatusOr<int64_t> BuildSentencePieceTokenFileFromText(
    const std::vector<std::string>& text_paths, const std::string& model_path,
    const std::string& out_path, TextDocuments documents) {
  absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> tokenizer =
      SentencePieceTokenizer::Load(model_path);
  if (!tokenizer.ok()) return tokenizer.status();
  std::vector<uint32_t> tokens;
  DocumentStartRecorder starts(documents);
  for (const std::string& path : text_paths) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read text file ", path));
    starts.BeginFile();
    std::string line;
    for (int64_t number = 1; std::getline(in, line); ++number) {
      if (!in.eof()) line.push_back('\n');  // the last line may have none
      absl::StatusOr<std::vector<uint32_t>> ids = (*tokenizer)->Encode(line);
      if (!ids.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ":", number, ": ", ids.status().message()));
      }
      absl::StatusOr<std::string> back = (*tokenizer)->Decode(*ids);
      if (!back.ok() || *back != line) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ":", number, ": this line does not survive encoding and decoding unchanged "
            "(is the file valid UTF-8?)"));
      }
      starts.AddLine(line, tokens.size(), ids->size());
      tokens.insert(tokens.end(), ids->begin(), ids->end());
    }
    if (in.bad()) return absl::DataLossError(absl::StrCat("reading text file ", path, " failed"));
  }
  if (absl::Status s = WriteTokenFile(out_path, tokens, (*tokenizer)->info(),
                                      absl::MakeConstSpan(starts.starts())); !s.ok()) return s;
  return static_cast<int64_t>(tokens.size());
}

}  // namespace tessera

namespace tessera {

absl::StatusOr<std::unique_ptr<SentencePieceLineEncoder>> SentencePieceLineEncoder::Load(
    const std::string& model_path) {
  absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> tokenizer =
      SentencePieceTokenizer::Load(model_path);
  if (!tokenizer.ok()) return tokenizer.status();
  return std::unique_ptr<SentencePieceLineEncoder>(
      new SentencePieceLineEncoder(*std::move(tokenizer)));
}

SentencePieceLineEncoder::SentencePieceLineEncoder(
    std::unique_ptr<SentencePieceTokenizer> tokenizer)
    : tokenizer_(std::move(tokenizer)) {
  static std::atomic<uint64_t> encoders{0};
  cache_owner_ = ++encoders;
  by_segment_ = PiecesStayWithinSpaceSegments(tokenizer_->Pieces());
}

absl::Status SentencePieceLineEncoder::EncodeWhole(absl::string_view text,
                                                   std::vector<uint32_t>* ids) const {
  absl::StatusOr<std::vector<uint32_t>> encoded = tokenizer_->Encode(text);
  if (!encoded.ok()) return absl::InvalidArgumentError(encoded.status().message());
  ids->insert(ids->end(), encoded->begin(), encoded->end());
  return absl::OkStatus();
}

absl::Status SentencePieceLineEncoder::EncodeBySegment(absl::string_view line,
                                                       std::vector<uint32_t>* ids) const {
  thread_local SegmentIdCache cache;
  if (cache.owner() != cache_owner_) cache.Reset(cache_owner_);
  absl::Status status;
  ForEachSpaceSegment(line, [&](absl::string_view segment) {
    if (!status.ok() || cache.Append(segment, ids)) return;
    const size_t first = ids->size();
    status = EncodeWhole(segment, ids);
    if (status.ok()) cache.Keep(segment, *ids, first);
  });
  return status;
}

bool SentencePieceLineEncoder::MayChangeInEncoding(absl::string_view line) {
  const auto* p = reinterpret_cast<const unsigned char*>(line.data());
  const auto* end = p + line.size();
  while (p < end) {
    if (*p < 0x80) {  // ASCII: only NUL is suspect
      if (*p == 0) return true;
      ++p;
      continue;
    }
    int length = 0;
    uint32_t code = 0;
    if ((*p & 0xe0) == 0xc0) {
      length = 2, code = *p & 0x1f;
    } else if ((*p & 0xf0) == 0xe0) {
      length = 3, code = *p & 0x0f;
    } else if ((*p & 0xf8) == 0xf0) {
      length = 4, code = *p & 0x07;
    } else {
      return true;  // a continuation byte, or 0xf8 and above
    }
    if (end - p < length) return true;
    for (int i = 1; i < length; ++i) {
      if ((p[i] & 0xc0) != 0x80) return true;
      code = (code << 6) | (p[i] & 0x3f);
    }
    static constexpr uint32_t kSmallest[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (code < kSmallest[length] || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) {
      return true;  // overlong, beyond Unicode, or a surrogate
    }
    if (code == 0x2581) return true;  // the library's own whitespace mark
    p += length;
  }
  return false;
}

absl::Status SentencePieceLineEncoder::EncodeLine(absl::string_view line,
                                                  std::vector<uint32_t>* ids) const {
  const size_t first = ids->size();
  absl::Status encoded = by_segment_ ? EncodeBySegment(line, ids) : EncodeWhole(line, ids);
  if (!encoded.ok()) return encoded;
  if (!MayChangeInEncoding(line)) return absl::OkStatus();
  absl::StatusOr<std::string> back =
      tokenizer_->Decode(absl::MakeConstSpan(ids->data() + first, ids->size() - first));
  if (!back.ok() || *back != line) {
    ids->resize(first);
    return absl::InvalidArgumentError(
        "this line does not survive encoding and decoding unchanged (is the file valid UTF-8?)");
  }
  return absl::OkStatus();
}

}  // namespace tessera
