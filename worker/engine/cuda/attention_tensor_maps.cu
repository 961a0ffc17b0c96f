// Encodes the attention kernels' TMA descriptors (attention_tensor_maps.h)
// with cuTensorMapEncodeTiled, which the driver provides; the build links
// only the CUDA runtime, so the function comes through the runtime's entry
// point query, once per process.

#include "worker/engine/cuda/attention_tensor_maps.h"

#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <mutex>

#include "absl/strings/str_cat.h"

namespace tessera {
namespace cuda {
namespace {

absl::StatusOr<PFN_cuTensorMapEncodeTiled_v12000> EncodeTiledFunction() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  static cudaError_t err = cudaSuccess;
  static std::once_flag once;
  std::call_once(once, [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault,
                                           &found);
    if (err == cudaSuccess && found == cudaDriverEntryPointSuccess) {
      fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
    }
  });
  if (fn == nullptr) {
    return absl::InternalError(absl::StrCat(
        "attention: the driver does not provide cuTensorMapEncodeTiled (", cudaGetErrorString(err),
        ")"));
  }
  return fn;
}

}  // namespace

absl::StatusOr<CUtensorMap> HeadRowsTensorMap(const void* base, int64_t batch, int64_t seq,
                                              int heads, int head_dim, int box_rows) {
  if ((reinterpret_cast<uintptr_t>(base) & 15) != 0) {
    return absl::InvalidArgumentError(
        "attention: the TMA kernels need 16-byte aligned qkv, out and grad_out");
  }
  if (head_dim != 64 && head_dim != 128) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention: head dim ", head_dim, " has no TMA map (64 or 128)"));
  }
  if (box_rows < 1 || box_rows > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention: a TMA box of ", box_rows, " rows (1 to 256)"));
  }
  const absl::StatusOr<PFN_cuTensorMapEncodeTiled_v12000> encode = EncodeTiledFunction();
  if (!encode.ok()) return encode.status();
  const uint64_t row_bytes = uint64_t(head_dim) * 2;
  const cuuint64_t dims[4] = {uint64_t(head_dim), uint64_t(heads), uint64_t(seq),
                              uint64_t(batch)};
  const cuuint64_t strides[3] = {row_bytes, uint64_t(heads) * row_bytes,
                                 uint64_t(seq) * heads * row_bytes};
  const cuuint32_t box[4] = {64, 1, static_cast<cuuint32_t>(box_rows), 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  CUtensorMap map;
  const CUresult r = (*encode)(
      &map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<void*>(base), dims, strides, box,
      element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    return absl::InternalError(
        absl::StrCat("attention: cuTensorMapEncodeTiled failed with CUresult ", int(r)));
  }
  return map;
}

}  // namespace cuda
}  // namespace tessera
