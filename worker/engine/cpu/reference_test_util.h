// Test helpers for checking ops against fp64 references: seeded random
// inputs (never zeros), bf16 rounding, relative error, poisoning, and
// central finite differences. Used by the CPU engine's tests and by the
// CUDA engine's GPU tests.
#ifndef TESSERA_WORKER_ENGINE_CPU_REFERENCE_TEST_UTIL_H_
#define TESSERA_WORKER_ENGINE_CPU_REFERENCE_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "worker/engine/cpu/bf16.h"

namespace tessera {
namespace testing {

// Uniform values in [-scale, scale), fresh for each seed.
inline std::vector<float> RandomFloats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline std::vector<uint16_t> ToBf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = cpu::FloatToBf16(v[i]);
  return out;
}

inline std::vector<double> FromBf16(const std::vector<uint16_t>& v) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = cpu::Bf16ToFloat(v[i]);
  return out;
}

template <typename A, typename B>
double RelativeError(const std::vector<A>& got, const std::vector<B>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    double d = static_cast<double>(got[i]) - static_cast<double>(want[i]);
    if (std::isnan(d)) return INFINITY;
    num += d * d;
    den += static_cast<double>(want[i]) * static_cast<double>(want[i]);
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// Poison values: NaN for floats, 0xFFFF (a bf16 NaN) for bf16.
inline void Poison(std::vector<float>& v) { std::fill(v.begin(), v.end(), NAN); }
inline void Poison(std::vector<uint16_t>& v) { std::fill(v.begin(), v.end(), 0xFFFF); }
// 0xFF bytes: a NaN in every float dtype (fp32, bf16, e4m3, e5m2), -1 in int32.
void Poison(std::vector<uint8_t>& v);
void PoisonBytes(void* data, size_t bytes);

// bf16 values uniform in [-scale, scale) (rounded from RandomFloats).
std::vector<uint16_t> RandomBf16(size_t n, uint32_t seed, float scale = 1.0f);
// Integers uniform in [lo, hi), e.g. token ids or targets.
std::vector<int32_t> RandomInts(size_t n, uint32_t seed, int32_t lo, int32_t hi);
// Largest |got[i] - want[i]| (infinite if either side is NaN).
double MaxAbsDifference(const std::vector<float>& got, const std::vector<double>& want);

// d f / d x_i by central differences, in fp64.
inline std::vector<double> NumericGradient(const std::function<double(const std::vector<double>&)>& f,
                                           std::vector<double> x, double h = 1e-5) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double up = f(x);
    x[i] = keep - h;
    const double down = f(x);
    x[i] = keep;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

}  // namespace testing
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CPU_REFERENCE_TEST_UTIL_H_
