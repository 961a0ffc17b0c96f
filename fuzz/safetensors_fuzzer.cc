// Fuzzes the safetensors reader (formats/safetensors_reader.h), which
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

#include "formats/safetensors_reader.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/scratch_file.h"


extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = MakeScratchDir("safetensors-fuzz") + "/input.safetensors";
  WriteScratchFile(path, data, size);

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
