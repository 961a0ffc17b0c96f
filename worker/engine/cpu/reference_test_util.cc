// Out-of-line test helpers of reference_test_util.h: byte poisoning, random
// bf16 and integer inputs, and the max-abs-difference metric.
#include "worker/engine/cpu/reference_test_util.h"

#include <cstring>

namespace tessera {
namespace testing {

void Poison(std::vector<uint8_t>& v) { std::fill(v.begin(), v.end(), 0xFF); }

void PoisonBytes(void* data, size_t bytes) {
  if (bytes > 0) std::memset(data, 0xFF, bytes);
}

std::vector<uint16_t> RandomBf16(size_t n, uint32_t seed, float scale) {
  return ToBf16(RandomFloats(n, seed, scale));
}

std::vector<int32_t> RandomInts(size_t n, uint32_t seed, int32_t lo, int32_t hi) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(lo, hi - 1);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = dist(rng);
  return v;
}

double MaxAbsDifference(const std::vector<float>& got, const std::vector<double>& want) {
  double worst = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (std::isnan(d)) return INFINITY;
    worst = std::max(worst, d);
  }
  return worst;
}

}  // namespace testing
}  // namespace tessera
