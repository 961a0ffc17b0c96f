// Files for the trainer tests: a fresh directory per call under the test's
// scratch space (TEST_TMPDIR, or /tmp for GPU tests run outside Bazel),
// whole-file reads and writes, and held-out data from the synthetic
// addition task.
#ifndef TESSERA_WORKER_TRAINER_TEST_FILES_H_
#define TESSERA_WORKER_TRAINER_TEST_FILES_H_

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/synthetic_task.h"
#include "gtest/gtest.h"

namespace tessera {

// A new directory NAME-PID-N; unique within the test and across forked ranks.
inline std::string TestDir(const std::string& name) {
  static std::atomic<int> counter{0};
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name, "-", getpid(), "-",
                                 counter++);
  mkdir(dir.c_str(), 0755);
  return dir;
}

inline std::string ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void WriteStringToFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// `values` as raw bytes (host order), for a script that reads them with numpy.
template <typename T>
void WriteRawValues(const std::string& path, const std::vector<T>& values) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(values.data()),
             static_cast<std::streamsize>(values.size() * sizeof(T)));
}

// A token file of the addition task (up to 3 digits) from `seed`, which
// training (seeded by the job) never sees when seeds differ.
inline std::string AdditionTokenFile(const std::string& name, uint64_t seed, int64_t tokens) {
  const std::string path = TestDir(name) + "/data.tok";
  v1::SyntheticData task;
  task.set_task(v1::SyntheticData::ADDITION);
  task.set_max_digits(3);
  EXPECT_TRUE(WriteSyntheticTokenFile(task, seed, tokens, path).ok());
  return path;
}

}  // namespace tessera

#endif  // TESSERA_WORKER_TRAINER_TEST_FILES_H_
