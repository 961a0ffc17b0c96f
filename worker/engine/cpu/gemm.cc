// OpenBLAS-backed GEMM for the CPU engine (see gemm.h).
#include "worker/engine/cpu/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "worker/engine/cpu/tensor_access.h"
#include "worker/ops/op_checks.h"

namespace tessera {
namespace cpu {

absl::Status Gemm(const TensorDesc& a, bool trans_a, const TensorDesc& b, bool trans_b,
                  const TensorDesc& d, bool accumulate) {
  if (absl::Status s = CheckGemmArgs(a, trans_a, b, trans_b, d, accumulate); !s.ok()) return s;
  const bool fp8 = IsFp8(a.dtype);
  const int64_t m = trans_a ? a.shape[1] : a.shape[0];
  const int64_t k = trans_a ? a.shape[0] : a.shape[1];
  const int64_t n = trans_b ? b.shape[0] : b.shape[1];
  if (m == 0 || n == 0) return absl::OkStatus();

  thread_local std::vector<float> a32, b32, d32;
  LoadAll(a, a32);
  LoadAll(b, b32);
  const float alpha = fp8 ? *a.scale_inv * *b.scale_inv : 1.0f;
  float* out;
  if (d.dtype == DType::kFloat32) {
    out = static_cast<float*>(d.data);
  } else {
    d32.resize(m * n);
    out = d32.data();
  }
  if (k == 0) {
    if (!accumulate) std::fill(out, out + m * n, 0.f);
  } else {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
                static_cast<blasint>(n), static_cast<blasint>(k), alpha, a32.data(),
                static_cast<blasint>(a.shape[1]), b32.data(), static_cast<blasint>(b.shape[1]),
                accumulate ? 1.0f : 0.0f, out, static_cast<blasint>(n));
  }
  if (d.dtype == DType::kBFloat16) {
    for (int64_t i = 0; i < m * n; ++i) Store(d, i, out[i]);
  }
  return absl::OkStatus();
}

absl::Status GemmAdd(const TensorDesc& a, bool trans_a, const TensorDesc& b, bool trans_b,
                     const TensorDesc& c, const TensorDesc& d) {
  if (absl::Status s = CheckGemmAddend(c, d); !s.ok()) return s;
  const int64_t bytes = d.Bytes();
  // Shapes and operands are checked by Gemm before d is read; d takes c
  // only once they hold.
  if (absl::Status s = CheckGemmArgs(a, trans_a, b, trans_b, d, /*accumulate=*/true); !s.ok()) {
    return s;
  }
  if (c.data != d.data && bytes > 0) std::memcpy(d.data, c.data, static_cast<size_t>(bytes));
  return Gemm(a, trans_a, b, trans_b, d, /*accumulate=*/true);
}

}  // namespace cpu
}  // namespace tessera
