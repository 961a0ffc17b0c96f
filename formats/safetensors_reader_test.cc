// The safetensors reader on files written here byte by byte: F32, BF16 and
// F16 tensors read whole and in element ranges, and every malformed header
// refused with INVALID_ARGUMENT naming the file and tensor.
#include "formats/safetensors_reader.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tessera {
namespace {

std::string TempPath(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

// Header length, header (padded to 8 bytes) and data.
std::string File(std::string header, const std::string& data) {
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + header + data;
}

std::string Write(const std::string& name, const std::string& bytes) {
  const std::string path = TempPath(name);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  return path;
}

template <typename T>
std::string Bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

TEST(SafetensorsReader, ReadsEachDTypeWholeAndInRanges) {
  const std::vector<float> f32 = {1.5f, -2.25f, 3.0f, 1e-20f, -0.0f, 7.0f};
  // bf16: 1.0, -3.5, 0.015625; f16: 1.0, -2.0, 65504 (max), 2^-24 (smallest subnormal).
  const std::vector<uint16_t> bf16 = {0x3F80, 0xC060, 0x3C80};
  const std::vector<uint16_t> f16 = {0x3C00, 0xC000, 0x7BFF, 0x0001};
  const std::string header =
      R"({"__metadata__":{"format":"pt"},)"
      R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
      R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[24,30]},)"
      R"("c":{"dtype":"F16","shape":[2,2],"data_offsets":[30,38]}})";
  const std::string path = Write("ok.safetensors", File(header, Bytes(f32) + Bytes(bf16) + Bytes(f16)));
  auto reader = SafetensorsReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_EQ((*reader)->tensors().size(), 3u);
  EXPECT_EQ((*reader)->tensors().at("a").shape, (std::vector<int64_t>{2, 3}));

  std::vector<float> out(6);
  ASSERT_TRUE((*reader)->ReadAsFloat("a", 0, 6, out.data()).ok());
  EXPECT_EQ(std::memcmp(out.data(), f32.data(), 24), 0);
  ASSERT_TRUE((*reader)->ReadAsFloat("a", 2, 3, out.data()).ok());
  EXPECT_EQ(out[0], 3.0f);
  EXPECT_EQ(out[2], -0.0f);
  EXPECT_TRUE(std::signbit(out[2]));
  ASSERT_TRUE((*reader)->ReadAsFloat("b", 0, 3, out.data()).ok());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -3.5f);
  EXPECT_EQ(out[2], 0.015625f);
  ASSERT_TRUE((*reader)->ReadAsFloat("c", 0, 4, out.data()).ok());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], 65504.0f);
  EXPECT_EQ(out[3], std::ldexp(1.0f, -24));
  ASSERT_TRUE((*reader)->ReadAsFloat("c", 4, 0, out.data()).ok());

  EXPECT_EQ((*reader)->ReadAsFloat("a", 5, 2, out.data()).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*reader)->ReadAsFloat("a", -1, 1, out.data()).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*reader)->ReadAsFloat("zz", 0, 1, out.data()).code(), absl::StatusCode::kNotFound);
}

TEST(SafetensorsReader, AFileThatShrankAfterOpenIsDataLoss) {
  const std::vector<float> f32(1024, 1.0f);
  const std::string path = Write(
      "shrinks.safetensors",
      File(R"({"a":{"dtype":"F32","shape":[1024],"data_offsets":[0,4096]}})", Bytes(f32)));
  auto reader = SafetensorsReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_EQ(truncate(path.c_str(), 100), 0);
  std::vector<float> out(1024);
  absl::Status s = (*reader)->ReadAsFloat("a", 0, 1024, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
}

TEST(SafetensorsReader, AMissingFileIsNotFoundAndAFifoIsRefusedWithoutWaiting) {
  EXPECT_EQ(SafetensorsReader::Open(TempPath("absent.safetensors")).status().code(),
            absl::StatusCode::kNotFound);
  // A plain open of a FIFO waits for a writer: it once could hang a submit.
  const std::string fifo = TempPath("fifo.safetensors");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  absl::Status s = SafetensorsReader::Open(fifo).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("is not a regular file"), std::string::npos) << s;
}

struct Malformed {
  const char* name;
  std::string bytes;
  const char* says;  // in the message
};

TEST(SafetensorsReader, MalformedHeadersAreRefusedNamingTheProblem) {
  const std::string data(16, '\0');
  std::string huge_length(8, '\0');
  huge_length[7] = 0x10;  // 2^60
  const std::vector<Malformed> cases = {
      {"short", "abc", "shorter than a safetensors header"},
      {"huge-length", huge_length + data, "exceeds the file"},
      {"not-json", File("{not json", data), "not a JSON object"},
      {"array", File("[1,2]", data), "not a JSON object"},
      {"entry-not-object", File(R"({"a":3})", data), "tensor a: its entry is not an object"},
      {"no-dtype", File(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", data), "needs a dtype"},
      {"unknown-dtype", File(R"({"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", data),
       "dtype I64 is not F32, BF16 or F16"},
      {"negative-dim", File(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", data),
       "not a count"},
      {"overflowing-shape",
       File(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", data),
       "more elements than any file could"},
      {"rank-9",
       File(R"({"a":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}})", data),
       "9 dimensions, more than 8"},
      {"long-name", File("{\"" + std::string(5000, 'n') + R"(":{"dtype":"I8","shape":[1],"data_offsets":[0,1]}})", data),
       "nnn...: dtype I8"},
      {"size-mismatch", File(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", data),
       "hold 4 bytes, its shape needs 8"},
      {"past-end", File(R"({"a":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})", data),
       "not inside the file's 16 data bytes"},
      {"reversed", File(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", data),
       "not inside"},
      {"float-offsets", File(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0.5,4]}})", data),
       "not byte counts"},
  };
  for (const Malformed& c : cases) {
    const std::string path = Write(std::string(c.name) + ".safetensors", c.bytes);
    absl::Status s = SafetensorsReader::Open(path).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.name << ": " << s;
    EXPECT_NE(std::string(s.message()).find(c.says), std::string::npos) << c.name << ": " << s;
    EXPECT_NE(std::string(s.message()).find(path), std::string::npos) << c.name << ": " << s;
    EXPECT_LT(s.message().size(), path.size() + 300) << c.name << ": quotes the file at length";
  }
}

}  // namespace
}  // namespace tessera
