// Fuzzes the token-file reader (formats/token_file.h): the input is
// written to a file and memory-mapped by TokenFile::Open. A malformed file
// must be INVALID_ARGUMENT, never a crash or a read past the mapping; an
// accepted one must hold exactly its header's count of tokens, every one
// readable, and max_token() must be their maximum.
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "formats/token_file.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/scratch_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = MakeScratchDir("token-fuzz") + "/input.tok";
  WriteScratchFile(path, data, size);

  absl::StatusOr<std::unique_ptr<tessera::TokenFile>> file = tessera::TokenFile::Open(path);
  if (!file.ok()) {
    FUZZ_CHECK(file.status().code() == absl::StatusCode::kInvalidArgument,
               "a malformed token file was refused with a code other than INVALID_ARGUMENT");
    return 0;
  }
  const int64_t count = (*file)->size();
  FUZZ_CHECK(count >= 0, "negative token count");
  FUZZ_CHECK(static_cast<uint64_t>(count) <= size, "more tokens than bytes in the file");
  uint32_t max_token = 0;
  for (int64_t i = 0; i < count; ++i) max_token = std::max(max_token, (*file)->Token(i));
  FUZZ_CHECK(max_token == (*file)->max_token(), "max_token() is not the largest token");
  return 0;
}
