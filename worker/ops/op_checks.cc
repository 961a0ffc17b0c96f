// The ops API's argument rules (see op_checks.h), written once for both
// engines. Each op's check looks at its arguments in the order of the
// signature, so the first bad argument is the one named.
#include "worker/ops/op_checks.h"

#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tessera {
namespace {

constexpr std::initializer_list<DType> kFloatTypes = {DType::kFloat32, DType::kBFloat16};
constexpr std::initializer_list<DType> kFp8Types = {DType::kE4M3, DType::kE5M2};

// A tensor of one of `dtypes` and exactly `shape`, with data.
absl::Status CheckTensor(const char* name, const TensorDesc& t, std::initializer_list<DType> dtypes,
                         const Shape& shape) {
  RETURN_IF_ERROR(CheckDType(name, t, dtypes));
  RETURN_IF_ERROR(CheckShape(name, t, shape));
  return CheckData(name, t);
}

// An FP8 cast's source: fp32 or bf16 with data, and a destination whose
// scale is set.
absl::Status CheckCastSource(const TensorDesc& in, const TensorDesc& out) {
  RETURN_IF_ERROR(CheckDType("in", in, kFloatTypes));
  RETURN_IF_ERROR(CheckDType("out", out, kFp8Types));
  if (out.scale == nullptr) return absl::InvalidArgumentError("out.scale: must be set");
  return CheckData("in", in);
}

// An fp32 or bf16 tensor of exactly `count` elements with data.
absl::Status CheckElementwise(const char* name, const TensorDesc& t, int64_t count) {
  RETURN_IF_ERROR(CheckDType(name, t, kFloatTypes));
  if (t.NumElements() != count) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": has ", t.NumElements(),
                                                   " elements, expected ", count, " (",
                                                   t.shape.ToString(), ")"));
  }
  return CheckData(name, t);
}

// RMSNorm's x: fp32 or bf16 [T, H] with H >= 1, with data.
absl::Status CheckNormInput(const TensorDesc& x) {
  RETURN_IF_ERROR(CheckDType("x", x, kFloatTypes));
  RETURN_IF_ERROR(CheckRank("x", x, 2));
  if (x.shape[1] < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("x: hidden size must be at least 1, got ", x.shape.ToString()));
  }
  return CheckData("x", x);
}

absl::Status CheckEps(float eps) {
  if (!(eps >= 0.0f) || std::isinf(eps)) {
    return absl::InvalidArgumentError(absl::StrCat("eps: must be finite and >= 0, got ", eps));
  }
  return absl::OkStatus();
}

// SwiGLU's gate_up: bf16 [T, 2F] with data; *f receives F.
absl::Status CheckGateUp(const TensorDesc& gate_up, int64_t* f) {
  RETURN_IF_ERROR(CheckDType("gate_up", gate_up, {DType::kBFloat16}));
  RETURN_IF_ERROR(CheckRank("gate_up", gate_up, 2));
  if (gate_up.shape[1] % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gate_up: width must be even (gate and up halves), got ", gate_up.shape.ToString()));
  }
  *f = gate_up.shape[1] / 2;
  return CheckData("gate_up", gate_up);
}

// An embedding's ids: int32 [T] with data.
absl::Status CheckIds(const TensorDesc& ids) {
  RETURN_IF_ERROR(CheckDType("ids", ids, {DType::kInt32}));
  RETURN_IF_ERROR(CheckRank("ids", ids, 1));
  return CheckData("ids", ids);
}

}  // namespace

absl::Status CheckDType(const char* name, const TensorDesc& t,
                        std::initializer_list<DType> allowed) {
  for (DType d : allowed) {
    if (t.dtype == d) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(name, ": dtype ", DTypeName(t.dtype), " is not supported here"));
}

absl::Status CheckShape(const char* name, const TensorDesc& t, const Shape& want) {
  if (t.shape == want) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(name, ": shape ", t.shape.ToString(), ", expected ", want.ToString()));
}

absl::Status CheckRank(const char* name, const TensorDesc& t, int rank) {
  if (t.shape.rank == rank) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(name, ": expected a rank-", rank, " tensor, got ", t.shape.ToString()));
}

absl::Status CheckData(const char* name, const TensorDesc& t) {
  if (t.data != nullptr || t.NumElements() == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(name, ": data is null"));
}

// ---- FP8 --------------------------------------------------------------------

absl::Status CheckQuantizeArgs(const TensorDesc& in, const TensorDesc& out) {
  RETURN_IF_ERROR(CheckCastSource(in, out));
  if (in.NumElements() != out.NumElements()) {
    return absl::InvalidArgumentError("out: element count differs from in");
  }
  return CheckData("out", out);
}

absl::Status CheckQuantizeTransposeArgs(const TensorDesc& in, const TensorDesc& out,
                                        const TensorDesc& out_t) {
  RETURN_IF_ERROR(CheckCastSource(in, out));
  RETURN_IF_ERROR(CheckRank("in", in, 2));
  RETURN_IF_ERROR(CheckShape("out_t", out_t, Shape{in.shape[1], in.shape[0]}));
  if (out_t.dtype != out.dtype) {
    return absl::InvalidArgumentError("out_t: dtype must equal out's (it shares out's scale)");
  }
  RETURN_IF_ERROR(CheckData("out_t", out_t));
  if (out.data != nullptr && out.NumElements() != in.NumElements()) {
    return absl::InvalidArgumentError("out: element count differs from in");
  }
  return absl::OkStatus();
}

absl::Status CheckDequantizeArgs(const TensorDesc& in, const TensorDesc& out) {
  RETURN_IF_ERROR(CheckDType("in", in, kFp8Types));
  RETURN_IF_ERROR(CheckDType("out", out, kFloatTypes));
  if (in.scale_inv == nullptr) return absl::InvalidArgumentError("in.scale_inv: must be set");
  if (in.NumElements() != out.NumElements()) {
    return absl::InvalidArgumentError("out: element count differs from in");
  }
  RETURN_IF_ERROR(CheckData("in", in));
  return CheckData("out", out);
}

absl::Status CheckAmaxArgs(const TensorDesc& in, const float* amax) {
  RETURN_IF_ERROR(CheckDType("in", in, kFloatTypes));
  RETURN_IF_ERROR(CheckData("in", in));
  if (amax == nullptr) return absl::InvalidArgumentError("amax: must be set");
  return absl::OkStatus();
}

absl::Status CheckFp8StatsArgs(const TensorDesc& in, DType format, const float* scale,
                               const int64_t* counts) {
  RETURN_IF_ERROR(CheckDType("in", in, kFloatTypes));
  RETURN_IF_ERROR(CheckData("in", in));
  if (format != DType::kE4M3 && format != DType::kE5M2) {
    return absl::InvalidArgumentError(
        absl::StrCat("format: must be e4m3 or e5m2, got ", DTypeName(format)));
  }
  if (scale == nullptr) return absl::InvalidArgumentError("scale: must be set");
  if (counts == nullptr) return absl::InvalidArgumentError("counts: must be set");
  return absl::OkStatus();
}

absl::Status CheckUpdateFp8ScalesArgs(const float* amax, const float* history, const float* scale,
                                      const float* scale_inv, int scale_inv_stride, int n,
                                      int history_len) {
  if (n < 0 || history_len < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "n, history_len: n must be >= 0 and history_len >= 1 (got ", n, ", ", history_len, ")"));
  }
  if (scale_inv_stride < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("scale_inv_stride: must be >= 1 (got ", scale_inv_stride, ")"));
  }
  if (n > 0 &&
      (amax == nullptr || history == nullptr || scale == nullptr || scale_inv == nullptr)) {
    return absl::InvalidArgumentError("amax, history, scale, scale_inv: must all be set");
  }
  return absl::OkStatus();
}

absl::Status CheckTransposeArgs(const TensorDesc& in, const TensorDesc& out) {
  RETURN_IF_ERROR(CheckRank("in", in, 2));
  RETURN_IF_ERROR(CheckShape("out", out, Shape{in.shape[1], in.shape[0]}));
  if (DTypeSize(out.dtype) != DTypeSize(in.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "out: dtype ", DTypeName(out.dtype), " differs in width from in's ", DTypeName(in.dtype)));
  }
  const size_t width = DTypeSize(in.dtype);
  if (width != 1 && width != 2 && width != 4) {
    return absl::InvalidArgumentError("in: elements must be 1, 2 or 4 bytes wide");
  }
  RETURN_IF_ERROR(CheckData("in", in));
  return CheckData("out", out);
}

absl::Status CheckFp8CastOutputs(const char* name, const TensorDesc& out, const char* name_t,
                                 const TensorDesc& out_t, int64_t rows, int64_t cols) {
  RETURN_IF_ERROR(CheckDType(name, out, kFp8Types));
  if (out.data != nullptr) RETURN_IF_ERROR(CheckShape(name, out, Shape{rows, cols}));
  if (out.scale == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(name, ".scale: must be set"));
  }
  RETURN_IF_ERROR(CheckShape(name_t, out_t, Shape{cols, rows}));
  if (out_t.dtype != out.dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_t, ": dtype must equal ", name, "'s (it shares ", name, "'s scale)"));
  }
  return CheckData(name_t, out_t);
}

// ---- GEMM -------------------------------------------------------------------

absl::Status CheckGemmArgs(const TensorDesc& a, bool trans_a, const TensorDesc& b, bool trans_b,
                           const TensorDesc& d, bool accumulate) {
  const std::initializer_list<DType> operand = {DType::kBFloat16, DType::kE4M3, DType::kE5M2};
  RETURN_IF_ERROR(CheckDType("a", a, operand));
  RETURN_IF_ERROR(CheckDType("b", b, operand));
  RETURN_IF_ERROR(CheckDType("d", d, kFloatTypes));
  RETURN_IF_ERROR(CheckRank("a", a, 2));
  RETURN_IF_ERROR(CheckRank("b", b, 2));
  RETURN_IF_ERROR(CheckRank("d", d, 2));
  const bool fp8 = IsFp8(a.dtype);
  if (fp8 != IsFp8(b.dtype)) {
    return absl::InvalidArgumentError("a, b: both operands must be bf16 or both FP8");
  }
  if (fp8 && a.dtype == DType::kE5M2 && b.dtype == DType::kE5M2) {
    return absl::InvalidArgumentError("a, b: e5m2 x e5m2 is not supported");
  }
  if (fp8 && (trans_a || !trans_b)) {
    return absl::InvalidArgumentError(
        "trans_a, trans_b: FP8 operands must be K-contiguous (trans_a=false, trans_b=true)");
  }
  if (fp8 && (a.scale_inv == nullptr || b.scale_inv == nullptr)) {
    return absl::InvalidArgumentError(a.scale_inv == nullptr
                                          ? "a.scale_inv: must be set for an FP8 operand"
                                          : "b.scale_inv: must be set for an FP8 operand");
  }
  if (accumulate && d.dtype != DType::kFloat32) {
    return absl::InvalidArgumentError("d: accumulate (beta=1) needs an fp32 output");
  }
  const int64_t m = trans_a ? a.shape[1] : a.shape[0];
  const int64_t k = trans_a ? a.shape[0] : a.shape[1];
  const int64_t kb = trans_b ? b.shape[1] : b.shape[0];
  const int64_t n = trans_b ? b.shape[0] : b.shape[1];
  if (k != kb) {
    return absl::InvalidArgumentError(
        absl::StrCat("a, b: inner dimensions differ (", k, " vs ", kb, ")"));
  }
  RETURN_IF_ERROR(CheckShape("d", d, Shape{m, n}));
  if (m == 0 || n == 0) return absl::OkStatus();
  for (auto [name, t] :
       {std::pair<const char*, const TensorDesc*>{"a", &a}, {"b", &b}, {"d", &d}}) {
    RETURN_IF_ERROR(CheckData(name, *t));
  }
  return absl::OkStatus();
}

absl::Status CheckGemmAddend(const TensorDesc& c, const TensorDesc& d) {
  RETURN_IF_ERROR(CheckDType("c", c, {DType::kFloat32}));
  RETURN_IF_ERROR(CheckDType("d", d, {DType::kFloat32}));
  RETURN_IF_ERROR(CheckShape("c", c, d.shape));
  RETURN_IF_ERROR(CheckData("c", c));
  const char* c_bytes = static_cast<const char*>(c.data);
  const char* d_bytes = static_cast<const char*>(d.data);
  const int64_t bytes = d.Bytes();
  if (c.data != d.data && c_bytes < d_bytes + bytes && d_bytes < c_bytes + bytes) {
    return absl::InvalidArgumentError("c, d: the addend overlaps the output without being it");
  }
  return absl::OkStatus();
}

// ---- Elementwise and normalisation ------------------------------------------

absl::Status CheckAddArgs(const TensorDesc& a, const TensorDesc& b, const TensorDesc& out) {
  const int64_t n = out.NumElements();
  RETURN_IF_ERROR(CheckElementwise("out", out, n));
  RETURN_IF_ERROR(CheckElementwise("a", a, n));
  return CheckElementwise("b", b, n);
}

absl::Status CheckCastArgs(const TensorDesc& in, const TensorDesc& out) {
  const int64_t n = out.NumElements();
  RETURN_IF_ERROR(CheckElementwise("out", out, n));
  return CheckElementwise("in", in, n);
}

absl::Status CheckEmbeddingForwardArgs(const TensorDesc& ids, const TensorDesc& table,
                                       const TensorDesc& out) {
  RETURN_IF_ERROR(CheckDType("table", table, kFloatTypes));
  RETURN_IF_ERROR(CheckRank("table", table, 2));
  RETURN_IF_ERROR(CheckData("table", table));
  RETURN_IF_ERROR(CheckIds(ids));
  return CheckTensor("out", out, kFloatTypes, Shape{ids.shape[0], table.shape[1]});
}

absl::Status CheckEmbeddingBackwardArgs(const TensorDesc& ids, const TensorDesc& grad_out,
                                        const TensorDesc& grad_table, int64_t first_row,
                                        int64_t vocab) {
  RETURN_IF_ERROR(CheckDType("grad_table", grad_table, {DType::kFloat32}));
  RETURN_IF_ERROR(CheckRank("grad_table", grad_table, 2));
  RETURN_IF_ERROR(CheckData("grad_table", grad_table));
  if (first_row < 0 || vocab < first_row + grad_table.shape[0]) {
    return absl::InvalidArgumentError(absl::StrCat(
        "first_row, vocab: grad_table's ", grad_table.shape[0], " rows from row ", first_row,
        " must lie within a table of ", vocab, " rows"));
  }
  RETURN_IF_ERROR(CheckIds(ids));
  return CheckTensor("grad_out", grad_out, kFloatTypes, Shape{ids.shape[0], grad_table.shape[1]});
}

absl::Status CheckRmsNormForwardArgs(const TensorDesc& x, const TensorDesc& weight, float eps,
                                     const TensorDesc& out, const TensorDesc& rstd) {
  RETURN_IF_ERROR(CheckNormInput(x));
  const int64_t t = x.shape[0], h = x.shape[1];
  RETURN_IF_ERROR(CheckTensor("weight", weight, kFloatTypes, Shape{h}));
  RETURN_IF_ERROR(CheckEps(eps));
  RETURN_IF_ERROR(CheckTensor("out", out, kFloatTypes, Shape{t, h}));
  return CheckTensor("rstd", rstd, {DType::kFloat32}, Shape{t});
}

absl::Status CheckRmsNormForwardQuantizeArgs(const TensorDesc& x, const TensorDesc& weight,
                                             float eps, const TensorDesc& out,
                                             const TensorDesc& out_t, const TensorDesc& rstd) {
  RETURN_IF_ERROR(CheckNormInput(x));
  const int64_t t = x.shape[0], h = x.shape[1];
  RETURN_IF_ERROR(CheckTensor("weight", weight, kFloatTypes, Shape{h}));
  RETURN_IF_ERROR(CheckEps(eps));
  RETURN_IF_ERROR(CheckFp8CastOutputs("out", out, "out_t", out_t, t, h));
  return CheckTensor("rstd", rstd, {DType::kFloat32}, Shape{t});
}

absl::Status CheckRmsNormBackwardArgs(const TensorDesc& grad_out, const TensorDesc& x,
                                      const TensorDesc& weight, const TensorDesc& rstd,
                                      const TensorDesc& grad_x, const TensorDesc& grad_weight) {
  RETURN_IF_ERROR(CheckNormInput(x));
  const int64_t t = x.shape[0], h = x.shape[1];
  RETURN_IF_ERROR(CheckTensor("grad_out", grad_out, kFloatTypes, Shape{t, h}));
  RETURN_IF_ERROR(CheckTensor("weight", weight, kFloatTypes, Shape{h}));
  RETURN_IF_ERROR(CheckTensor("rstd", rstd, {DType::kFloat32}, Shape{t}));
  RETURN_IF_ERROR(CheckTensor("grad_x", grad_x, kFloatTypes, Shape{t, h}));
  return CheckTensor("grad_weight", grad_weight, {DType::kFloat32}, Shape{h});
}

absl::Status CheckSwiGluForwardArgs(const TensorDesc& gate_up, const TensorDesc& out) {
  int64_t f = 0;
  RETURN_IF_ERROR(CheckGateUp(gate_up, &f));
  return CheckTensor("out", out, {DType::kBFloat16}, Shape{gate_up.shape[0], f});
}

absl::Status CheckSwiGluBackwardArgs(const TensorDesc& grad_out, const TensorDesc& gate_up,
                                     const TensorDesc& grad_gate_up) {
  int64_t f = 0;
  RETURN_IF_ERROR(CheckGateUp(gate_up, &f));
  RETURN_IF_ERROR(
      CheckTensor("grad_out", grad_out, {DType::kBFloat16}, Shape{gate_up.shape[0], f}));
  return CheckTensor("grad_gate_up", grad_gate_up, {DType::kBFloat16}, gate_up.shape);
}

absl::Status CheckSwiGluForwardQuantizeArgs(const TensorDesc& gate_up, const TensorDesc& out,
                                            const TensorDesc& out_t) {
  int64_t f = 0;
  RETURN_IF_ERROR(CheckGateUp(gate_up, &f));
  return CheckFp8CastOutputs("out", out, "out_t", out_t, gate_up.shape[0], f);
}

absl::Status CheckSwiGluBackwardQuantizeArgs(const TensorDesc& grad_out, const TensorDesc& gate_up,
                                             const TensorDesc& dgu, const TensorDesc& dgu_t) {
  int64_t f = 0;
  RETURN_IF_ERROR(CheckGateUp(gate_up, &f));
  const int64_t t = gate_up.shape[0];
  RETURN_IF_ERROR(CheckTensor("grad_out", grad_out, {DType::kBFloat16}, Shape{t, f}));
  return CheckFp8CastOutputs("dgu", dgu, "dgu_t", dgu_t, t, 2 * f);
}

// ---- Fused linear + cross-entropy -------------------------------------------

absl::StatusOr<AttentionDims> CheckAttentionForwardArgs(const TensorDesc& qkv, int n_kv_heads,
                                                        const TensorDesc& out,
                                                        const TensorDesc& lse) {
  RETURN_IF_ERROR(CheckDType("qkv", qkv, {DType::kBFloat16}));
  RETURN_IF_ERROR(CheckRank("qkv", qkv, 4));
  if (qkv.shape[3] < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "qkv: expected [B, S, nh + 2*nkv, hd] with hd >= 1, got ", qkv.shape.ToString()));
  }
  if (n_kv_heads < 1) {
    return absl::InvalidArgumentError(absl::StrCat("n_kv_heads: must be >= 1, got ", n_kv_heads));
  }
  RETURN_IF_ERROR(CheckDType("out", out, {DType::kBFloat16}));
  RETURN_IF_ERROR(CheckRank("out", out, 4));
  const int64_t heads = out.shape[2];
  if (heads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("out: expected [B, S, nh, hd] with nh >= 1, got ", out.shape.ToString()));
  }
  RETURN_IF_ERROR(CheckShape("out", out, Shape{qkv.shape[0], qkv.shape[1], heads, qkv.shape[3]}));
  if (heads % n_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "n_kv_heads: must divide the query head count nh = ", heads, " (out's dim 2), got ",
        n_kv_heads));
  }
  if (qkv.shape[2] != heads + 2 * n_kv_heads) {
    return absl::InvalidArgumentError(absl::StrCat(
        "qkv: expected nh + 2*n_kv_heads = ", heads + 2 * n_kv_heads,
        " heads ([B, S, nh + 2*nkv, hd] with nh = ", heads, ", nkv = ", n_kv_heads, "), got ",
        qkv.shape.ToString()));
  }
  const AttentionDims d{qkv.shape[0], qkv.shape[1], heads, n_kv_heads, qkv.shape[3]};
  RETURN_IF_ERROR(CheckData("qkv", qkv));
  RETURN_IF_ERROR(CheckData("out", out));
  RETURN_IF_ERROR(CheckTensor("lse", lse, {DType::kFloat32}, Shape{d.batch, d.heads, d.seq}));
  return d;
}

absl::StatusOr<AttentionDims> CheckAttentionBackwardArgs(const TensorDesc& grad_out,
                                                         const TensorDesc& qkv, int n_kv_heads,
                                                         const TensorDesc& out,
                                                         const TensorDesc& lse,
                                                         const TensorDesc& grad_qkv) {
  ASSIGN_OR_RETURN(const AttentionDims d, CheckAttentionForwardArgs(qkv, n_kv_heads, out, lse));
  RETURN_IF_ERROR(CheckTensor("grad_out", grad_out, {DType::kBFloat16}, out.shape));
  RETURN_IF_ERROR(CheckTensor("grad_qkv", grad_qkv, {DType::kBFloat16}, qkv.shape));
  return d;
}

absl::StatusOr<bool> CheckDocStartsArgs(const TensorDesc& doc_starts, const AttentionDims& d) {
  if (doc_starts.data == nullptr && doc_starts.shape.rank == 0) return false;
  RETURN_IF_ERROR(CheckTensor("doc_starts", doc_starts, {DType::kInt32}, Shape{d.batch, d.seq}));
  return true;
}

absl::StatusOr<AttentionDims> CheckRopeArgs(const char* name, const TensorDesc& qkv,
                                            int n_kv_heads, float theta) {
  RETURN_IF_ERROR(CheckDType(name, qkv, {DType::kBFloat16}));
  RETURN_IF_ERROR(CheckRank(name, qkv, 4));
  if (n_kv_heads < 1) {
    return absl::InvalidArgumentError(absl::StrCat("n_kv_heads: must be >= 1, got ", n_kv_heads));
  }
  const int64_t heads = qkv.shape[2] - 2 * int64_t{n_kv_heads}, hd = qkv.shape[3];
  if (heads < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": expected [B, S, nh + 2*n_kv_heads, hd] with nh >= 1 and n_kv_heads = ",
        n_kv_heads, ", got ", qkv.shape.ToString()));
  }
  if (heads % n_kv_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("n_kv_heads: must divide the query head count nh = ", heads, " (", name,
                     "'s dim 2 minus 2*n_kv_heads), got ", n_kv_heads));
  }
  if (hd < 2 || hd % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": head dim must be even and positive, got ", hd));
  }
  if (!(theta > 0.0f) || std::isinf(theta)) {
    return absl::InvalidArgumentError(absl::StrCat("theta: must be finite and > 0, got ", theta));
  }
  RETURN_IF_ERROR(CheckData(name, qkv));
  return AttentionDims{qkv.shape[0], qkv.shape[1], heads, n_kv_heads, hd};
}

absl::Status CheckAdamShards(absl::Span<const AdamShard> shards) {
  for (size_t i = 0; i < shards.size(); ++i) {
    const AdamShard& s = shards[i];
    const int64_t n = s.master.NumElements();
    auto bad = [&](const char* field, const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat("shard ", i, ": ", field, ": ", why));
    };
    const std::pair<const char*, const TensorDesc*> fp32[] = {
        {"master", &s.master}, {"grad", &s.grad}, {"exp_avg", &s.exp_avg},
        {"exp_avg_sq", &s.exp_avg_sq}};
    for (const auto& [field, t] : fp32) {
      if (t->dtype != DType::kFloat32) {
        return bad(field, absl::StrCat("must be fp32, got ", DTypeName(t->dtype)));
      }
    }
    if (s.fp8.dtype != DType::kE4M3 && s.fp8.dtype != DType::kBFloat16) {
      return bad("fp8", absl::StrCat("must be e4m3 or bf16, got ", DTypeName(s.fp8.dtype)));
    }
    const std::pair<const char*, const TensorDesc*> all[] = {
        {"master", &s.master}, {"grad", &s.grad}, {"exp_avg", &s.exp_avg},
        {"exp_avg_sq", &s.exp_avg_sq}, {"fp8", &s.fp8}};
    for (const auto& [field, t] : all) {
      if (t->NumElements() != n) {
        return bad(field, absl::StrCat("has ", t->NumElements(), " elements, master has ", n));
      }
      if (n > 0 && t->data == nullptr) return bad(field, "data is null for a non-empty shard");
    }
    if (s.fp8.dtype == DType::kE4M3 && s.fp8.scale == nullptr) return bad("fp8.scale", "must be set");
  }
  return absl::OkStatus();
}

absl::Status CheckGradSumSquaresArgs(const float* sum_sq) {
  if (sum_sq == nullptr) return absl::InvalidArgumentError("sum_sq: must be set");
  return absl::OkStatus();
}

absl::Status CheckComputeGradScaleArgs(const float* sum_sq, const float* tokens,
                                       const float* grad_norm, const float* grad_scale) {
  const std::pair<const char*, const float*> scalars[] = {
      {"sum_sq", sum_sq}, {"tokens", tokens}, {"grad_norm", grad_norm}, {"grad_scale", grad_scale}};
  for (const auto& [name, p] : scalars) {
    if (p == nullptr) return absl::InvalidArgumentError(absl::StrCat(name, ": must be set"));
  }
  return absl::OkStatus();
}

absl::Status CheckFusedAdamArgs(const AdamHyper& hyper, const float* grad_scale) {
  if (grad_scale == nullptr) return absl::InvalidArgumentError("grad_scale: must be set");
  if (hyper.step_values == nullptr && hyper.step < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("hyper.step: must be >= 1 (1-based), got ", hyper.step));
  }
  return absl::OkStatus();
}

absl::StatusOr<FusedLossOutputs> CheckFusedLinearCrossEntropyArgs(
    const TensorDesc& x, const TensorDesc& weight, const TensorDesc& targets, int chunk_tokens,
    const float* loss_sum, const float* valid_tokens, const TensorDesc& grad_x,
    const TensorDesc& grad_weight) {
  RETURN_IF_ERROR(CheckDType("x", x, {DType::kBFloat16}));
  RETURN_IF_ERROR(CheckRank("x", x, 2));
  RETURN_IF_ERROR(CheckData("x", x));
  const int64_t tokens = x.shape[0], h = x.shape[1];
  RETURN_IF_ERROR(CheckDType("weight", weight, {DType::kBFloat16}));
  RETURN_IF_ERROR(CheckRank("weight", weight, 2));
  if (weight.shape[1] != h) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight: width ", weight.shape[1], " differs from x's ", h));
  }
  RETURN_IF_ERROR(CheckData("weight", weight));
  const int64_t vocab = weight.shape[0];
  RETURN_IF_ERROR(CheckTensor("targets", targets, {DType::kInt32}, Shape{tokens}));
  if (chunk_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk_tokens: must be >= 1, got ", chunk_tokens));
  }
  if (loss_sum == nullptr) return absl::InvalidArgumentError("loss_sum: must be set");
  if (valid_tokens == nullptr) return absl::InvalidArgumentError("valid_tokens: must be set");
  if (grad_x.data == nullptr && grad_weight.data == nullptr) return FusedLossOutputs::kLossOnly;
  RETURN_IF_ERROR(CheckTensor("grad_x", grad_x, {DType::kBFloat16}, Shape{tokens, h}));
  RETURN_IF_ERROR(CheckTensor("grad_weight", grad_weight, {DType::kFloat32}, Shape{vocab, h}));
  return FusedLossOutputs::kLossAndGradients;
}

}  // namespace tessera
