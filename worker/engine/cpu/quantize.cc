// FP8 casts and scaling for the CPU engine (see quantize.h).
#include "worker/engine/cpu/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "worker/engine/cpu/tensor_access.h"
#include "worker/ops/op_checks.h"

namespace tessera {
namespace cpu {
namespace {

float FiniteAbsMax(float a, float v) {
  float m = std::fabs(v);
  return std::isnan(m) ? a : std::max(a, m);
}

}  // namespace

absl::Status Quantize(const TensorDesc& in, const TensorDesc& out) {
  if (absl::Status s = CheckQuantizeArgs(in, out); !s.ok()) return s;
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
  if (absl::Status s = CheckQuantizeTransposeArgs(in, out, out_t); !s.ok()) return s;
  const int64_t rows = in.shape[0], cols = in.shape[1];
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
  if (absl::Status s = CheckDequantizeArgs(in, out); !s.ok()) return s;
  for (int64_t i = 0; i < in.NumElements(); ++i) Store(out, i, Load(in, i) * *in.scale_inv);
  return absl::OkStatus();
}

absl::Status Amax(const TensorDesc& in, float* amax) {
  if (absl::Status s = CheckAmaxArgs(in, amax); !s.ok()) return s;
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
  if (absl::Status s = CheckTransposeArgs(in, out); !s.ok()) return s;
  const int64_t rows = in.shape[0], cols = in.shape[1];
  const size_t width = DTypeSize(in.dtype);
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
