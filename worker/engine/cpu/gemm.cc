// OpenBLAS-backed GEMM for the CPU engine (see gemm.h).
#include "worker/engine/cpu/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "worker/engine/cpu/tensor_access.h"

namespace tessera {
namespace cpu {

namespace {

// The operands and output of a GEMM against Ops::Gemm's rules; the data
// pointers too when the output is not empty.
absl::Status CheckGemm(const TensorDesc& a, bool trans_a, const TensorDesc& b, bool trans_b,
                       const TensorDesc& d, bool accumulate) {
  const std::initializer_list<DType> operand = {DType::kBFloat16, DType::kE4M3, DType::kE5M2};
  if (absl::Status s = CheckDType("a", a, operand); !s.ok()) return s;
  if (absl::Status s = CheckDType("b", b, operand); !s.ok()) return s;
  if (absl::Status s = CheckDType("d", d, {DType::kFloat32, DType::kBFloat16}); !s.ok()) return s;
  if (absl::Status s = CheckRank("a", a, 2); !s.ok()) return s;
  if (absl::Status s = CheckRank("b", b, 2); !s.ok()) return s;
  if (absl::Status s = CheckRank("d", d, 2); !s.ok()) return s;
  const bool fp8 = IsFp8(a.dtype);
  if (fp8 != IsFp8(b.dtype)) {
    return absl::InvalidArgumentError("a, b: both operands must be bf16 or both FP8");
  }
  if (fp8 && a.dtype == DType::kE5M2 && b.dtype == DType::kE5M2) {
    return absl::InvalidArgumentError("a, b: e5m2 x e5m2 is not supported");
  }
  if (fp8 && (trans_a || !trans_b)) {
    return absl::InvalidArgumentError(
        "FP8 operands must be K-contiguous: trans_a=false, trans_b=true");
  }
  if (fp8 && (a.scale_inv == nullptr || b.scale_inv == nullptr)) {
    return absl::InvalidArgumentError("FP8 operands need scale_inv");
  }
  if (accumulate && d.dtype != DType::kFloat32) {
    return absl::InvalidArgumentError("d: accumulate (beta=1) needs an fp32 output");
  }
  const int64_t m = trans_a ? a.shape[1] : a.shape[0];
  const int64_t k = trans_a ? a.shape[0] : a.shape[1];
  const int64_t kb = trans_b ? b.shape[1] : b.shape[0];
  const int64_t n = trans_b ? b.shape[0] : b.shape[1];
  if (k != kb) {
    return absl::InvalidArgumentError(absl::StrCat("a, b: inner dimensions differ (", k, " vs ", kb,
                                                   ")"));
  }
  if (absl::Status s = CheckShape("d", d, Shape{m, n}); !s.ok()) return s;
  if (m == 0 || n == 0) return absl::OkStatus();
  for (auto [name, t] :
       {std::pair<const char*, const TensorDesc*>{"a", &a}, {"b", &b}, {"d", &d}}) {
    if (absl::Status s = CheckData(name, *t); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Gemm(const TensorDesc& a, bool trans_a, const TensorDesc& b, bool trans_b,
                  const TensorDesc& d, bool accumulate) {
  if (absl::Status s = CheckGemm(a, trans_a, b, trans_b, d, accumulate); !s.ok()) return s;
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
  if (absl::Status s = CheckGemm(a, trans_a, b, trans_b, d, /*accumulate=*/true); !s.ok()) {
    return s;
  }
  if (c.data != d.data && bytes > 0) std::memcpy(d.data, c.data, static_cast<size_t>(bytes));
  return Gemm(a, trans_a, b, trans_b, d, /*accumulate=*/true);
}

}  // namespace cpu
}  // namespace tessera
