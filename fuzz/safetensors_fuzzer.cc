// Fuzzes the safetensors reader (worker/trainer/safetensors_reader.h), which
// reads Hugging Face weight files a job names (model.init_from), on the
// coordinator at submit time as well as on the workers. The input is
// written to a file and opened. A malformed file must be INVALID_ARGUMENT,
// never a crash or a read outside the file; an accepted one must let every
// tensor it lists be read whole, each inside the file.
#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "worker/trainer/safetensors_reader.h"

namespace {

// One scratch file per fuzzing process, rewritten for every input.
const std::string& ScratchPath() {
  static const std::string* path = [] {
    const char* base = getenv("TEST_TMPDIR");
    std::string pattern = std::string(base != nullptr ? base : "/tmp") + "/safetensors-fuzz-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) std::abort();
    return new std::string(pattern + "/input.safetensors");
  }();
  return *path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = ScratchPath();
  FILE* f = std::fopen(path.c_str(), "wb");
  FUZZ_CHECK(f != nullptr, "cannot write the scratch file");
  FUZZ_CHECK(std::fwrite(data, 1, size, f) == size, "short write of the scratch file");
  FUZZ_CHECK(std::fclose(f) == 0, "cannot close the scratch file");

  absl::StatusOr<std::unique_ptr<tessera::SafetensorsReader>> reader =
      tessera::SafetensorsReader::Open(path);
  if (!reader.ok()) {
    FUZZ_CHECK(reader.status().code() == absl::StatusCode::kInvalidArgument,
               "a malformed file was refused with a code other than INVALID_ARGUMENT");
    return 0;
  }
  std::vector<float> values;
  for (const auto& [name, tensor] : (*reader)->tensors()) {
    const int64_t bytes = tensor.numel * tessera::SafetensorsElementBytes(tensor.dtype);
    FUZZ_CHECK(tensor.data_begin >= 8 && tensor.data_begin + bytes <= static_cast<int64_t>(size),
               "an accepted tensor lies outside the file");
    values.resize(static_cast<size_t>(tensor.numel));
    FUZZ_CHECK((*reader)->ReadAsFloat(name, 0, tensor.numel, values.data()).ok(),
               "an accepted tensor cannot be read");
  }
  return 0;
}
