// World-size-independent parameter init (see param_init.h).
#include "worker/model/param_init.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "common/splitmix.h"

namespace tessera {

float InitNormal(uint64_t seed, uint64_t param_index, uint64_t element) {
  const uint64_t h = HashWords(seed, 0x1417, param_index, element);
  const uint64_t h2 = SplitMix64(h);
  // Two uniforms in (0, 1].
  const double u1 = (static_cast<double>(h >> 11) + 1.0) / 9007199254740992.0;
  const double u2 = static_cast<double>(h2 >> 11) / 9007199254740992.0;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

namespace {

void FillRange(float* out, int64_t begin, int64_t end, uint64_t seed, uint64_t param_index,
               int64_t first, float std, float constant) {
  for (int64_t i = begin; i < end; ++i) {
    out[i] = std == 0.f ? constant
                        : std * InitNormal(seed, param_index, static_cast<uint64_t>(first + i));
  }
}

}  // namespace

void FillInit(float* out, int64_t count, uint64_t seed, uint64_t param_index, int64_t first,
              float std, float constant) {
  // About 40 ns an element on one core: a rank's 2B-element shard of an 8B
  // model would take 80 s. Every element is a pure function of its index,
  // so slices filled on separate threads give the same bits.
  constexpr int64_t kElementsPerThread = int64_t{1} << 22;
  const int64_t hardware = std::max(1u, std::thread::hardware_concurrency());
  const int64_t threads = std::clamp<int64_t>(count / kElementsPerThread, 1,
                                              std::min<int64_t>(hardware, kMaxInitThreads));
  if (threads == 1) {
    FillRange(out, 0, count, seed, param_index, first, std, constant);
    return;
  }
  std::vector<std::thread> workers;
  workers.reserve(threads - 1);
  const int64_t slice = (count + threads - 1) / threads;
  for (int64_t t = 1; t < threads; ++t) {
    const int64_t begin = std::min(count, t * slice), end = std::min(count, begin + slice);
    workers.emplace_back(FillRange, out, begin, end, seed, param_index, first, std, constant);
  }
  FillRange(out, 0, std::min(count, slice), seed, param_index, first, std, constant);
  for (std::thread& w : workers) w.join();
}

}  // namespace tessera
