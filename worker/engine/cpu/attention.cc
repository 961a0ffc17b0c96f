// Causal grouped-query attention forward and backward for the CPU reference
// engine (formulas in attention.h). The loops run per (batch, kv head): the
// kv head's keys and values are copied once into contiguous fp32 [S, hd]
// scratch and reused by every query head of its group, and in the backward
// their gradients accumulate in fp32 over the group before one bf16
// rounding, so every inner loop runs over hd consecutive floats.
#include "worker/engine/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/engine/cpu/tensor_access.h"
#include "worker/ops/op_checks.h"

namespace tessera {
namespace cpu {
namespace {

struct Dims {
  int64_t batch, seq, heads, kv_heads, hd;
  int64_t group() const { return heads / kv_heads; }  // query heads per kv head
  Shape OutShape() const { return Shape{batch, seq, heads, hd}; }
  Shape LseShape() const { return Shape{batch, heads, seq}; }
  // Offset of element 0 of head `head` (of the nh + 2*nkv) of token (b, s)
  // in a [B, S, nh + 2*nkv, hd] tensor.
  int64_t QkvRow(int64_t b, int64_t s, int64_t head) const {
    return ((b * seq + s) * (heads + 2 * kv_heads) + head) * hd;
  }
  int64_t KeyHead(int64_t g) const { return heads + g; }
  int64_t ValueHead(int64_t g) const { return heads + kv_heads + g; }
  // Offset of element 0 of (b, s, h) in a [B, S, nh, hd] tensor.
  int64_t OutRow(int64_t b, int64_t s, int64_t h) const { return ((b * seq + s) * heads + h) * hd; }
};

// The checked shapes, in this file's terms.
Dims FromChecked(const AttentionDims& a) {
  return Dims{a.batch, a.seq, a.heads, a.kv_heads, a.head_dim};
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

// Rows of a bf16 tensor starting at row_offset(s) = src [S, hd], rounded.
template <typename RowOffset>
void ScatterRows(const float* src, const Dims& d, RowOffset row_offset, const TensorDesc& t) {
  uint16_t* p = t.As<uint16_t>();
  for (int64_t s = 0; s < d.seq; ++s) {
    uint16_t* row = p + row_offset(s);
    for (int64_t c = 0; c < d.hd; ++c) row[c] = FloatToBf16(src[s * d.hd + c]);
  }
}

// Copies head `head` of qkv for batch b into an [S, hd] fp32 buffer.
void GatherHead(const TensorDesc& qkv, const Dims& d, int64_t b, int64_t head, float* dst) {
  GatherRows(qkv, d, [&](int64_t s) { return d.QkvRow(b, s, head); }, dst);
}

// Where each query's keys begin: doc_starts checked against the rule of
// ops.h, or all zeros for whole sequences. [B * S].
absl::StatusOr<std::vector<int32_t>> FirstKeys(const TensorDesc& doc_starts, const Dims& d) {
  const AttentionDims dims{d.batch, d.seq, d.heads, d.kv_heads, d.hd};
  ASSIGN_OR_RETURN(const bool documents, CheckDocStartsArgs(doc_starts, dims));
  std::vector<int32_t> first(d.batch * d.seq, 0);
  if (!documents) return first;
  const int32_t* in = doc_starts.As<const int32_t>();
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t i = 0; i < d.seq; ++i) {
      const int32_t v = in[b * d.seq + i];
      const int32_t previous = i == 0 ? 0 : in[b * d.seq + i - 1];
      if (v != previous && v != i) {
        return absl::InvalidArgumentError(absl::StrCat(
            "doc_starts[", b, ", ", i, "]: must be ", previous,
            " (the document of the token before) or ", i, " (a document starting here), got ", v));
      }
      first[b * d.seq + i] = v;
    }
  }
  return first;
}

float Dot(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
  for (int64_t c = 0; c < n; ++c) acc += a[c] * b[c];
  return acc;
}

}  // namespace

absl::Status AttentionForward(const TensorDesc& qkv, int n_kv_heads, const TensorDesc& out,
                              const TensorDesc& lse, const TensorDesc& doc_starts) {
  ASSIGN_OR_RETURN(const AttentionDims checked,
                   CheckAttentionForwardArgs(qkv, n_kv_heads, out, lse));
  const Dims d = FromChecked(checked);
  ASSIGN_OR_RETURN(const std::vector<int32_t> first_key, FirstKeys(doc_starts, d));
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
    for (int64_t g = 0; g < d.kv_heads; ++g) {
      GatherHead(qkv, d, b, d.KeyHead(g), k.data());
      GatherHead(qkv, d, b, d.ValueHead(g), v.data());
      for (int64_t h = g * d.group(); h < (g + 1) * d.group(); ++h) {
        GatherHead(qkv, d, b, h, q.data());
        for (int64_t i = 0; i < d.seq; ++i) {
          const float* qi = &q[i * hd];
          const int64_t first = first_key[b * d.seq + i];
          float m = -INFINITY;
          for (int64_t j = first; j <= i; ++j) {
            p[j] = Dot(qi, &k[j * hd], hd) * scale;
            m = std::max(m, p[j]);
          }
          float z = 0.0f;
          for (int64_t j = first; j <= i; ++j) {
            p[j] = std::exp(p[j] - m);
            z += p[j];
          }
          std::fill(acc.begin(), acc.end(), 0.0f);
          for (int64_t j = first; j <= i; ++j) {
            const float* vj = &v[j * hd];
            for (int64_t c = 0; c < hd; ++c) acc[c] += p[j] * vj[c];
          }
          uint16_t* orow = o + d.OutRow(b, i, h);
          for (int64_t c = 0; c < hd; ++c) orow[c] = FloatToBf16(acc[c] / z);
          lse_out[(b * d.heads + h) * d.seq + i] = std::log(z) + m;
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status AttentionBackward(const TensorDesc& grad_out, const TensorDesc& qkv, int n_kv_heads,
                               const TensorDesc& out, const TensorDesc& lse,
                               const TensorDesc& grad_qkv, const TensorDesc& doc_starts) {
  ASSIGN_OR_RETURN(const AttentionDims checked,
                   CheckAttentionBackwardArgs(grad_out, qkv, n_kv_heads, out, lse, grad_qkv));
  const Dims d = FromChecked(checked);
  ASSIGN_OR_RETURN(const std::vector<int32_t> first_key, FirstKeys(doc_starts, d));
  const int64_t hd = d.hd, n = d.seq * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  thread_local std::vector<float> q, k, v, dout, o, dq, dk, dv;
  for (std::vector<float>* buf : {&q, &k, &v, &dout, &o, &dq, &dk, &dv}) buf->resize(n);
  const float* lse_in = lse.As<const float>();
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t g = 0; g < d.kv_heads; ++g) {
      GatherHead(qkv, d, b, d.KeyHead(g), k.data());
      GatherHead(qkv, d, b, d.ValueHead(g), v.data());
      std::fill(dk.begin(), dk.end(), 0.0f);
      std::fill(dv.begin(), dv.end(), 0.0f);
      for (int64_t h = g * d.group(); h < (g + 1) * d.group(); ++h) {
        GatherHead(qkv, d, b, h, q.data());
        auto out_row = [&](int64_t s) { return d.OutRow(b, s, h); };
        GatherRows(grad_out, d, out_row, dout.data());
        GatherRows(out, d, out_row, o.data());
        std::fill(dq.begin(), dq.end(), 0.0f);
        for (int64_t i = 0; i < d.seq; ++i) {
          const float* qi = &q[i * hd];
          const float* doi = &dout[i * hd];
          float* dqi = &dq[i * hd];
          const float l = lse_in[(b * d.heads + h) * d.seq + i];
          const float di = Dot(doi, &o[i * hd], hd);
          for (int64_t j = first_key[b * d.seq + i]; j <= i; ++j) {
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
        ScatterRows(dq.data(), d, [&](int64_t s) { return d.QkvRow(b, s, h); }, grad_qkv);
      }
      ScatterRows(dk.data(), d, [&](int64_t s) { return d.QkvRow(b, s, d.KeyHead(g)); }, grad_qkv);
      ScatterRows(dv.data(), d, [&](int64_t s) { return d.QkvRow(b, s, d.ValueHead(g)); },
                  grad_qkv);
    }
  }
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace tessera
