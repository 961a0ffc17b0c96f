// How much memory this host can give a process now: MemAvailable of
// /proc/meminfo (what the kernel can provide without swapping, page cache it
// can drop included). The CPU engine reports it as its device memory, and a
// trainer sizes its checkpoint snapshot against it.
#ifndef TESSERA_COMMON_HOST_MEMORY_H_
#define TESSERA_COMMON_HOST_MEMORY_H_

#include <cstdint>

namespace tessera {

// MemAvailable in bytes; free physical pages where /proc/meminfo lacks it.
int64_t AvailableHostMemoryBytes();

}  // namespace tessera

#endif  // TESSERA_COMMON_HOST_MEMORY_H_
