// Tokenizing a corpus on every core. One thread reads the inputs in order
// and cuts their text into chunks of whole lines; worker threads encode the
// chunks line by line (a line keeps its newline); the calling thread hands
// the encoded chunks, in input order, to a sink that writes them.
//
// The ids depend only on the text, never on the thread count or on where
// chunks are cut: every line is encoded on its own, and lines are defined
// by the text alone (a "line" with no newline within kMaxLineBytes of its
// start ends there, so binary junk cannot make a reader buffer without
// bound). Each chunk belongs to one input and says where in it it starts,
// so a sink can cut shards at line ends, record where to resume, and find
// document boundaries: where every input begins, and which lines are blank.
#ifndef TESSERA_CLIENT_CORPUS_TOKENIZER_H_
#define TESSERA_CLIENT_CORPUS_TOKENIZER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "client/text_documents.h"
#include "client/text_inputs.h"
#include "formats/token_file.h"

namespace tessera {

inline constexpr int64_t kMaxLineBytes = 64 << 20;

// Turns one line into ids. EncodeLine is called from several threads at once.
class LineEncoder {
 public:
  virtual ~LineEncoder() = default;
  virtual const TokenizerInfo& info() const = 0;
  // Appends the line's ids. INVALID_ARGUMENT with the reason when the line
  // cannot be encoded faithfully (the caller adds input and line number).
  virtual absl::Status EncodeLine(absl::string_view line, std::vector<uint32_t>* ids) const = 0;
};

// One id per byte, vocabulary 256.
class ByteLineEncoder : public LineEncoder {
 public:
  const TokenizerInfo& info() const override { return info_; }
  absl::Status EncodeLine(absl::string_view line, std::vector<uint32_t>* ids) const override;

 private:
  TokenizerInfo info_ = TokenizerInfo::Byte();
};

// Where the corpus continues: the line that starts at byte `offset` of
// input `input`'s plain text. {inputs.size(), 0} is the end.
struct CorpusPosition {
  int64_t input = 0;
  int64_t offset = 0;
  bool operator==(const CorpusPosition& o) const {
    return input == o.input && offset == o.offset;
  }
};

// Whole lines of one input, encoded.
struct EncodedChunk {
  int64_t input = 0;          // index into the input list
  int64_t start_offset = 0;   // plain-text byte where the first line starts
  bool starts_input = false;  // the first line is the input's first
  bool ends_input = false;    // the last line is the input's last
  std::vector<uint32_t> ids;
  std::vector<int64_t> line_token_ends;  // ids.size() after each line
  std::vector<int64_t> line_byte_ends;   // bytes from start_offset after each line
  std::vector<bool> line_blank;          // IsBlankLine of each line (client/text_documents.h)
  int64_t disk_bytes_done = 0;  // stored bytes of all inputs read through this chunk
};

// Receives the chunks in corpus order, on the thread that called
// TokenizeCorpus. An error stops the run and is returned.
class EncodedChunkSink {
 public:
  virtual ~EncodedChunkSink() = default;
  virtual absl::Status Add(const EncodedChunk& chunk) = 0;
};

struct CorpusTokenizerOptions {
  int threads = 1;                // encoding threads
  int64_t chunk_bytes = 1 << 20;  // plain text per chunk (whole lines; a chunk may be longer)
  CorpusPosition start;           // where to begin (resuming)
};

// Encodes the inputs from options.start on and hands every chunk to
// `sink`. Errors name the input (and line, for text that cannot be
// encoded); the first error in corpus order is returned.
absl::Status TokenizeCorpus(const std::vector<TextInput>& inputs, const LineEncoder& encoder,
                            const CorpusTokenizerOptions& options, EncodedChunkSink* sink);

// The cores this process may run on (at least 1).
int AvailableCores();

}  // namespace tessera

#endif  // TESSERA_CLIENT_CORPUS_TOKENIZER_H_
