// Scratch files for the harnesses whose readers open a path: one fresh
// directory per fuzzing process (under TEST_TMPDIR when Bazel runs the
// corpus replay), and whole-file writes that abort on any I/O failure, so
// a disk problem is never mistaken for a reader's finding.
#ifndef TESSERA_FUZZ_SCRATCH_FILE_H_
#define TESSERA_FUZZ_SCRATCH_FILE_H_

#include <stdlib.h>

#include <cstddef>
#include <cstdio>
#include <string>

#include "fuzz/fuzz_check.h"

// A new directory named PREFIX-XXXXXX; keep it in a function-local static.
inline std::string MakeScratchDir(const char* prefix) {
  const char* base = getenv("TEST_TMPDIR");
  std::string pattern = std::string(base != nullptr ? base : "/tmp") + "/" + prefix + "-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) std::abort();
  return pattern;
}

inline void WriteScratchFile(const std::string& path, const void* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  FUZZ_CHECK(f != nullptr, "cannot write a scratch file");
  FUZZ_CHECK(std::fwrite(data, 1, size, f) == size, "short write of a scratch file");
  FUZZ_CHECK(std::fclose(f) == 0, "cannot close a scratch file");
}

#endif  // TESSERA_FUZZ_SCRATCH_FILE_H_
