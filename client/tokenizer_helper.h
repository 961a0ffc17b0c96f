// Runs tessera-sentencepiece (client/tessera_sentencepiece_main.cc), the
// child process that trains and applies SentencePiece models for
// `tessera data`; that library cannot share a process with the CLI's
// protobuf. The helper is looked for next to the running program first
// (where Bazel and the deploy bundle put it), then on PATH.
#ifndef TESSERA_CLIENT_TOKENIZER_HELPER_H_
#define TESSERA_CLIENT_TOKENIZER_HELPER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera {

inline constexpr char kTokenizerHelperName[] = "tessera-sentencepiece";

struct HelperResult {
  int exit_code = 0;
  std::string output;  // its stdout and stderr, interleaved as written
};

// Where the helper's standard error goes: into HelperResult::output with its
// standard output, or straight to ours (for a progress bar that must see the
// terminal, and messages that must appear while it runs).
enum class HelperStderr { kCollect, kPassThrough };

// NOT_FOUND if the helper cannot be started; otherwise its exit code and
// output, whatever the exit code. Standard input is passed to it.
absl::StatusOr<HelperResult> RunTokenizerHelper(const std::vector<std::string>& args,
                                                HelperStderr stderr_mode = HelperStderr::kCollect);

}  // namespace tessera

#endif  // TESSERA_CLIENT_TOKENIZER_HELPER_H_
