// A main for the fuzz harnesses outside libFuzzer: feeds every file of the
// directories named on the command line, once each, to the harness's
// LLVMFuzzerTestOneInput. The fuzz targets' *_corpus_test use it to replay
// the checked-in seeds and the inputs that once crashed a reader, under the
// default toolchain and under the sanitizers, on every CI run. A harness
// that finds a broken invariant aborts, which fails the test; so does an
// empty or missing corpus (a replay of nothing proves nothing).
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::vector<std::string> FilesIn(const std::string& dir) {
  std::vector<std::string> files;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return files;
  while (dirent* entry = readdir(d)) {
    const std::string path = dir + "/" + entry->d_name;
    struct stat st {};
    if (stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) files.push_back(path);
  }
  closedir(d);
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

int main(int argc, char** argv) {
  int replayed = 0;
  for (int i = 1; i < argc; ++i) {
    const std::vector<std::string> files = FilesIn(argv[i]);
    if (files.empty()) {
      std::fprintf(stderr, "corpus %s: missing or empty\n", argv[i]);
      return 1;
    }
    for (const std::string& path : files) {
      std::ifstream in(path, std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      std::printf("replaying %s (%zu bytes)\n", path.c_str(), bytes.size());
      std::fflush(stdout);
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      ++replayed;
    }
  }
  if (replayed == 0) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR...\n", argv[0]);
    return 1;
  }
  std::printf("%d inputs replayed\n", replayed);
  return 0;
}
