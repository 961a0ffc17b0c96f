// Causal attention forward and backward for the CPU reference engine
// (formulas in attention.h). Each (batch, head) slice of q, k, v (and of the
// output and its gradient) is first copied into contiguous fp32 [S, hd]
// scratch, so every inner loop runs over hd consecutive floats.
#include "worker/engine/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/engine/cpu/tensor_access.h"

namespace tessera {
namespace cpu {
namespace {

struct Dims {
  int64_t batch, seq, heads, hd;
  Shape OutShape() const { return Shape{batch, seq, heads, hd}; }
  Shape LseShape() const { return Shape{batch, heads, seq}; }
  // Offset of element 0 of (b, s, part, h) in a [B, S, 3, nh, hd] tensor.
  int64_t QkvRow(int64_t b, int64_t s, int64_t part, int64_t h) const {
    return (((b * seq + s) * 3 + part) * heads + h) * hd;
  }
  // Offset of element 0 of (b, s, h) in a [B, S, nh, hd] tensor.
  int64_t OutRow(int64_t b, int64_t s, int64_t h) const { return ((b * seq + s) * heads + h) * hd; }
};

absl::Status CheckBf16(const char* name, const TensorDesc& t, const Shape& shape) {
  RETURN_IF_ERROR(CheckDType(name, t, {DType::kBFloat16}));
  RETURN_IF_ERROR(CheckShape(name, t, shape));
  return CheckData(name, t);
}

absl::Status CheckLse(const TensorDesc& lse, const Dims& d) {
  RETURN_IF_ERROR(CheckDType("lse", lse, {DType::kFloat32}));
  RETURN_IF_ERROR(CheckShape("lse", lse, d.LseShape()));
  return CheckData("lse", lse);
}

absl::Status ReadDims(const char* name, const TensorDesc& qkv, Dims* d) {
  RETURN_IF_ERROR(CheckDType(name, qkv, {DType::kBFloat16}));
  RETURN_IF_ERROR(CheckRank(name, qkv, 5));
  if (qkv.shape[2] != 3 || qkv.shape[4] < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": expected [B, S, 3, nh, hd] with hd >= 1, got ", qkv.shape.ToString()));
  }
  *d = Dims{qkv.shape[0], qkv.shape[1], qkv.shape[3], qkv.shape[4]};
  return CheckData(name, qkv);
}

// dst [S, hd] fp32 = rows of a bf16 tensor starting at row_offset(s).
template <typename RowOffset>
void GatherRows(const TensorDesc& t, const Dims& d, RowOffset row_offset, float* dst) {
  const uint16_t* p = t.As<const uint16_t>();
  for (int64_t s = 0; s < d.seq; ++s) {
    const uint16_t* row = p + row_offset(s);
    for (int64_t c = 0; c < d.hd; ++c) dst[s * d.hd + c] = Bf16ToFloat(row[c]);
  }
}

// Copies q, k and v of (b, h) into three [S, hd] fp32 buffers.
void GatherQkv(const TensorDesc& qkv, const Dims& d, int64_t b, int64_t h, float* q, float* k,
               float* v) {
  float* dst[3] = {q, k, v};
  for (int64_t part = 0; part < 3; ++part) {
    GatherRows(qkv, d, [&](int64_t s) { return d.QkvRow(b, s, part, h); }, dst[part]);
  }
}

float Dot(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
  for (int64_t c = 0; c < n; ++c) acc += a[c] * b[c];
  return acc;
}

}  // namespace

absl::Status AttentionForward(const TensorDesc& qkv, const TensorDesc& out, const TensorDesc& lse) {
  Dims d;
  RETURN_IF_ERROR(ReadDims("qkv", qkv, &d));
  RETURN_IF_ERROR(CheckBf16("out", out, d.OutShape()));
  RETURN_IF_ERROR(CheckLse(lse, d));
  const int64_t hd = d.hd, n = d.seq * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  thread_local std::vector<float> q, k, v, p, acc;
  q.resize(n);
  k.resize(n);
  v.resize(n);
  p.resize(d.seq);
  acc.resize(hd);
  uint16_t* o = out.As<uint16_t>();
  float* lse_out = lse.As<float>();
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t h = 0; h < d.heads; ++h) {
      GatherQkv(qkv, d, b, h, q.data(), k.data(), v.data());
      for (int64_t i = 0; i < d.seq; ++i) {
        const float* qi = &q[i * hd];
        float m = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          p[j] = Dot(qi, &k[j * hd], hd) * scale;
          m = std::max(m, p[j]);
        }
        float z = 0.0f;
        for (int64_t j = 0; j <= i; ++j) {
          p[j] = std::exp(p[j] - m);
          z += p[j];
        }
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t j = 0; j <= i; ++j) {
          const float* vj = &v[j * hd];
          for (int64_t c = 0; c < hd; ++c) acc[c] += p[j] * vj[c];
        }
        uint16_t* orow = o + d.OutRow(b, i, h);
        for (int64_t c = 0; c < hd; ++c) orow[c] = FloatToBf16(acc[c] / z);
        lse_out[(b * d.heads + h) * d.seq + i] = std::log(z) + m;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status AttentionBackward(const TensorDesc& grad_out, const TensorDesc& qkv,
                               const TensorDesc& out, const TensorDesc& lse,
                               const TensorDesc& grad_qkv) {
  Dims d;
  RETURN_IF_ERROR(ReadDims("qkv", qkv, &d));
  RETURN_IF_ERROR(CheckBf16("grad_out", grad_out, d.OutShape()));
  RETURN_IF_ERROR(CheckBf16("out", out, d.OutShape()));
  RETURN_IF_ERROR(CheckLse(lse, d));
  RETURN_IF_ERROR(CheckBf16("grad_qkv", grad_qkv, qkv.shape));
  const int64_t hd = d.hd, n = d.seq * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  thread_local std::vector<float> q, k, v, dout, o, dq, dk, dv;
  for (std::vector<float>* buf : {&q, &k, &v, &dout, &o, &dq, &dk, &dv}) buf->resize(n);
  const float* lse_in = lse.As<const float>();
  uint16_t* grad = grad_qkv.As<uint16_t>();
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t h = 0; h < d.heads; ++h) {
      GatherQkv(qkv, d, b, h, q.data(), k.data(), v.data());
      auto out_row = [&](int64_t s) { return d.OutRow(b, s, h); };
      GatherRows(grad_out, d, out_row, dout.data());
      GatherRows(out, d, out_row, o.data());
      std::fill(dq.begin(), dq.end(), 0.0f);
      std::fill(dk.begin(), dk.end(), 0.0f);
      std::fill(dv.begin(), dv.end(), 0.0f);
      for (int64_t i = 0; i < d.seq; ++i) {
        const float* qi = &q[i * hd];
        const float* doi = &dout[i * hd];
        float* dqi = &dq[i * hd];
        const float l = lse_in[(b * d.heads + h) * d.seq + i];
        const float di = Dot(doi, &o[i * hd], hd);
        for (int64_t j = 0; j <= i; ++j) {
          const float* kj = &k[j * hd];
          const float pij = std::exp(Dot(qi, kj, hd) * scale - l);
          const float ds = pij * (Dot(doi, &v[j * hd], hd) - di) * scale;
          float* dkj = &dk[j * hd];
          float* dvj = &dv[j * hd];
          for (int64_t c = 0; c < hd; ++c) {
            dqi[c] += ds * kj[c];
            dkj[c] += ds * qi[c];
            dvj[c] += pij * doi[c];
          }
        }
      }
      const float* src[3] = {dq.data(), dk.data(), dv.data()};
      for (int64_t s = 0; s < d.seq; ++s) {
        for (int64_t part = 0; part < 3; ++part) {
          uint16_t* row = grad + d.QkvRow(b, s, part, h);
          const float* from = src[part] + s * hd;
          for (int64_t c = 0; c < hd; ++c) row[c] = FloatToBf16(from[c]);
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace tessera
