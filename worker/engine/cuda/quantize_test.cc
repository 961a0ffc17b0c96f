// The CUDA FP8 casts against the CPU reference (needs a GPU, tag "gpu").
// Tolerance: none. Quantize, QuantizeTranspose, Transpose, Dequantize,
// Amax and UpdateFp8Scales must be bit-identical to the CPU engine for
// e4m3 and e5m2, fp32 and bf16 inputs, ragged and empty shapes, and inputs
// that hit every special case of the encoding: NaN, +-inf, saturation,
// subnormals and exact rounding ties. (Dequantize of a NaN code may differ
// in the NaN's payload: GPUs return the canonical NaN.)
#include <cmath>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/cuda/engine_harness_for_test.h"

namespace tessera {
namespace testing {
namespace {

// Random values plus, at the front, the encoding's special cases.
std::vector<float> InputWithSpecials(int64_t n, uint32_t seed) {
  std::vector<float> x = RandomFloats(n, seed, 8.0f);
  const float specials[] = {NAN,       INFINITY,  -INFINITY, 1e9f,     -1e9f,
                            1.0625f,   1.1875f,   -1.0625f,  0.0f,     -0.0f,
                            0x1p-10f,  0x3p-10f,  0x1p-17f,  0x3p-17f, 448.0f,
                            464.0f,    57344.0f,  61440.0f,  0x1p-12f, 3.0e-5f};
  for (size_t i = 0; i < sizeof(specials) / sizeof(specials[0]) && i < x.size(); ++i) {
    x[i] = specials[i];
  }
  return x;
}

HostTensor InputTensor(DType dtype, Shape shape, uint32_t seed) {
  std::vector<float> x = InputWithSpecials(shape.NumElements(), seed);
  if (dtype == DType::kBFloat16) return HostTensor::FromVector(dtype, shape, ToBf16(x));
  return HostTensor::FromVector(dtype, shape, x);
}

using QuantizeParam = std::tuple<DType /*out*/, DType /*in*/, std::pair<int, int> /*rows, cols*/,
                                 float /*scale*/>;

class QuantizeTest : public CpuVsCudaTest, public ::testing::WithParamInterface<QuantizeParam> {};

TEST_P(QuantizeTest, CastTransposeAndAmaxAreBitExact) {
  const auto [out_dtype, in_dtype, dims, scale] = GetParam();
  const int64_t rows = dims.first, cols = dims.second;
  std::vector<HostTensor> t = {InputTensor(in_dtype, Shape{rows, cols}, rows * 31 + cols),
                               Poisoned(out_dtype, Shape{rows, cols}),   // 1: Quantize out
                               Poisoned(out_dtype, Shape{rows, cols}),   // 2: QuantizeTranspose out
                               Poisoned(out_dtype, Shape{cols, rows}),   // 3: its out_t
                               Scalar(scale),                            // 4: scale
                               Scalar(-1.f),                             // 5: scale_inv
                               Scalar(0.5f),                             // 6: amax (old value)
                               Scalar(-1.f),                             // 7: out_t.scale_inv
                               Poisoned(out_dtype, Shape{cols, rows}),   // 8: Transpose of 1
                               Scalar(0.25f),                            // 9: Amax()
                               Poisoned(out_dtype, Shape{cols, rows})};  // 10: out_t only
  auto [c, g] = Both(t, [](Ops& ops, std::vector<TensorDesc>& d) {
    TensorDesc out = d[1];
    out.scale = d[4].As<float>();
    out.scale_inv = d[5].As<float>();
    out.amax = d[6].As<float>();
    absl::Status s = ops.Quantize(d[0], out, nullptr);
    TensorDesc out2 = d[2];
    out2.scale = out.scale;
    TensorDesc out_t = d[3];
    out_t.scale_inv = d[7].As<float>();
    if (s.ok()) s = ops.QuantizeTranspose(d[0], out2, out_t, nullptr);
    TensorDesc no_plain = out2;
    no_plain.data = nullptr;
    if (s.ok()) s = ops.QuantizeTranspose(d[0], no_plain, d[10], nullptr);
    if (s.ok()) s = ops.Transpose(d[1], d[8], nullptr);
    if (s.ok()) s = ops.Amax(d[0], d[9].As<float>(), nullptr);
    return s;
  });
  for (int i : {1, 2, 3, 5, 6, 7, 8, 9, 10}) {
    EXPECT_EQ(g[i].bytes, c[i].bytes) << "tensor " << i;
  }
  EXPECT_EQ(g[3].bytes, g[8].bytes) << "QuantizeTranspose's out_t != Transpose(Quantize)";
  EXPECT_EQ(g[3].bytes, g[10].bytes) << "out_t differs when out.data is null";
}

TEST_P(QuantizeTest, DequantizeIsBitExact) {
  const auto [fp8_dtype, out_dtype, dims, scale] = GetParam();
  const int64_t n = int64_t{dims.first} * dims.second;
  std::vector<uint8_t> codes(n);
  for (int64_t i = 0; i < n; ++i) codes[i] = static_cast<uint8_t>((i * 37 + 11) & 0xFF);
  std::vector<HostTensor> t = {HostTensor::FromVector(fp8_dtype, Shape{n}, codes),
                               Scalar(1.0f / scale), Poisoned(out_dtype, Shape{n})};
  auto [c, g] = Both(t, [](Ops& ops, std::vector<TensorDesc>& d) {
    TensorDesc in = d[0];
    in.scale_inv = d[1].As<float>();
    return ops.Dequantize(in, d[2], nullptr);
  });
  EXPECT_EQ(BitDifferences(g[2], c[2]), 0);  // NaN codes: any NaN
}

INSTANTIATE_TEST_SUITE_P(
    DtypesAndShapes, QuantizeTest,
    ::testing::Combine(::testing::Values(DType::kE4M3, DType::kE5M2),
                       ::testing::Values(DType::kFloat32, DType::kBFloat16),
                       ::testing::Values(std::pair{1, 1}, std::pair{33, 65}, std::pair{256, 128},
                                         std::pair{128, 192}, std::pair{7, 1000},
                                         std::pair{0, 16}),
                       ::testing::Values(1.0f, 23.0f)));

// Every bf16 bit pattern, and a million random fp32 bit patterns, through
// both casts (the 64 x 64 tiled cast-transpose and the plain cast) at two
// scales: the hardware converter must agree with the reference encoder on
// every one of them.
class EveryInputTest : public CpuVsCudaTest,
                       public ::testing::WithParamInterface<std::tuple<DType, DType, float>> {};

TEST_P(EveryInputTest, EncodesLikeTheReference) {
  const auto [out_dtype, in_dtype, scale] = GetParam();
  HostTensor in;
  if (in_dtype == DType::kBFloat16) {
    std::vector<uint16_t> patterns(1 << 16);
    for (size_t i = 0; i < patterns.size(); ++i) patterns[i] = static_cast<uint16_t>(i);
    in = HostTensor::FromVector(in_dtype, Shape{256, 256}, patterns);
  } else {
    std::vector<uint32_t> patterns(1 << 20);
    uint32_t state = 12345;
    for (uint32_t& p : patterns) p = state = state * 1664525u + 1013904223u;
    in = HostTensor::FromVector(in_dtype, Shape{1024, 1024}, patterns);
  }
  const int64_t rows = in.shape[0], cols = in.shape[1];
  std::vector<HostTensor> t = {in, Poisoned(out_dtype, Shape{rows, cols}),
                               Poisoned(out_dtype, Shape{cols, rows}),
                               Poisoned(out_dtype, Shape{rows, cols}), Scalar(scale),
                               Scalar(0.f)};
  auto [c, g] = Both(t, [](Ops& ops, std::vector<TensorDesc>& d) {
    TensorDesc out = d[1];
    out.scale = d[4].As<float>();
    out.amax = d[5].As<float>();
    absl::Status s = ops.QuantizeTranspose(d[0], out, d[2], nullptr);
    TensorDesc plain = d[3];
    plain.scale = out.scale;
    if (s.ok()) s = ops.Quantize(d[0], plain, nullptr);
    return s;
  });
  for (int i : {1, 2, 3, 5}) EXPECT_EQ(g[i].bytes, c[i].bytes) << "tensor " << i;
}

INSTANTIATE_TEST_SUITE_P(Formats, EveryInputTest,
                         ::testing::Combine(::testing::Values(DType::kE4M3, DType::kE5M2),
                                            ::testing::Values(DType::kBFloat16, DType::kFloat32),
                                            ::testing::Values(1.0f, 0.375f)));

class TransposeTest : public CpuVsCudaTest,
                      public ::testing::WithParamInterface<std::tuple<DType, std::pair<int, int>>> {};

TEST_P(TransposeTest, MatchesCpuForEveryElementSize) {
  const auto [dtype, dims] = GetParam();
  const Shape shape{dims.first, dims.second};
  std::vector<uint8_t> bytes(shape.NumElements() * DTypeSize(dtype));
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  std::vector<HostTensor> t = {HostTensor::FromVector(dtype, shape, bytes),
                               Poisoned(dtype, Shape{dims.second, dims.first})};
  auto [c, g] = Both(t, [](Ops& ops, std::vector<TensorDesc>& d) {
    return ops.Transpose(d[0], d[1], nullptr);
  });
  EXPECT_EQ(g[1].bytes, c[1].bytes);
}

INSTANTIATE_TEST_SUITE_P(ElementSizes, TransposeTest,
                         ::testing::Combine(::testing::Values(DType::kE4M3, DType::kBFloat16,
                                                              DType::kFloat32),
                                            // 128 x 192 and 192 x 704 are whole 64 x 64
                                            // tiles: FP8 takes the tiled kernel there.
                                            ::testing::Values(std::pair{1, 1}, std::pair{31, 33},
                                                              std::pair{64, 96},
                                                              std::pair{3, 513},
                                                              std::pair{128, 192},
                                                              std::pair{192, 704})));

class UpdateScalesTest
    : public CpuVsCudaTest,
      public ::testing::WithParamInterface<std::tuple<AmaxAlgo, int /*history*/, int /*n*/>> {};

// Stride 4 (the trainer's layout) also checks that the floats between the
// scale_inv values are left alone: they start random and must match.
TEST_P(UpdateScalesTest, MatchesCpuBitForBit) {
  const auto [algo, len, n] = GetParam();
  const int stride = (n % 2 == 0) ? 4 : 1;
  std::vector<float> amax = RandomFloats(n, 1, 10.f), history = RandomFloats(len * n, 2, 10.f);
  for (float& x : amax) x = std::fabs(x);
  for (float& x : history) x = std::fabs(x);
  if (n > 2) {
    amax[0] = 0.f;       // scale must stay unchanged ...
    amax[1] = INFINITY;  // ... for a zero or non-finite amax
    for (int h = 0; h < len; ++h) history[h * n] = 0.f;
  }
  std::vector<HostTensor> t = {HostTensor::FromVector(DType::kFloat32, Shape{n}, amax),
                               HostTensor::FromVector(DType::kFloat32, Shape{len, n}, history),
                               RandomTensor(DType::kFloat32, Shape{n}, 3),
                               RandomTensor(DType::kFloat32, Shape{n * stride}, 4)};
  auto [c, g] = Both(t, [algo = algo, len = len, n = n, stride](Ops& ops,
                                                               std::vector<TensorDesc>& d) {
    return ops.UpdateFp8Scales(d[0].As<float>(), d[1].As<float>(), d[2].As<float>(),
                               d[3].As<float>(), stride, n, len, 448.f, 1, algo, nullptr);
  });
  for (int i = 0; i < 4; ++i) EXPECT_EQ(g[i].bytes, c[i].bytes) << "tensor " << i;
}

INSTANTIATE_TEST_SUITE_P(Algos, UpdateScalesTest,
                         ::testing::Combine(::testing::Values(AmaxAlgo::kMax,
                                                              AmaxAlgo::kMostRecent),
                                            ::testing::Values(1, 5), ::testing::Values(1, 7, 300)));

}  // namespace
}  // namespace testing
}  // namespace tessera
