// See safetensors_reader.h.
#include "formats/safetensors_reader.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/regular_file.h"
#include "nlohmann/json.hpp"

namespace tessera {
namespace {

constexpr int64_t kMaxHeaderBytes = int64_t{100} << 20;
// Dimensions a tensor may have (model weights have one or two).
constexpr size_t kMaxRank = 8;
// Elements converted per positioned read.
constexpr int64_t kReadChunkElements = int64_t{1} << 20;

absl::Status Bad(const std::string& what, const std::string& reason) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", reason));
}

// Reads exactly `n` bytes at `offset`; false on a short read or error.
bool ReadAt(int fd, int64_t offset, void* out, int64_t n) {
  char* p = static_cast<char*>(out);
  while (n > 0) {
    const ssize_t got = pread(fd, p, static_cast<size_t>(n), static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    offset += got;
    n -= got;
  }
  return true;
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const int exponent = (h >> 10) & 0x1F;
  const uint32_t mantissa = h & 0x3FF;
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);  // zero or subnormal
  } else if (exponent == 31) {
    magnitude = mantissa == 0 ? std::numeric_limits<float>::infinity()
                              : std::numeric_limits<float>::quiet_NaN();
  } else {
    magnitude = std::ldexp(static_cast<float>(mantissa | 0x400), exponent - 25);
  }
  uint32_t bits;
  std::memcpy(&bits, &magnitude, 4);
  bits |= sign;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

}  // namespace

int SafetensorsElementBytes(SafetensorsDType dtype) {
  return dtype == SafetensorsDType::kFloat32 ? 4 : 2;
}

absl::StatusOr<std::map<std::string, SafetensorsTensor>> SafetensorsReader::ParseHeader(
    const std::string& what, const std::string& header_json, int64_t data_start,
    int64_t file_bytes) {
  const nlohmann::json header =
      nlohmann::json::parse(header_json, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return Bad(what, "the header is not a JSON object (not a safetensors file?)");
  }
  std::map<std::string, SafetensorsTensor> tensors;
  const int64_t data_bytes = file_bytes - data_start;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") continue;
    // Names come from the file: quoted at most 120 bytes long.
    const std::string where = absl::StrCat(
        what, ": tensor ", name.size() <= 120 ? name : name.substr(0, 117) + "...");
    const nlohmann::json& entry = it.value();
    if (!entry.is_object()) return Bad(where, "its entry is not an object");
    auto dtype = entry.find("dtype");
    auto shape = entry.find("shape");
    auto offsets = entry.find("data_offsets");
    if (dtype == entry.end() || !dtype->is_string() || shape == entry.end() ||
        !shape->is_array() || offsets == entry.end() || !offsets->is_array() ||
        offsets->size() != 2) {
      return Bad(where, "needs a dtype string, a shape array and two data_offsets");
    }
    if (shape->size() > kMaxRank) {
      return Bad(where, absl::StrCat("its shape has ", shape->size(), " dimensions, more than ",
                                     kMaxRank));
    }
    SafetensorsTensor t;
    std::string dtype_name = dtype->get<std::string>();
    if (dtype_name.size() > 16) dtype_name = dtype_name.substr(0, 16) + "...";
    if (dtype_name == "F32") {
      t.dtype = SafetensorsDType::kFloat32;
    } else if (dtype_name == "BF16") {
      t.dtype = SafetensorsDType::kBFloat16;
    } else if (dtype_name == "F16") {
      t.dtype = SafetensorsDType::kFloat16;
    } else {
      return Bad(where, absl::StrCat("dtype ", dtype_name, " is not F32, BF16 or F16"));
    }
    const int64_t bytes_per = SafetensorsElementBytes(t.dtype);
    t.numel = 1;
    for (const nlohmann::json& dim : *shape) {
      if (!dim.is_number_unsigned()) return Bad(where, "a shape dimension is not a count");
      const uint64_t d = dim.get<uint64_t>();
      if (d != 0 && static_cast<uint64_t>(t.numel) > (uint64_t{1} << 60) / bytes_per / d) {
        return Bad(where, "its shape holds more elements than any file could");
      }
      t.numel *= static_cast<int64_t>(d);
      t.shape.push_back(static_cast<int64_t>(d));
    }
    if (!(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
      return Bad(where, "data_offsets are not byte counts");
    }
    const uint64_t begin = (*offsets)[0].get<uint64_t>(), end = (*offsets)[1].get<uint64_t>();
    if (begin > end || end > static_cast<uint64_t>(std::max<int64_t>(data_bytes, 0))) {
      return Bad(where, absl::StrCat("data_offsets [", begin, ", ", end,
                                     ") are not inside the file's ", data_bytes, " data bytes"));
    }
    if (end - begin != static_cast<uint64_t>(t.numel * bytes_per)) {
      return Bad(where, absl::StrCat("data_offsets hold ", end - begin, " bytes, its shape needs ",
                                     t.numel * bytes_per));
    }
    t.data_begin = data_start + static_cast<int64_t>(begin);
    tensors.emplace(name, std::move(t));
  }
  return tensors;
}

absl::StatusOr<std::unique_ptr<SafetensorsReader>> SafetensorsReader::Open(
    const std::string& path) {
  std::unique_ptr<SafetensorsReader> reader(new SafetensorsReader());
  reader->path_ = path;
  absl::StatusOr<int> fd = OpenRegularFile(path, Symlinks::kFollow);  // never waits on a FIFO
  if (!fd.ok()) return fd.status();
  reader->fd_ = *fd;
  struct stat st;
  if (fstat(reader->fd_, &st) != 0) return Bad(path, "cannot be read");
  const int64_t file_bytes = st.st_size;
  unsigned char length_bytes[8];
  if (file_bytes < 8 || !ReadAt(reader->fd_, 0, length_bytes, 8)) {
    return Bad(path, "shorter than a safetensors header");
  }
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | length_bytes[i];
  if (header_bytes > static_cast<uint64_t>(kMaxHeaderBytes) ||
      static_cast<int64_t>(header_bytes) > file_bytes - 8) {
    return Bad(path, absl::StrCat("its header length ", header_bytes,
                                  " exceeds the file or the format's 100 MiB limit"));
  }
  std::string header(header_bytes, '\0');
  if (!ReadAt(reader->fd_, 8, header.data(), static_cast<int64_t>(header_bytes))) {
    return Bad(path, "cannot read its header");
  }
  auto tensors = ParseHeader(path, header, 8 + static_cast<int64_t>(header_bytes), file_bytes);
  if (!tensors.ok()) return tensors.status();
  reader->tensors_ = std::move(*tensors);
  return reader;
}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0) close(fd_);
}

absl::Status SafetensorsReader::ReadAsFloat(const std::string& name, int64_t first, int64_t count,
                                            float* out) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return absl::NotFoundError(absl::StrCat(path_, ": no tensor ", name));
  const SafetensorsTensor& t = it->second;
  if (first < 0 || count < 0 || first > t.numel || count > t.numel - first) {
    return absl::OutOfRangeError(absl::StrCat(path_, ": elements [", first, ", ", first + count,
                                              ") of ", name, ", which has ", t.numel));
  }
  const int bytes_per = SafetensorsElementBytes(t.dtype);
  std::vector<uint16_t> halves;
  for (int64_t done = 0; done < count;) {
    const int64_t n = std::min(kReadChunkElements, count - done);
    const int64_t offset = t.data_begin + (first + done) * bytes_per;
    bool ok;
    if (t.dtype == SafetensorsDType::kFloat32) {
      ok = ReadAt(fd_, offset, out + done, n * 4);  // little-endian host
    } else {
      halves.resize(static_cast<size_t>(n));
      ok = ReadAt(fd_, offset, halves.data(), n * 2);
      if (ok && t.dtype == SafetensorsDType::kBFloat16) {
        for (int64_t i = 0; i < n; ++i) {
          const uint32_t bits = static_cast<uint32_t>(halves[i]) << 16;
          std::memcpy(out + done + i, &bits, 4);
        }
      } else if (ok) {
        for (int64_t i = 0; i < n; ++i) out[done + i] = HalfToFloat(halves[i]);
      }
    }
    if (!ok) {
      return absl::DataLossError(
          absl::StrCat(path_, ": cannot read ", name, " (the file is shorter than its header says)"));
    }
    done += n;
  }
  return absl::OkStatus();
}

}  // namespace tessera
