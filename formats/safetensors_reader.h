// Reads tensors out of a safetensors file (the format Hugging Face models
// ship in) without loading the file: the JSON header is parsed and checked
// once at Open, and each read is a positioned read of just the elements
// asked for, converted to fp32. A rank that owns a slice of a parameter
// reads only that slice.
//
// The format: an 8-byte little-endian header length, a JSON object mapping
// each tensor name to {dtype, shape, data_offsets: [begin, end)} (offsets
// into the data after the header) plus an optional "__metadata__" object,
// then the data, every tensor row-major and little-endian.
//
// Everything in the header is input from outside: Open refuses, with
// INVALID_ARGUMENT naming the file and the tensor, a header longer than
// 100 MiB (the format's own limit), one that is not a JSON object, an entry
// without a known dtype or with a negative, overflowing or more than
// 8-dimensional shape, and data
// offsets whose size disagrees with the shape or that reach past the end of
// the file, and anything but a regular file (never waiting on a FIFO). A
// file that cannot be opened is NOT_FOUND or PERMISSION_DENIED.
#ifndef TESSERA_FORMATS_SAFETENSORS_READER_H_
#define TESSERA_FORMATS_SAFETENSORS_READER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tessera {

// The element types Tessera reads (what Llama checkpoints are stored in).
enum class SafetensorsDType { kFloat32, kBFloat16, kFloat16 };

struct SafetensorsTensor {
  SafetensorsDType dtype = SafetensorsDType::kFloat32;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  int64_t data_begin = 0;  // absolute file offset of the first element
};

class SafetensorsReader {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsReader>> Open(const std::string& path);
  // Parses `header_json` as the header of a file of `file_bytes` bytes whose
  // data starts at `data_start`; the checks Open makes, for a caller (the
  // fuzzer) that has only the header.
  static absl::StatusOr<std::map<std::string, SafetensorsTensor>> ParseHeader(
      const std::string& what, const std::string& header_json, int64_t data_start,
      int64_t file_bytes);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, SafetensorsTensor>& tensors() const { return tensors_; }

  // Elements [first, first + count) of tensor `name` (flattened row-major)
  // as fp32 into out[0, count). NOT_FOUND for an unknown name,
  // OUT_OF_RANGE for a range outside the tensor, DATA_LOSS when the file
  // has shrunk since Open.
  absl::Status ReadAsFloat(const std::string& name, int64_t first, int64_t count,
                           float* out) const;

 private:
  SafetensorsReader() = default;
  std::string path_;
  int fd_ = -1;
  std::map<std::string, SafetensorsTensor> tensors_;
};

// Bytes per element of `dtype`.
int SafetensorsElementBytes(SafetensorsDType dtype);

}  // namespace tessera

#endif  // TESSERA_FORMATS_SAFETENSORS_READER_H_
