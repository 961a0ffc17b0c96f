// Host tensors of fp32 or bf16 for the CPU engine's op tests: built from
// float values (rounded to the dtype, as an op would see them), poisoned
// with NaN before an op writes them, read back as fp64 for comparison with
// a reference, and compared bit for bit to check determinism. AllClose
// reports the first element outside |got - want| <= atol + rtol * |want|;
// InvalidArgumentNaming checks an error names the offending argument.
#ifndef TESSERA_WORKER_ENGINE_CPU_FLOAT_TENSOR_FOR_TEST_H_
#define TESSERA_WORKER_ENGINE_CPU_FLOAT_TENSOR_FOR_TEST_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "worker/engine/cpu/bf16.h"
#include "worker/engine/cpu/reference_test_util.h"
#include "worker/ops/tensor.h"

namespace tessera {
namespace testing {

class FloatTensor {
 public:
  FloatTensor(DType dtype, Shape shape) : dtype_(dtype), shape_(shape) {
    words_.resize((static_cast<size_t>(shape.NumElements()) * ElementBytes() + 3) / 4 + 1);
  }

  // values.size() must equal the element count; rounded to the dtype.
  static FloatTensor Of(DType dtype, Shape shape, const std::vector<float>& values) {
    FloatTensor t(dtype, shape);
    for (int64_t i = 0; i < t.size(); ++i) t.Set(i, values[i]);
    return t;
  }
  // Uniform in [-scale, scale) from a seeded generator (never all zeros).
  static FloatTensor Random(DType dtype, Shape shape, uint32_t seed, float scale = 1.0f) {
    return Of(dtype, shape, RandomFloats(shape.NumElements(), seed, scale));
  }
  static FloatTensor Poisoned(DType dtype, Shape shape) {
    FloatTensor t(dtype, shape);
    t.Poison();
    return t;
  }

  int64_t size() const { return shape_.NumElements(); }
  DType dtype() const { return dtype_; }

  TensorDesc desc() { return MakeTensor(words_.data(), dtype_, shape_); }
  // The same memory described with another shape (e.g. a wrong one).
  TensorDesc desc(Shape shape) { return MakeTensor(words_.data(), dtype_, shape); }

  void Set(int64_t i, float v) {
    if (dtype_ == DType::kFloat32) {
      reinterpret_cast<float*>(words_.data())[i] = v;
    } else {
      reinterpret_cast<uint16_t*>(words_.data())[i] = cpu::FloatToBf16(v);
    }
  }
  double Get(int64_t i) const {
    if (dtype_ == DType::kFloat32) return reinterpret_cast<const float*>(words_.data())[i];
    return cpu::Bf16ToFloat(reinterpret_cast<const uint16_t*>(words_.data())[i]);
  }
  std::vector<double> values() const {
    std::vector<double> v(size());
    for (int64_t i = 0; i < size(); ++i) v[i] = Get(i);
    return v;
  }
  // NaN in every element (0xFF bytes are a NaN in fp32 and bf16).
  void Poison() { std::memset(words_.data(), 0xFF, words_.size() * 4); }
  bool BitEqual(const FloatTensor& other) const {
    return dtype_ == other.dtype_ && shape_ == other.shape_ &&
           std::memcmp(words_.data(), other.words_.data(), size() * ElementBytes()) == 0;
  }

 private:
  size_t ElementBytes() const { return dtype_ == DType::kFloat32 ? 4 : 2; }

  DType dtype_;
  Shape shape_;
  std::vector<uint32_t> words_;  // 4-byte aligned storage for the elements
};

// Largest |want_i|, for absolute tolerances relative to a tensor's scale.
inline double MaxAbs(const std::vector<double>& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// Every |got_i - want_i| <= atol + rtol * |want_i| (NaN never passes).
inline ::testing::AssertionResult AllClose(const std::vector<double>& got,
                                           const std::vector<double>& want, double rtol,
                                           double atol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  }
  int bad = 0;
  std::ostringstream first;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(got[i] - want[i]);
    if (!(err <= atol + rtol * std::fabs(want[i]))) {
      if (bad++ == 0) {
        first.precision(9);
        first << "element " << i << ": got " << got[i] << ", want " << want[i];
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << want.size() << " elements outside atol "
                                       << atol << " + rtol " << rtol << "; first " << first.str();
}

// s is INVALID_ARGUMENT and its message starts with "<argument>:".
inline ::testing::AssertionResult InvalidArgumentNaming(const absl::Status& s,
                                                        const std::string& argument) {
  if (s.code() == absl::StatusCode::kInvalidArgument &&
      absl::StartsWith(s.message(), argument + ":")) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "want INVALID_ARGUMENT naming " << argument << ", got "
                                       << s;
}

inline const char* Name(DType dtype) { return dtype == DType::kFloat32 ? "f32" : "bf16"; }

}  // namespace testing
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CPU_FLOAT_TENSOR_FOR_TEST_H_
