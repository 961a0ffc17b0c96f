// Causal attention forward and backward for the CPU engine (see attention.h).
#include "worker/engine/cpu/attention.h"

#include <cmath>
#include <vector>

#include "worker/engine/cpu/tensor_access.h"

namespace tessera {
namespace cpu {
namespace {

struct Dims {
  int64_t batch, seq, heads, hd;
};

absl::StatusOr<Dims> CheckQkv(const TensorDesc& qkv) {
  if (absl::Status s = CheckRank("qkv", qkv, 5); !s.ok()) return s;
  if (absl::Status s = CheckDType("qkv", qkv, {DType::kBFloat16}); !s.ok()) return s;
  if (qkv.shape[2] != 3) return absl::InvalidArgumentError("qkv: dim 2 must be 3 (q, k, v)");
  return Dims{qkv.shape[0], qkv.shape[1], qkv.shape[3], qkv.shape[4]};
}

// Copies part (0 q, 1 k, 2 v) of head h of batch b into dst [S, hd] fp32.
void Gather(const TensorDesc& qkv, const Dims& d, int64_t b, int64_t part, int64_t h, float* dst) {
  const uint16_t* p = static_cast<const uint16_t*>(qkv.data);
  for (int64_t s = 0; s < d.seq; ++s) {
    const uint16_t* row = p + (((b * d.seq + s) * 3 + part) * d.heads + h) * d.hd;
    for (int64_t i = 0; i < d.hd; ++i) dst[s * d.hd + i] = Bf16ToFloat(row[i]);
  }
}

}  // namespace

absl::Status AttentionForward(const TensorDesc& qkv, const TensorDesc& out, const TensorDesc& lse) {
  absl::StatusOr<Dims> dims = CheckQkv(qkv);
  if (!dims.ok()) return dims.status();
  const Dims d = *dims;
  if (absl::Status s = CheckShape("out", out, Shape{d.batch, d.seq, d.heads, d.hd}); !s.ok()) return s;
  if (absl::Status s = CheckShape("lse", lse, Shape{d.batch, d.heads, d.seq}); !s.ok()) return s;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.hd));
  std::vector<float> q(d.seq * d.hd), k(d.seq * d.hd), v(d.seq * d.hd), p(d.seq), o(d.hd);
  float* lse_p = static_cast<float*>(lse.data);
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t h = 0; h < d.heads; ++h) {
      Gather(qkv, d, b, 0, h, q.data());
      Gather(qkv, d, b, 1, h, k.data());
      Gather(qkv, d, b, 2, h, v.data());
      for (int64_t i = 0; i < d.seq; ++i) {
        float m = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          float s = 0.f;
          for (int64_t c = 0; c < d.hd; ++c) s += q[i * d.hd + c] * k[j * d.hd + c];
          p[j] = s * scale;
          m = std::max(m, p[j]);
        }
        float sum = 0.f;
        for (int64_t j = 0; j <= i; ++j) {
          p[j] = std::exp(p[j] - m);
          sum += p[j];
        }
        std::fill(o.begin(), o.end(), 0.f);
        for (int64_t j = 0; j <= i; ++j) {
          const float w = p[j] / sum;
          for (int64_t c = 0; c < d.hd; ++c) o[c] += w * v[j * d.hd + c];
        }
        for (int64_t c = 0; c < d.hd; ++c) Store(out, ((b * d.seq + i) * d.heads + h) * d.hd + c, o[c]);
        lse_p[(b * d.heads + h) * d.seq + i] = std::log(sum) + m;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status AttentionBackward(const TensorDesc& grad_out, const TensorDesc& qkv,
                               const TensorDesc& out, const TensorDesc& lse,
                               const TensorDesc& grad_qkv) {
  absl::StatusOr<Dims> dims = CheckQkv(qkv);
  if (!dims.ok()) return dims.status();
  const Dims d = *dims;
  const Shape o_shape{d.batch, d.seq, d.heads, d.hd};
  if (absl::Status s = CheckShape("grad_out", grad_out, o_shape); !s.ok()) return s;
  if (absl::Status s = CheckShape("out", out, o_shape); !s.ok()) return s;
  if (absl::Status s = CheckShape("lse", lse, Shape{d.batch, d.heads, d.seq}); !s.ok()) return s;
  if (absl::Status s = CheckShape("grad_qkv", grad_qkv, qkv.shape); !s.ok()) return s;
  if (absl::Status s = CheckDType("grad_qkv", grad_qkv, {DType::kBFloat16}); !s.ok()) return s;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.hd));
  const int64_t n = d.seq * d.hd;
  std::vector<float> q(n), k(n), v(n), dout(n), o(n), dq(n), dk(n), dv(n), p(d.seq);
  const float* lse_p = static_cast<const float*>(lse.data);
  uint16_t* g = static_cast<uint16_t*>(grad_qkv.data);
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t h = 0; h < d.heads; ++h) {
      Gather(qkv, d, b, 0, h, q.data());
      Gather(qkv, d, b, 1, h, k.data());
      Gather(qkv, d, b, 2, h, v.data());
      for (int64_t s = 0; s < d.seq; ++s) {
        for (int64_t c = 0; c < d.hd; ++c) {
          int64_t idx = ((b * d.seq + s) * d.heads + h) * d.hd + c;
          dout[s * d.hd + c] = Load(grad_out, idx);
          o[s * d.hd + c] = Load(out, idx);
        }
      }
      std::fill(dq.begin(), dq.end(), 0.f);
      std::fill(dk.begin(), dk.end(), 0.f);
      std::fill(dv.begin(), dv.end(), 0.f);
      for (int64_t i = 0; i < d.seq; ++i) {
        const float l = lse_p[(b * d.heads + h) * d.seq + i];
        float di = 0.f;
        for (int64_t c = 0; c < d.hd; ++c) di += dout[i * d.hd + c] * o[i * d.hd + c];
        for (int64_t j = 0; j <= i; ++j) {
          float s = 0.f, dp = 0.f;
          for (int64_t c = 0; c < d.hd; ++c) {
            s += q[i * d.hd + c] * k[j * d.hd + c];
            dp += dout[i * d.hd + c] * v[j * d.hd + c];
          }
          const float pij = std::exp(s * scale - l);
          const float ds = pij * (dp - di) * scale;
          for (int64_t c = 0; c < d.hd; ++c) {
            dv[j * d.hd + c] += pij * dout[i * d.hd + c];
            dq[i * d.hd + c] += ds * k[j * d.hd + c];
            dk[j * d.hd + c] += ds * q[i * d.hd + c];
          }
        }
      }
      for (int64_t s = 0; s < d.seq; ++s) {
        for (int64_t part = 0; part < 3; ++part) {
          const float* src = part == 0 ? dq.data() : part == 1 ? dk.data() : dv.data();
          uint16_t* row = g + (((b * d.seq + s) * 3 + part) * d.heads + h) * d.hd;
          for (int64_t c = 0; c < d.hd; ++c) row[c] = FloatToBf16(src[s * d.hd + c]);
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace tessera
