// Shape arithmetic and dtype facts for TensorDesc.
#include "worker/ops/tensor.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessera {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kBFloat16:
      return 2;
    case DType::kE4M3:
    case DType::kE5M2:
    case DType::kUInt8:
      return 1;
  }
  return 0;
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kBFloat16: return "bfloat16";
    case DType::kE4M3: return "e4m3";
    case DType::kE5M2: return "e5m2";
    case DType::kInt32: return "int32";
    case DType::kUInt8: return "uint8";
  }
  return "unknown";
}

Shape::Shape(std::initializer_list<int64_t> d) {
  rank = 0;
  for (int64_t v : d) {
    if (rank < kMaxRank) dims[rank++] = v;
  }
}

int64_t Shape::NumElements() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= dims[i];
  return n;
}

bool Shape::operator==(const Shape& other) const {
  if (rank != other.rank) return false;
  for (int i = 0; i < rank; ++i) {
    if (dims[i] != other.dims[i]) return false;
  }
  return true;
}

std::string Shape::ToString() const {
  return absl::StrCat("[", absl::StrJoin(dims, dims + rank, ","), "]");
}

}  // namespace tessera
