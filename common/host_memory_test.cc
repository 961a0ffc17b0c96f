// AvailableHostMemoryBytes reads a plausible figure: positive and no more
// than the machine's physical memory.
#include "common/host_memory.h"

#include <unistd.h>

#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(HostMemoryTest, AvailableIsPositiveAndWithinPhysicalMemory) {
  const int64_t available = AvailableHostMemoryBytes();
  const int64_t physical = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  EXPECT_GT(available, 0);
  EXPECT_LE(available, physical);
}

}  // namespace
}  // namespace tessera
