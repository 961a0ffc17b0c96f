// Non-owning tensor descriptors: the currency of the ops API.
//
// Every op in worker/ops/ops.h takes TensorDesc values that point at memory
// owned elsewhere (host memory for the CPU engine, device memory for the CUDA
// engine). FP8 tensors carry their scaling metadata alongside the data, as in
// TransformerEngine: `scale` converts high precision to FP8
// (fp8 = saturate(round_to_nearest_even(x * scale))), `scale_inv` converts
// back (x ~= fp8 * scale_inv), and `amax` receives max |x| of the
// high-precision values an op quantized. All three are single floats living
// in the same memory space as the data.
#ifndef TESSERA_WORKER_OPS_TENSOR_H_
#define TESSERA_WORKER_OPS_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace tessera {

enum class DType : uint8_t {
  kFloat32 = 0,
  kBFloat16 = 1,
  kE4M3 = 2,   // OCP FP8 E4M3 (max 448), weights and activations in forward
  kE5M2 = 3,   // OCP FP8 E5M2 (max 57344), gradients in backward
  kInt32 = 4,
  kUInt8 = 5,  // raw bytes (e.g. FP8 data on the wire)
};

// Bytes per element of `dtype`.
size_t DTypeSize(DType dtype);
const char* DTypeName(DType dtype);
inline bool IsFp8(DType dtype) { return dtype == DType::kE4M3 || dtype == DType::kE5M2; }

// Row-major shape of up to 5 dimensions (attention uses [B, S, nh + 2 nkv, hd]). A 0-d shape (rank 0) has one element.
struct Shape {
  static constexpr int kMaxRank = 5;
  int rank = 0;
  int64_t dims[kMaxRank] = {0, 0, 0, 0, 0};

  Shape() = default;
  Shape(std::initializer_list<int64_t> d);
  int64_t NumElements() const;
  int64_t operator[](int i) const { return dims[i]; }
  bool operator==(const Shape& other) const;
  std::string ToString() const;
};

struct TensorDesc {
  void* data = nullptr;  // not owned; may be null only when NumElements()==0
  DType dtype = DType::kFloat32;
  Shape shape;
  // FP8 metadata; null for non-FP8 tensors unless an op documents otherwise.
  float* scale = nullptr;
  float* scale_inv = nullptr;
  float* amax = nullptr;

  int64_t NumElements() const { return shape.NumElements(); }
  size_t Bytes() const { return static_cast<size_t>(NumElements()) * DTypeSize(dtype); }
  template <typename T>
  T* As() const { return static_cast<T*>(data); }
};

inline TensorDesc MakeTensor(void* data, DType dtype, Shape shape) {
  TensorDesc t;
  t.data = data;
  t.dtype = dtype;
  t.shape = shape;
  return t;
}

// Opaque execution stream. The CPU engine runs synchronously and ignores it;
// the CUDA engine reinterprets it as a cudaStream_t. nullptr means the
// engine's default stream.
struct Stream;

}  // namespace tessera

#endif  // TESSERA_WORKER_OPS_TENSOR_H_
