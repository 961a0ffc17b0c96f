// Fp8Stats on the GPU against the CPU engine (needs a GPU, tag "gpu"):
// the saturation and underflow counts must be equal, not close, on fresh
// random inputs spread over many octaves with zeros, NaN and infinities
// mixed in, fp32 and bf16, both formats, several scales and sizes (one
// element, a partial warp, more elements than one pass of the grid covers),
// counts added to what they held, and run twice with the same result.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/cuda/engine_harness_for_test.h"

namespace tessera {
namespace testing {
namespace {

// Values m * 2^e, e in [-40, 24), with zeros, NaN and infinities among them.
HostTensor SpreadTensor(DType dtype, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> x(n);
  for (float& v : x) {
    const uint32_t r = rng();
    const float mantissa = 1.f + (rng() >> 9) / float(1 << 23);
    v = std::ldexp(mantissa, static_cast<int>(r % 64) - 40) * ((r & 64) ? -1.f : 1.f);
    if (r % 97 == 0) v = 0.f;
    if (r % 389 == 0) v = std::numeric_limits<float>::quiet_NaN();
    if (r % 499 == 0) v = -std::numeric_limits<float>::infinity();
  }
  if (dtype == DType::kBFloat16) return HostTensor::FromVector(dtype, Shape{n}, ToBf16(x));
  return HostTensor::FromVector(dtype, Shape{n}, x);
}

// Two int64 counters (as four int32 of raw bytes), holding 7 and 11.
HostTensor Counters() {
  return HostTensor::FromVector(DType::kInt32, Shape{4}, std::vector<int64_t>{7, 11});
}

using Param = std::tuple<DType /*in*/, DType /*format*/, int64_t /*n*/, float /*scale*/>;

class Fp8StatsTest : public CpuVsCudaTest, public ::testing::WithParamInterface<Param> {};

TEST_P(Fp8StatsTest, CountsEqualTheCpuEngine) {
  const auto [in, format, n, scale] = GetParam();
  const uint32_t seed = static_cast<uint32_t>(std::random_device()());
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::vector<HostTensor> t = {SpreadTensor(in, n, seed), Scalar(scale), Counters()};
  auto [c, g] = Both(t, [format = format](Ops& ops, std::vector<TensorDesc>& d) {
    absl::Status s = ops.Fp8Stats(d[0], format, d[1].As<float>(), d[2].As<int64_t>(), nullptr);
    // Twice: the second adds the same counts again.
    if (s.ok()) s = ops.Fp8Stats(d[0], format, d[1].As<float>(), d[2].As<int64_t>(), nullptr);
    return s;
  });
  const std::vector<int64_t> cpu = c[2].As<int64_t>(), gpu = g[2].As<int64_t>();
  EXPECT_EQ(gpu[0], cpu[0]) << "saturated";
  EXPECT_EQ(gpu[1], cpu[1]) << "underflowed";
  EXPECT_EQ((cpu[0] - 7) % 2, 0);
  EXPECT_EQ((cpu[1] - 11) % 2, 0);
  if (n > 1000) {  // the spread reaches both ends of each format at these scales
    EXPECT_GT(cpu[0], 7);
    EXPECT_GT(cpu[1], 11);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Inputs, Fp8StatsTest,
    ::testing::Combine(::testing::Values(DType::kFloat32, DType::kBFloat16),
                       ::testing::Values(DType::kE4M3, DType::kE5M2),
                       ::testing::Values(int64_t{1}, int64_t{77}, int64_t{100003}),
                       ::testing::Values(1.f, 0.0078125f, 37.5f)));

// More elements than one pass of the kernel's grid (65535 * 8 blocks of 256
// threads) covers: the grid-stride loop's second pass counts too.
TEST_F(CpuVsCudaTest, Fp8StatsCountsBeyondOnePassOfTheGrid) {
  const int64_t n = int64_t{65535} * 8 * 256 + 4099;
  std::vector<HostTensor> t = {SpreadTensor(DType::kBFloat16, n, 5), Scalar(2.f), Counters()};
  auto [c, g] = Both(t, [](Ops& ops, std::vector<TensorDesc>& d) {
    return ops.Fp8Stats(d[0], DType::kE5M2, d[1].As<float>(), d[2].As<int64_t>(), nullptr);
  });
  EXPECT_EQ(g[2].As<int64_t>(), c[2].As<int64_t>());
}

TEST_F(CpuVsCudaTest, Fp8StatsRefusesWhatItCannotCount) {
  std::vector<HostTensor> t = {SpreadTensor(DType::kFloat32, 16, 3), Scalar(1.f), Counters()};
  auto g = RunOn(gpu(), t, [](Ops& ops, std::vector<TensorDesc>& d) {
    return ops.Fp8Stats(d[0], DType::kBFloat16, d[1].As<float>(), d[2].As<int64_t>(), nullptr);
  });
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << g.status();
}

}  // namespace
}  // namespace testing
}  // namespace tessera
