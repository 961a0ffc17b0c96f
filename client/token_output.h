// Where `tessera data text` puts its tokens: one token file (as before), or
// a directory of token-file shards that `data.sources` paths read
// (formats/token_shards.h), with a manifest that makes an interrupted run
// resumable.
//
// A directory holds shard-000000.tok, shard-000001.tok, ... and the
// manifest ".manifest.json" (a dot-file, so readers of the shards skip it).
//
// Every file written records where its documents begin (token file version
// 3, client/text_documents.h), counted from the file's own first token.
// Shards begin at document starts: once a shard holds `shard_tokens`
// tokens it closes before the next line that begins a document. The one
// exception keeps shards bounded when documents are long (a whole input
// file is one document by default): a document that by itself has filled
// `shard_tokens` tokens of the shard is split at that line end, and its
// rest begins the next shard, recorded there as a document start (the
// manifest marks such a shard "continues_document"). So no line is split
// between shards, a shard holds at most about twice `shard_tokens` tokens,
// and the layout depends only on the inputs, the tokenizer, the document
// mode and shard_tokens, never on the thread count.
//
// Each shard is written under a ".tmp." name, fsynced and renamed, and only
// then is the manifest rewritten (atomically) to list it with the corpus
// position where the next shard starts and the document state there
// (whether the next line follows a blank one); the last rewrite marks the
// output complete. A crash
// therefore leaves finished shards, perhaps one shard the manifest does not
// list yet, and temporary files; --resume drops the last two and continues
// from the manifest, giving the same files as an uninterrupted run.
#ifndef TESSERA_CLIENT_TOKEN_OUTPUT_H_
#define TESSERA_CLIENT_TOKEN_OUTPUT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/corpus_tokenizer.h"
#include "client/text_documents.h"
#include "client/text_inputs.h"
#include "formats/token_file.h"

namespace tessera {

inline constexpr char kShardManifestName[] = ".manifest.json";
inline constexpr int64_t kDefaultShardTokens = int64_t{1} << 28;

struct TokenOutputOptions {
  std::string path;
  bool directory = false;  // shards and a manifest; else one token file
  int64_t shard_tokens = kDefaultShardTokens;
  TextDocuments documents = TextDocuments::kFiles;  // where documents begin
  bool resume = false;   // continue unfinished output in the directory
  bool restart = false;  // delete earlier output in the directory first
  // Test hook: after this many shards written by this run, stop with
  // ABORTED as if interrupted (0: never).
  int stop_after_shards = 0;
};

class TokenOutputWriter : public EncodedChunkSink {
 public:
  // Prepares the output. For a directory: creates it, or checks what is in
  // it. FAILED_PRECONDITION with what to do for a directory that holds
  // earlier output and neither --resume nor --restart, for --resume
  // with other inputs, tokenizer or shard size than the manifest records,
  // and for files there that are not this output's. --resume with another
  // --documents than the manifest records is refused too.
  static absl::StatusOr<std::unique_ptr<TokenOutputWriter>> Create(
      const TokenOutputOptions& options, const std::vector<TextInput>& inputs,
      const TokenizerInfo& tokenizer);

  // Where tokenizing starts: the corpus start, or after the last shard
  // that a resumed run found finished.
  CorpusPosition start() const { return position_; }
  bool complete() const { return complete_; }

  absl::Status Add(const EncodedChunk& chunk) override;
  // Writes the last shard and the complete manifest, or the token file.
  absl::Status Finish();

  int64_t tokens() const { return tokens_; }            // in the whole output
  int64_t documents() const { return documents_count_; }  // split ones once
  int64_t text_bytes() const { return text_bytes_; }    // plain text in the whole output
  int64_t shards() const { return static_cast<int64_t>(shards_.size()); }
  int64_t resumed_shards() const { return resumed_shards_; }

 private:
  struct Shard {
    std::string name;
    int64_t tokens = 0;
    int64_t text_bytes = 0;
    int64_t documents = 0;           // document starts recorded in the shard
    bool continues_document = false;  // its first document began in the shard before
    CorpusPosition end;               // where the next shard's text starts
    DocumentLineState end_documents;  // the document state there
  };

  TokenOutputWriter(TokenOutputOptions options, const std::vector<TextInput>& inputs,
                    TokenizerInfo tokenizer);
  absl::Status PrepareDirectory();
  absl::Status LoadManifest(const std::string& text);
  // Writes `current_` as the next shard; `end_documents` is the document
  // state where the next shard's text begins.
  absl::Status WriteShard(const DocumentLineState& end_documents);
  absl::Status WriteManifest() const;

  const TokenOutputOptions options_;
  const std::vector<TextInput>& inputs_;
  const TokenizerInfo tokenizer_;

  std::vector<Shard> shards_;
  int64_t resumed_shards_ = 0;
  bool complete_ = false;
  std::vector<uint32_t> current_;  // the shard (or file) being filled
  int64_t current_text_bytes_ = 0;
  std::vector<uint64_t> current_starts_;  // its document starts, from its first token
  bool current_continues_document_ = false;
  DocumentStartRecorder documents_;
  CorpusPosition position_;  // just after the last line added
  int64_t tokens_ = 0;
  int64_t documents_count_ = 0;
  int64_t text_bytes_ = 0;
};

}  // namespace tessera

#endif  // TESSERA_CLIENT_TOKEN_OUTPUT_H_
