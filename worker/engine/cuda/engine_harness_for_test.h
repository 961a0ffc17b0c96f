// Test-only harness for the CUDA engine's GPU tests: runs one op body on the
// CPU reference engine and on the CUDA engine from the same host tensors and
// returns both results for comparison.
//
// Host tensors are uploaded through Ops::Allocate/CopyToDevice, so one test
// body (written against the Ops interface) serves both engines. Outputs are
// poisoned by the test before the run (0xFF bytes: NaN in every float dtype)
// and everything is downloaded after Synchronize, so a value an engine
// failed to write shows up as NaN in the comparison.
#ifndef TESSERA_WORKER_ENGINE_CUDA_ENGINE_HARNESS_FOR_TEST_H_
#define TESSERA_WORKER_ENGINE_CUDA_ENGINE_HARNESS_FOR_TEST_H_

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/cpu/bf16.h"
#include "worker/engine/cpu/cpu_ops.h"
#include "worker/engine/cpu/reference_test_util.h"
#include "worker/engine/cuda/cuda_ops.h"
#include "worker/ops/ops.h"

namespace tessera {
namespace testing {

struct HostTensor {
  DType dtype = DType::kFloat32;
  Shape shape;
  std::vector<uint8_t> bytes;

  static HostTensor Of(DType dtype, Shape shape) {
    HostTensor t;
    t.dtype = dtype;
    t.shape = shape;
    t.bytes.assign(static_cast<size_t>(shape.NumElements()) * DTypeSize(dtype), 0);
    return t;
  }
  template <typename T>
  static HostTensor FromVector(DType dtype, Shape shape, const std::vector<T>& v) {
    HostTensor t = Of(dtype, shape);
    std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
    return t;
  }
  template <typename T>
  std::vector<T> As() const {
    std::vector<T> v(bytes.size() / sizeof(T));
    std::memcpy(v.data(), bytes.data(), bytes.size());
    return v;
  }
  HostTensor& Poison() {
    std::fill(bytes.begin(), bytes.end(), 0xFF);
    return *this;
  }
};

// Random fp32 or bf16 tensor with values in [-scale, scale).
inline HostTensor RandomTensor(DType dtype, Shape shape, uint32_t seed, float scale = 1.0f) {
  std::vector<float> v = RandomFloats(shape.NumElements(), seed, scale);
  if (dtype == DType::kBFloat16) return HostTensor::FromVector(dtype, shape, ToBf16(v));
  return HostTensor::FromVector(DType::kFloat32, shape, v);
}
inline HostTensor Scalar(float v) {
  return HostTensor::FromVector(DType::kFloat32, Shape{1}, std::vector<float>{v});
}
inline HostTensor Poisoned(DType dtype, Shape shape) { return HostTensor::Of(dtype, shape).Poison(); }

// Values of an fp32 or bf16 host tensor.
inline std::vector<double> AsDoubles(const HostTensor& t) {
  std::vector<double> out(t.shape.NumElements());
  if (t.dtype == DType::kFloat32) {
    auto v = t.As<float>();
    out.assign(v.begin(), v.end());
  } else {
    auto v = t.As<uint16_t>();
    for (size_t i = 0; i < v.size(); ++i) out[i] = cpu::Bf16ToFloat(v[i]);
  }
  return out;
}

// Relative L2 error of `got` against `want` (both fp32/bf16); infinite if
// either holds a NaN, i.e. an unwritten (poisoned) element.
inline double Error(const HostTensor& got, const HostTensor& want) {
  return RelativeError(AsDoubles(got), AsDoubles(want));
}

// Number of elements of two fp32/bf16 tensors that differ in their bits,
// NaNs of any payload counting as equal (GPUs produce the canonical NaN
// where the CPU keeps the operand's payload).
inline int64_t BitDifferences(const HostTensor& got, const HostTensor& want) {
  const std::vector<double> g = AsDoubles(got), w = AsDoubles(want);
  const size_t width = DTypeSize(want.dtype);
  int64_t differ = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    if (std::isnan(g[i]) && std::isnan(w[i])) continue;
    differ += std::memcmp(got.bytes.data() + i * width, want.bytes.data() + i * width, width) != 0;
  }
  return differ;
}

using Body = std::function<absl::Status(Ops&, std::vector<TensorDesc>&)>;

// Uploads `tensors` to `ops`, runs body with their engine descriptors,
// synchronizes and downloads them back into a copy that is returned.
inline absl::StatusOr<std::vector<HostTensor>> RunOn(Ops& ops, const std::vector<HostTensor>& tensors,
                                                     const Body& body) {
  std::vector<std::unique_ptr<Buffer>> buffers;
  std::vector<TensorDesc> descs;
  for (const HostTensor& t : tensors) {
    auto buffer = ops.Allocate(t.bytes.size());
    if (!buffer.ok()) return buffer.status();
    absl::Status s = ops.CopyToDevice((*buffer)->data(), t.bytes.data(), t.bytes.size(), nullptr);
    if (!s.ok()) return s;
    descs.push_back(MakeTensor((*buffer)->data(), t.dtype, t.shape));
    buffers.push_back(std::move(*buffer));
  }
  absl::Status s = body(ops, descs);
  absl::Status sync = ops.Synchronize(nullptr);
  if (!s.ok()) return s;
  if (!sync.ok()) return sync;
  std::vector<HostTensor> out = tensors;
  for (size_t i = 0; i < out.size(); ++i) {
    s = ops.CopyToHost(out[i].bytes.data(), descs[i].data, out[i].bytes.size(), nullptr);
    if (!s.ok()) return s;
  }
  return out;
}

// The CUDA engine on GPU 0, created once per test binary (it holds the
// cuBLASLt handle and GEMM plans, which tests may share); null without a GPU.
inline Ops* SharedCudaOps() {
  static Ops* ops = [] {
    auto created = CreateCudaOps(0);
    if (!created.ok()) {
      ADD_FAILURE() << "CreateCudaOps(0): " << created.status();
      return static_cast<Ops*>(nullptr);
    }
    return created->release();
  }();
  return ops;
}

// Fixture: cpu() is the reference engine, gpu() the CUDA engine.
class CpuVsCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cpu_ = CreateCpuOps();
    ASSERT_NE(SharedCudaOps(), nullptr) << "no CUDA device";
  }
  Ops& cpu() { return *cpu_; }
  Ops& gpu() { return *SharedCudaOps(); }

  // Runs body on both engines; returns {cpu, gpu} results. A failure on
  // either engine fails the test and returns the inputs unchanged.
  std::pair<std::vector<HostTensor>, std::vector<HostTensor>> Both(
      const std::vector<HostTensor>& tensors, const Body& body) {
    auto c = RunOn(cpu(), tensors, body);
    auto g = RunOn(gpu(), tensors, body);
    EXPECT_TRUE(c.ok()) << "cpu: " << c.status();
    EXPECT_TRUE(g.ok()) << "cuda: " << g.status();
    if (!c.ok() || !g.ok()) return {tensors, tensors};
    return {*std::move(c), *std::move(g)};
  }

 private:
  std::unique_ptr<Ops> cpu_;
};

}  // namespace testing
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CUDA_ENGINE_HARNESS_FOR_TEST_H_
