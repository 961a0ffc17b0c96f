// FP8 casts and scaling for the CPU engine (see quantize.h).
#include "worker/engine/cpu/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "worker/engine/cpu/tensor_access.h"

namespace tessera {
namespace cpu {
namespace {

absl::Status CheckCast(const TensorDesc& in, const TensorDesc& out) {
  if (absl::Status s = CheckDType("in", in, {DType::kFloat32, DType::kBFloat16}); !s.ok()) return s;
  if (absl::Status s = CheckDType("out", out, {DType::kE4M3, DType::kE5M2}); !s.ok()) return s;
  if (out.scale == nullptr) return absl::InvalidArgumentError("out.scale: must be set");
  if (absl::Status s = CheckData("in", in); !s.ok()) return s;
  return absl::OkStatus();
}

float FiniteAbsMax(float a, float v) {
  float m = std::fabs(v);
  return std::isnan(m) ? a : std::max(a, m);
}

}  // namespace

absl::Status Quantize(const TensorDesc& in, const TensorDesc& out) {
  if (absl::Status s = CheckCast(in, out); !s.ok()) return s;
  if (in.NumElements() != out.NumElements()) {
    return absl::InvalidArgumentError("out: element count differs from in");
  }
  if (absl::Status s = CheckData("out", out); !s.ok()) return s;
  const float scale = *out.scale;
  uint8_t* dst = static_cast<uint8_t*>(out.data);
  float amax = 0.f;
  for (int64_t i = 0; i < in.NumElements(); ++i) {
    float v = Load(in, i);
    amax = FiniteAbsMax(amax, v);
    dst[i] = EncodeFp8(out.dtype, v * scale);
  }
  if (out.amax != nullptr) *out.amax = std::max(*out.amax, amax);
  if (out.scale_inv != nullptr) *out.scale_inv = 1.0f / scale;
  return absl::OkStatus();
}

absl::Status QuantizeTranspose(const TensorDesc& in, const TensorDesc& out,
                               const TensorDesc& out_t) {
  if (absl::Status s = CheckCast(in, out); !s.ok()) return s;
  if (absl::Status s = CheckRank("in", in, 2); !s.ok()) return s;
  const int64_t rows = in.shape[0], cols = in.shape[1];
  if (absl::Status s = CheckShape("out_t", out_t, Shape{cols, rows}); !s.ok()) return s;
  if (out_t.dtype != out.dtype) {
    return absl::InvalidArgumentError("out_t: dtype must equal out's (it shares out's scale)");
  }
  if (absl::Status s = CheckData("out_t", out_t); !s.ok()) return s;
  if (out.data != nullptr && out.NumElements() != in.NumElements()) {
    return absl::InvalidArgumentError("out: element count differs from in");
  }
  const float scale = *out.scale;
  uint8_t* dst = static_cast<uint8_t*>(out.data);
  uint8_t* dst_t = static_cast<uint8_t*>(out_t.data);
  float amax = 0.f;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      float v = Load(in, r * cols + c);
      amax = FiniteAbsMax(amax, v);
      uint8_t code = EncodeFp8(out.dtype, v * scale);
      if (dst != nullptr) dst[r * cols + c] = code;
      dst_t[c * rows + r] = code;
    }
  }
  if (out.amax != nullptr) *out.amax = std::max(*out.amax, amax);
  if (out.scale_inv != nullptr) *out.scale_inv = 1.0f / scale;
  if (out_t.scale_inv != nullptr) *out_t.scale_inv = 1.0f / scale;
  return absl::OkStatus();
}

absl::Status Dequantize(const TensorDesc& in, const TensorDesc& out) {
  if (absl::Status s = CheckDType("in", in, {DType::kE4M3, DType::kE5M2}); !s.ok()) return s;
  if (absl::Status s = CheckDType("out", out, {DType::kFloat32, DType::kBFloat16}); !s.ok()) return s;
  if (in.scale_inv == nullptr) return absl::InvalidArgumentError("in.scale_inv: must be set");
  if (in.NumElements() != out.NumElements()) {
    return absl::InvalidArgumentError("out: element count differs from in");
  }
  for (int64_t i = 0; i < in.NumElements(); ++i) Store(out, i, Load(in, i) * *in.scale_inv);
  return absl::OkStatus();
}

absl::Status Amax(const TensorDesc& in, float* amax) {
  if (absl::Status s = CheckDType("in", in, {DType::kFloat32, DType::kBFloat16}); !s.ok()) return s;
  if (absl::Status s = CheckData("in", in); !s.ok()) return s;
  if (amax == nullptr) return absl::InvalidArgumentError("amax: must be set");
  float m = 0.f;
  for (int64_t i = 0; i < in.NumElements(); ++i) m = FiniteAbsMax(m, Load(in, i));
  *amax = std::max(*amax, m);
  return absl::OkStatus();
}

absl::Status UpdateFp8Scales(float* amax, float* history, float* scale, float* scale_inv,
                             int scale_inv_stride, int n, int history_len, float fp8_max,
                             int margin, AmaxAlgo algo) {
  if (absl::Status s = CheckUpdateFp8ScalesArgs(amax, history, scale, scale_inv, scale_inv_stride,
                                                n, history_len);
      !s.ok()) {
    return s;
  }
  for (int i = 0; i < n; ++i) {
    for (int h = history_len - 1; h > 0; --h) history[h * n + i] = history[(h - 1) * n + i];
    history[i] = amax[i];
    amax[i] = 0.f;
    float a = history[i];
    if (algo == AmaxAlgo::kMax) {
      for (int h = 1; h < history_len; ++h) a = std::max(a, history[h * n + i]);
    }
    if (a > 0.f && std::isfinite(a)) {
      float s = fp8_max / a / std::ldexp(1.0f, margin);
      if (std::isfinite(s)) {
        scale[i] = s;
        scale_inv[static_cast<int64_t>(i) * scale_inv_stride] = 1.0f / s;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Transpose(const TensorDesc& in, const TensorDesc& out) {
  if (absl::Status s = CheckRank("in", in, 2); !s.ok()) return s;
  const int64_t rows = in.shape[0], cols = in.shape[1];
  if (absl::Status s = CheckShape("out", out, Shape{cols, rows}); !s.ok()) return s;
  const size_t width = DTypeSize(in.dtype);
  if (DTypeSize(out.dtype) != width) return absl::InvalidArgumentError("out: dtype width differs");
  if (absl::Status s = CheckData("in", in); !s.ok()) return s;
  if (absl::Status s = CheckData("out", out); !s.ok()) return s;
  const uint8_t* src = static_cast<const uint8_t*>(in.data);
  uint8_t* dst = static_cast<uint8_t*>(out.data);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      std::memcpy(dst + (c * rows + r) * width, src + (r * cols + c) * width, width);
    }
  }
  if (out.scale_inv != nullptr && in.scale_inv != nullptr) *out.scale_inv = *in.scale_inv;
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace tessera
