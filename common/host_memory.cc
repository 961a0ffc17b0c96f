// AvailableHostMemoryBytes (see host_memory.h).
#include "common/host_memory.h"

#include <unistd.h>

#include <fstream>
#include <string>

namespace tessera {

int64_t AvailableHostMemoryBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  int64_t kib = 0;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return static_cast<int64_t>(sysconf(_SC_AVPHYS_PAGES)) * sysconf(_SC_PAGESIZE);
}

}  // namespace tessera
