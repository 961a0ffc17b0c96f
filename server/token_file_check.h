// Submit-time check of a job's token files against its model: a token file
// records the tokenizer that made it (formats/token_file.h), and a job
// whose model.vocab_size is smaller than that tokenizer's vocabulary would
// meet ids its embedding has no row for, so it is refused before it is
// queued instead of failing on every worker.
//
// Only the headers are read. The token files of a job's sources
// (data.sources and data.validation.sources) must also all come from one
// tokenizer: a mixture of a byte-level and a SentencePiece source would
// feed the model ids that mean different text.
//
// With data.document_masking every one of those files must record its
// document starts (version 3 with a document index).
//
// Only the header is read. A file the coordinator cannot open or parse, or
// one that records no tokenizer (version 1 files), is left to the workers,
// which open every token file at setup and fail the job with the reason:
// the coordinator may not see the same filesystem as the workers.
#ifndef TESSERA_SERVER_TOKEN_FILE_CHECK_H_
#define TESSERA_SERVER_TOKEN_FILE_CHECK_H_

#include "absl/status/status.h"
#include "proto/tessera/v1/job.pb.h"

namespace tessera {

// Checks data.token_file, data.validation.token_file and every token file
// of every source in data.sources and data.validation.sources (a
// directory's shards as formats/token_shards.h lists them).
// INVALID_ARGUMENT naming model.vocab_size, the field (e.g.
// "data.sources[2]") and the file when the vocabulary is too small; naming
// the field and both files when two source files record different
// tokenizers; naming data.document_masking, the field and the file when
// masking is asked for and the file has no document index.
absl::Status CheckTokenFilesFitVocab(const v1::JobSpec& spec);

}  // namespace tessera

#endif  // TESSERA_SERVER_TOKEN_FILE_CHECK_H_
