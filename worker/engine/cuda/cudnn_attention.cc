// cuDNN's fused attention for causal grouped-query attention, built through
// the backend graph API (see cudnn_attention.h for the contract).
//
// cuDNN has no single "attention" operation on Hopper in the releases we
// run (9.14 on the GPU hosts): its fused flash-attention engines are chosen
// when an operation graph has the shape of attention. So the graphs below
// spell attention out as cuDNN expects it, op by op:
//   forward:  S = Q K^T; S *= scale; causal select; m = rowmax S;
//             E = exp(S - m); l = rowsum E; lse = m + log l; P = E / l;
//             O = P V
//   backward: D = rowsum(dO * O) * 1; S = Q K^T * scale - lse; causal
//             select; P = exp S; dV = P^T dO; dS = (dO V^T - D) * P * scale;
//             dK = dS^T Q; dQ = dS K
// With grouped-query heads, dK and dV are formed per query head and summed
// over each group by a reduction over the head dimension.
//
// Layouts are expressed by strides, so Q, K and V are read from the packed
// qkv tensor and dQ, dK and dV written into grad_qkv without copies: a token
// row holds (heads + 2 kv_heads) * hd values.
//
// Every failure carries cuDNN's own message (cudnnGetLastErrorString). A
// shape cuDNN cannot plan returns UNIMPLEMENTED, and the caller keeps our
// kernels for it.
#include "worker/engine/cuda/cudnn_attention.h"

#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tessera {
namespace cuda {
namespace {

std::string CudnnMessage(cudnnStatus_t status, const char* what) {
  char detail[1024] = {0};
  cudnnGetLastErrorString(detail, sizeof(detail));
  return absl::StrCat("cuDNN attention: ", what, ": ", cudnnGetErrorString(status),
                      detail[0] ? absl::StrCat(" (", detail, ")") : std::string());
}

absl::Status CudnnStatus(cudnnStatus_t status, const char* what) {
  if (status == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  const std::string msg = CudnnMessage(status, what);
  if (status == CUDNN_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(msg);
  // cuDNN 9 refines each status class in its last three digits
  // (CUDNN_STATUS_NOT_SUPPORTED is 3000, CUDNN_STATUS_NOT_SUPPORTED_SHAPE 3002).
  const int status_class = (static_cast<int>(status) / 1000) * 1000;
  if (status_class == CUDNN_STATUS_NOT_SUPPORTED || status_class == CUDNN_STATUS_BAD_PARAM) {
    return absl::UnimplementedError(msg);
  }
  return absl::InternalError(msg);
}

#define CUDNN_RETURN_IF_ERROR(expr)                                       \
  do {                                                                     \
    const cudnnStatus_t cudnn_status_ = (expr);                            \
    if (cudnn_status_ != CUDNN_STATUS_SUCCESS) return CudnnStatus(cudnn_status_, #expr); \
  } while (0)

// Owns one backend descriptor.
class Descriptor {
 public:
  Descriptor() = default;
  explicit Descriptor(cudnnBackendDescriptor_t d) : d_(d) {}
  Descriptor(Descriptor&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  Descriptor& operator=(Descriptor&& o) noexcept {
    std::swap(d_, o.d_);
    return *this;
  }
  ~Descriptor() {
    if (d_ != nullptr) cudnnBackendDestroyDescriptor(d_);
  }
  cudnnBackendDescriptor_t get() const { return d_; }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

// One tensor of a graph: its descriptor, its id in the variant pack, and
// the layout a pointwise op's virtual output takes from it.
struct GraphTensor {
  cudnnBackendDescriptor_t desc = nullptr;
  int64_t uid = 0;
  std::vector<int64_t> dims, strides;
};

using Dims = std::vector<int64_t>;

// The rows (m), columns (n) and inner length (k) a batch entry of a matmul
// really has, where they are fewer than its dims say: [b] int32 tensors (a
// ragged batch's sequence lengths). Null: the dims.
struct Extents {
  const GraphTensor* m = nullptr;
  const GraphTensor* n = nullptr;
  const GraphTensor* k = nullptr;
};

// Builds one operation graph. Each call records the first error and
// returns an empty tensor afterwards, so a graph reads as a list of ops
// with one status check at the end.
class GraphBuilder {
 public:
  explicit GraphBuilder(std::vector<Descriptor>* owned) : owned_(owned) {}
  // A builder whose descriptors live as long as this one's, with its own
  // status (for attempts whose failure is an answer, not an error).
  GraphBuilder Sibling() const { return GraphBuilder(owned_); }

  const absl::Status& status() const { return status_; }
  const std::vector<cudnnBackendDescriptor_t>& ops() const { return ops_; }

  // `ragged`: where set, the tensor's batch entries start at the element
  // offsets it holds ([b + 1] int64) rather than at multiples of the batch
  // stride (a ragged batch: documents packed back to back).
  GraphTensor Real(const Dims& dims, const Dims& strides, cudnnDataType_t type,
                   const GraphTensor* ragged = nullptr) {
    return MakeTensor(dims, strides, type, /*is_virtual=*/false, /*by_value=*/false, ragged);
  }
  GraphTensor Virtual(const Dims& dims, const Dims& strides, cudnnDataType_t type) {
    return MakeTensor(dims, strides, type, /*is_virtual=*/true, /*by_value=*/false);
  }
  // A float passed by value at execution (its host address goes in the
  // variant pack).
  GraphTensor Scalar() {
    return MakeTensor({1, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_FLOAT, false, /*by_value=*/true);
  }

  // y = op(x [, b] [, t]); y virtual fp32 with x's layout unless given.
  GraphTensor Pointwise(cudnnPointwiseMode_t mode, const GraphTensor& x, const GraphTensor* b,
                        const GraphTensor* t = nullptr, const GraphTensor* y_given = nullptr,
                        cudnnDataType_t y_type = CUDNN_DATA_FLOAT,
                        cudnnDataType_t compute = CUDNN_DATA_FLOAT, int64_t axis = -1) {
    if (!status_.ok()) return {};
    GraphTensor y = y_given != nullptr ? *y_given : Virtual(x.dims, x.strides, y_type);
    if (!status_.ok()) return {};
    cudnnBackendDescriptor_t pw = Create(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    Set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    Set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &compute);
    if (axis >= 0) Set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    Finalize(pw, "pointwise descriptor");
    cudnnBackendDescriptor_t op = Create(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    Set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
    Set(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x.desc);
    if (b != nullptr) {
      Set(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b->desc);
    }
    if (t != nullptr) {
      Set(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t->desc);
    }
    Set(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y.desc);
    Finalize(op, "pointwise operation");
    ops_.push_back(op);
    return y;
  }

  // c = a b over the last two dims, batched over the first two.
  void Matmul(const GraphTensor& a, const GraphTensor& b, const GraphTensor& c) {
    Matmul(a, b, c, Extents{});
  }
  void Matmul(const GraphTensor& a, const GraphTensor& b, const GraphTensor& c,
              const Extents& extents) {
    if (!status_.ok()) return;
    cudnnBackendDescriptor_t mm = Create(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    Set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
    Finalize(mm, "matmul descriptor");
    cudnnBackendDescriptor_t op = Create(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    Set(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a.desc);
    Set(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b.desc);
    Set(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c.desc);
    Set(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm);
    if (extents.m != nullptr) {
      Set(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
          &extents.m->desc);
    }
    if (extents.n != nullptr) {
      Set(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
          &extents.n->desc);
    }
    if (extents.k != nullptr) {
      Set(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
          &extents.k->desc);
    }
    Finalize(op, "matmul operation");
    ops_.push_back(op);
  }

  void Reduction(cudnnReduceTensorOp_t reduce, const GraphTensor& x, const GraphTensor& y) {
    if (!status_.ok()) return;
    cudnnBackendDescriptor_t red = Create(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    Set(red, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce);
    Set(red, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
    Finalize(red, "reduction descriptor");
    cudnnBackendDescriptor_t op = Create(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    Set(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x.desc);
    Set(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y.desc);
    Set(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &red);
    Finalize(op, "reduction operation");
    ops_.push_back(op);
  }

  // y: the same values as x seen through other dims and strides (a
  // transpose of the last two dims here).
  void Reshape(const GraphTensor& x, const GraphTensor& y) {
    if (!status_.ok()) return;
    cudnnBackendDescriptor_t op = Create(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    Set(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x.desc);
    Set(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y.desc);
    Finalize(op, "reshape operation");
    ops_.push_back(op);
  }

  cudnnBackendDescriptor_t Create(cudnnBackendDescriptorType_t type) {
    cudnnBackendDescriptor_t d = nullptr;
    if (!status_.ok()) return nullptr;
    const cudnnStatus_t s = cudnnBackendCreateDescriptor(type, &d);
    if (s != CUDNN_STATUS_SUCCESS) {
      status_ = CudnnStatus(s, "create descriptor");
      return nullptr;
    }
    owned_->emplace_back(d);
    return d;
  }
  void Set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
           cudnnBackendAttributeType_t type, int64_t count, const void* value) {
    if (!status_.ok()) return;
    const cudnnStatus_t s = cudnnBackendSetAttribute(d, name, type, count, value);
    if (s != CUDNN_STATUS_SUCCESS) {
      status_ = CudnnStatus(s, absl::StrCat("set attribute ", static_cast<int>(name)).c_str());
    }
  }
  void Finalize(cudnnBackendDescriptor_t d, const char* what) {
    if (!status_.ok()) return;
    const cudnnStatus_t s = cudnnBackendFinalize(d);
    if (s != CUDNN_STATUS_SUCCESS) status_ = CudnnStatus(s, what);
  }

 private:
  GraphTensor MakeTensor(const Dims& dims, const Dims& strides, cudnnDataType_t type,
                         bool is_virtual, bool by_value, const GraphTensor* ragged = nullptr) {
    GraphTensor t;
    t.uid = next_uid_++;
    t.dims = dims;
    t.strides = strides;
    t.desc = Create(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t alignment = 16;
    Set(t.desc, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    Set(t.desc, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, static_cast<int64_t>(dims.size()),
        dims.data());
    Set(t.desc, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, static_cast<int64_t>(strides.size()),
        strides.data());
    Set(t.desc, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &t.uid);
    Set(t.desc, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    const bool v = is_virtual;
    Set(t.desc, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v);
    if (by_value) {
      const bool bv = true;
      Set(t.desc, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &bv);
    }
    if (ragged != nullptr) {
      Set(t.desc, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
          &ragged->desc);
    }
    Finalize(t.desc, "tensor");
    return t;
  }

  std::vector<Descriptor>* owned_;
  std::vector<cudnnBackendDescriptor_t> ops_;
  int64_t next_uid_ = 1;
  absl::Status status_;
};

constexpr int kForward = CudnnAttention::kForward;
constexpr int kBackwardDeterministic = CudnnAttention::kBackwardDeterministic;
constexpr int kBackwardAtomic = CudnnAttention::kBackwardAtomic;

size_t AlignUp(size_t n) { return (n + 255) / 256 * 256; }

using PlannedDocuments = CudnnAttention::PlannedDocuments;

// The packed layouts as [b, h, s, d] views. For a batch's documents (a
// ragged batch) b is the plan's document capacity and s its longest
// document; each entry's rows then start where the ragged offsets say,
// and lse keeps its [B, heads, S] layout (a head's rows S apart). In a
// key band the call holds sq queries and skv keys of sequences S long
// (the buffers' strides stay S's), and dQ goes to the band's partial
// buffer, [b, sq, h, d].
struct Layout {
  int64_t b, s, sq, skv, h, kv, d, ts, os;
  int64_t lse_row;  // the lse's distance between heads: the real sequence length
  bool ragged, banded;
  Layout(const AttentionShape& shape, const PlannedDocuments& documents,
         const CudnnAttention::KeyBand& band)
      : b(documents.capacity > 0 ? documents.capacity : shape.batch),
        s(documents.capacity > 0 ? documents.longest : shape.seq),
        sq(band.rows > 0 ? band.rows : s),
        skv(band.rows > 0 ? band.keys : s),
        h(shape.heads),
        kv(shape.kv_heads),
        d(shape.head_dim),
        ts((shape.heads + 2 * shape.kv_heads) * shape.head_dim),
        os(shape.heads * shape.head_dim),
        lse_row(shape.seq),
        ragged(documents.capacity > 0),
        banded(band.rows > 0) {}
  Dims PackedStrides() const { return {s * ts, d, ts, 1}; }           // a head of qkv
  Dims PackedStridesT() const { return {s * ts, d, 1, ts}; }          // its transpose
  Dims OutStrides() const { return {s * os, d, os, 1}; }              // a head of out
  // dQ: grad_qkv's query heads, or a band's partial buffer.
  Dims QueryGradStrides() const {
    return banded ? Dims{sq * h * d, d, h * d, 1} : PackedStrides();
  }
  Dims Queries() const { return {b, h, sq, d}; }
  Dims Keys() const { return {b, kv, skv, d}; }
  Dims KeysT() const { return {b, kv, d, skv}; }
  Dims Scores() const { return {b, h, sq, skv}; }
  Dims ScoreStrides() const { return {h * sq * skv, sq * skv, skv, 1}; }
  Dims ScoresT() const { return {b, h, skv, sq}; }
  Dims ScoreStridesT() const { return {h * sq * skv, sq * skv, 1, skv}; }
  Dims Rows() const { return {b, h, sq, 1}; }
  Dims RowStrides() const { return {h * sq, sq, 1, 1}; }      // our own per-row buffers
  Dims LseStrides() const { return {h * lse_row, lse_row, 1, 1}; }
  // Offsets of the query, key and value heads in a token row of qkv.
  int64_t KOffset() const { return h * d; }
  int64_t VOffset() const { return (h + kv) * d; }
};

}  // namespace

struct CudnnAttention::Plan {
  std::vector<Descriptor> descriptors;
  cudnnBackendDescriptor_t plan = nullptr;
  size_t cudnn_workspace = 0;  // bytes cuDNN asked for
  size_t extra_offset = 0;     // our buffers (D, dQ accumulator) after it
  size_t dq_accum_offset = 0;
  size_t total_workspace = 0;
  std::string description;     // the engine and knobs it runs
  // Tensor ids.
  int64_t q = 0, k = 0, v = 0, o = 0, stats = 0, d_o = 0, d_q = 0, d_k = 0, d_v = 0;
  int64_t softmax_sum = 0, dq_accum = 0;
  int64_t scale = 0, neg_inf = 0, one = 0;
  // A ragged batch's inputs (0 for whole sequences): each entry's length,
  // as the query and the key extent, and its rows' offsets.
  int64_t seq_q = 0, seq_kv = 0, qkv_offsets = 0, out_offsets = 0, lse_offsets = 0;
  PlannedDocuments documents;
  KeyBand band;
  size_t table_offset = 0;  // the document table in the workspace (RaggedDocumentTable)
  // Host values of the by-value scalars (their addresses go in the pack).
  float scale_value = 0.f, neg_inf_value = -std::numeric_limits<float>::infinity(),
        one_value = 1.f;
  // Variant packs already built, by their data pointers and workspace: a
  // step calls each layer's attention with the same buffers every time, so
  // after the first step no call builds a pack (host allocations).
  std::map<std::vector<void*>, Descriptor> packs;
};

namespace {

// The causal select: keep x where row >= column, else -inf. (A key band's
// rows and columns both count from its first key, so its mask is this one.)
GraphTensor CausalMask(GraphBuilder& g, const GraphTensor& x, const GraphTensor& neg_inf) {
  GraphTensor row = g.Pointwise(CUDNN_POINTWISE_GEN_INDEX, x, nullptr, nullptr, nullptr,
                                CUDNN_DATA_INT32, CUDNN_DATA_FLOAT, /*axis=*/2);
  GraphTensor col = g.Pointwise(CUDNN_POINTWISE_GEN_INDEX, x, nullptr, nullptr, nullptr,
                                CUDNN_DATA_INT32, CUDNN_DATA_FLOAT, /*axis=*/3);
  GraphTensor keep = g.Pointwise(CUDNN_POINTWISE_CMP_GE, row, &col, nullptr, nullptr,
                                 CUDNN_DATA_BOOLEAN, CUDNN_DATA_BOOLEAN);
  return g.Pointwise(CUDNN_POINTWISE_BINARY_SELECT, x, &neg_inf, &keep);
}

// A ragged batch's extra inputs (see Plan). Where the layout is not ragged
// every pointer it hands out is null, and the graphs are those of whole
// sequences.
struct RaggedInputs {
  GraphTensor seq_q, seq_kv, qkv, out, lse;
  bool on = false;
  const GraphTensor* Qkv() const { return on ? &qkv : nullptr; }
  const GraphTensor* Out() const { return on ? &out : nullptr; }
  const GraphTensor* Lse() const { return on ? &lse : nullptr; }
  // Extents of Q K^T (and dO V^T): rows the queries, columns the keys.
  Extents Scores() const {
    return on ? Extents{&seq_q, &seq_kv, nullptr} : Extents{};
  }
  // Of P V and dS K: rows the queries, inner length the keys.
  Extents ByKeys() const {
    return on ? Extents{&seq_q, nullptr, &seq_kv} : Extents{};
  }
  // Of P^T dO and dS^T Q: rows the keys, inner length the queries.
  Extents ByQueries() const {
    return on ? Extents{&seq_kv, nullptr, &seq_q} : Extents{};
  }
};

RaggedInputs MakeRaggedInputs(GraphBuilder& g, const Layout& L, CudnnAttention::Plan& p) {
  RaggedInputs r;
  if (!L.ragged) return r;
  r.on = true;
  const Dims lengths = {L.b, 1, 1, 1}, offsets = {L.b + 1, 1, 1, 1}, ones = {1, 1, 1, 1};
  r.seq_q = g.Real(lengths, ones, CUDNN_DATA_INT32);
  r.seq_kv = g.Real(lengths, ones, CUDNN_DATA_INT32);
  r.qkv = g.Real(offsets, ones, CUDNN_DATA_INT64);
  r.out = g.Real(offsets, ones, CUDNN_DATA_INT64);
  r.lse = g.Real(offsets, ones, CUDNN_DATA_INT64);
  p.seq_q = r.seq_q.uid, p.seq_kv = r.seq_kv.uid;
  p.qkv_offsets = r.qkv.uid, p.out_offsets = r.out.uid, p.lse_offsets = r.lse.uid;
  return r;
}

// A ragged batch's padding: keep x where the row is one of the entry's
// queries and the column one of its keys, else -inf.
GraphTensor PaddingMask(GraphBuilder& g, const GraphTensor& x, const RaggedInputs& r,
                        const GraphTensor& neg_inf) {
  if (!r.on) return x;
  GraphTensor row = g.Pointwise(CUDNN_POINTWISE_GEN_INDEX, x, nullptr, nullptr, nullptr,
                                CUDNN_DATA_INT32, CUDNN_DATA_INT32, /*axis=*/2);
  GraphTensor col = g.Pointwise(CUDNN_POINTWISE_GEN_INDEX, x, nullptr, nullptr, nullptr,
                                CUDNN_DATA_INT32, CUDNN_DATA_INT32, /*axis=*/3);
  GraphTensor row_in = g.Pointwise(CUDNN_POINTWISE_CMP_LT, row, &r.seq_q, nullptr, nullptr,
                                   CUDNN_DATA_BOOLEAN, CUDNN_DATA_BOOLEAN);
  GraphTensor col_in = g.Pointwise(CUDNN_POINTWISE_CMP_LT, col, &r.seq_kv, nullptr, nullptr,
                                   CUDNN_DATA_BOOLEAN, CUDNN_DATA_BOOLEAN);
  GraphTensor keep = g.Pointwise(CUDNN_POINTWISE_LOGICAL_AND, row_in, &col_in, nullptr, nullptr,
                                 CUDNN_DATA_BOOLEAN, CUDNN_DATA_BOOLEAN);
  return g.Pointwise(CUDNN_POINTWISE_BINARY_SELECT, x, &neg_inf, &keep);
}

void BuildForward(GraphBuilder& g, const Layout& L, CudnnAttention::Plan& p) {
  const RaggedInputs r = MakeRaggedInputs(g, L, p);
  GraphTensor q = g.Real(L.Queries(), L.PackedStrides(), CUDNN_DATA_BFLOAT16, r.Qkv());
  GraphTensor kt = g.Real(L.KeysT(), L.PackedStridesT(), CUDNN_DATA_BFLOAT16, r.Qkv());
  GraphTensor v = g.Real(L.Keys(), L.PackedStrides(), CUDNN_DATA_BFLOAT16, r.Qkv());
  GraphTensor o = g.Real(L.Queries(), L.OutStrides(), CUDNN_DATA_BFLOAT16, r.Out());
  GraphTensor stats = g.Real(L.Rows(), L.LseStrides(), CUDNN_DATA_FLOAT, r.Lse());
  GraphTensor scale = g.Scalar();
  GraphTensor neg_inf = g.Scalar();
  p.q = q.uid, p.k = kt.uid, p.v = v.uid, p.o = o.uid, p.stats = stats.uid;
  p.scale = scale.uid, p.neg_inf = neg_inf.uid;

  GraphTensor s = g.Virtual(L.Scores(), L.ScoreStrides(), CUDNN_DATA_FLOAT);
  g.Matmul(q, kt, s, r.Scores());
  GraphTensor scaled = g.Pointwise(CUDNN_POINTWISE_MUL, s, &scale);
  GraphTensor masked = CausalMask(g, PaddingMask(g, scaled, r, neg_inf), neg_inf);
  GraphTensor row_max = g.Virtual(L.Rows(), L.RowStrides(), CUDNN_DATA_FLOAT);
  g.Reduction(CUDNN_REDUCE_TENSOR_MAX, masked, row_max);
  GraphTensor shifted = g.Pointwise(CUDNN_POINTWISE_SUB, masked, &row_max);
  GraphTensor e = g.Pointwise(CUDNN_POINTWISE_EXP, shifted, nullptr);
  GraphTensor row_sum = g.Virtual(L.Rows(), L.RowStrides(), CUDNN_DATA_FLOAT);
  g.Reduction(CUDNN_REDUCE_TENSOR_ADD, e, row_sum);
  GraphTensor log_sum = g.Pointwise(CUDNN_POINTWISE_LOG, row_sum, nullptr);
  g.Pointwise(CUDNN_POINTWISE_ADD, row_max, &log_sum, nullptr, &stats);
  GraphTensor probs = g.Pointwise(CUDNN_POINTWISE_DIV, e, &row_sum, nullptr, nullptr,
                                  CUDNN_DATA_BFLOAT16);
  g.Matmul(probs, v, o, r.ByKeys());
}

void BuildBackward(GraphBuilder& g, const Layout& L, bool deterministic,
                   CudnnAttention::Plan& p) {
  const Dims heads = L.Queries();
  // A query head's dK or dV before the grouped heads are summed: every key.
  const Dims per_query_head_dims = {L.b, L.h, L.skv, L.d};
  const Dims per_query_head_strides = {L.h * L.skv * L.d, L.skv * L.d, L.d, 1};
  const RaggedInputs r = MakeRaggedInputs(g, L, p);
  const GraphTensor* rows = r.Qkv();
  // In a band, dQ goes to its partial buffer, not ragged and not in qkv's rows.
  const GraphTensor* query_grad_rows = L.banded ? nullptr : rows;
  GraphTensor q = g.Real(heads, L.PackedStrides(), CUDNN_DATA_BFLOAT16, rows);
  GraphTensor kt = g.Real(L.KeysT(), L.PackedStridesT(), CUDNN_DATA_BFLOAT16, rows);
  GraphTensor vt = g.Real(L.KeysT(), L.PackedStridesT(), CUDNN_DATA_BFLOAT16, rows);
  GraphTensor o = g.Real(heads, L.OutStrides(), CUDNN_DATA_BFLOAT16, r.Out());
  GraphTensor d_o = g.Real(heads, L.OutStrides(), CUDNN_DATA_BFLOAT16, r.Out());
  GraphTensor stats = g.Real(L.Rows(), L.LseStrides(), CUDNN_DATA_FLOAT, r.Lse());
  GraphTensor d_q = g.Real(heads, L.QueryGradStrides(), CUDNN_DATA_BFLOAT16, query_grad_rows);
  GraphTensor d_k = g.Real(L.Keys(), L.PackedStrides(), CUDNN_DATA_BFLOAT16, rows);
  GraphTensor d_v = g.Real(L.Keys(), L.PackedStrides(), CUDNN_DATA_BFLOAT16, rows);
  GraphTensor softmax_sum = g.Real(L.Rows(), L.RowStrides(), CUDNN_DATA_FLOAT);
  GraphTensor scale = g.Scalar();
  GraphTensor neg_inf = g.Scalar();
  GraphTensor one = g.Scalar();
  p.q = q.uid, p.k = kt.uid, p.v = vt.uid, p.o = o.uid, p.d_o = d_o.uid, p.stats = stats.uid;
  p.d_q = d_q.uid, p.d_k = d_k.uid, p.d_v = d_v.uid, p.softmax_sum = softmax_sum.uid;
  p.scale = scale.uid, p.neg_inf = neg_inf.uid, p.one = one.uid;

  // D = rowsum(dO * O), the softmax backward's per-row term.
  GraphTensor do_o = g.Virtual(heads, {L.h * L.sq * L.d, L.sq * L.d, L.h * L.d, 1},
                               CUDNN_DATA_FLOAT);
  g.Pointwise(CUDNN_POINTWISE_MUL, d_o, &o, nullptr, &do_o);
  GraphTensor row_dot = g.Virtual(L.Rows(), L.RowStrides(), CUDNN_DATA_FLOAT);
  g.Reduction(CUDNN_REDUCE_TENSOR_ADD, do_o, row_dot);
  g.Pointwise(CUDNN_POINTWISE_MUL, row_dot, &one, nullptr, &softmax_sum);

  // P, recomputed from the saved log-sum-exp.
  GraphTensor s = g.Virtual(L.Scores(), L.ScoreStrides(), CUDNN_DATA_FLOAT);
  g.Matmul(q, kt, s, r.Scores());
  GraphTensor scaled = g.Pointwise(CUDNN_POINTWISE_MUL, s, &scale);
  GraphTensor shifted =
      g.Pointwise(CUDNN_POINTWISE_SUB, PaddingMask(g, scaled, r, neg_inf), &stats);
  GraphTensor masked = CausalMask(g, shifted, neg_inf);
  GraphTensor probs = g.Pointwise(CUDNN_POINTWISE_EXP, masked, nullptr);

  // out = a b for a key/value head's gradient: straight into `out`, or with
  // grouped heads per query head first, then summed over each group.
  const bool grouped = L.h != L.kv;
  const auto matmul_summed_over_groups = [&](const GraphTensor& a, const GraphTensor& b,
                                              const GraphTensor& out) {
    if (!grouped) {
      g.Matmul(a, b, out, r.ByQueries());
      return;
    }
    GraphTensor per_query_head =
        g.Virtual(per_query_head_dims, per_query_head_strides, CUDNN_DATA_BFLOAT16);
    g.Matmul(a, b, per_query_head, r.ByQueries());
    g.Reduction(CUDNN_REDUCE_TENSOR_ADD, per_query_head, out);
  };

  // dV = P^T dO.
  GraphTensor probs_t = g.Virtual(L.ScoresT(), L.ScoreStridesT(), CUDNN_DATA_BFLOAT16);
  g.Reshape(probs, probs_t);
  matmul_summed_over_groups(probs_t, d_o, d_v);

  // dS = (dO V^T - D) * P * scale.
  GraphTensor dp = g.Virtual(L.Scores(), L.ScoreStrides(), CUDNN_DATA_FLOAT);
  g.Matmul(d_o, vt, dp, r.Scores());
  GraphTensor centred = g.Pointwise(CUDNN_POINTWISE_SUB, dp, &softmax_sum);
  GraphTensor weighted = g.Pointwise(CUDNN_POINTWISE_MUL, centred, &probs);
  GraphTensor ds = g.Pointwise(CUDNN_POINTWISE_MUL, weighted, &scale);

  // dK = dS^T Q.
  GraphTensor ds_t = g.Virtual(L.ScoresT(), L.ScoreStridesT(), CUDNN_DATA_BFLOAT16);
  g.Reshape(ds, ds_t);
  matmul_summed_over_groups(ds_t, q, d_k);

  // dQ = dS K: straight into dQ (cuDNN keeps dS in its workspace; fixed
  // order), or through an fp32 accumulator that blocks add into.
  GraphTensor k = g.Virtual(L.Keys(), L.PackedStrides(), CUDNN_DATA_BFLOAT16);
  g.Reshape(kt, k);
  if (deterministic) {
    g.Matmul(ds, k, d_q, r.ByKeys());
  } else {
    GraphTensor accum =
        g.Real(heads, {L.h * L.sq * L.d, L.sq * L.d, L.d, 1}, CUDNN_DATA_FLOAT);
    p.dq_accum = accum.uid;
    g.Matmul(ds, k, accum, r.ByKeys());
    g.Pointwise(CUDNN_POINTWISE_IDENTITY, accum, nullptr, nullptr, &d_q);
  }
}

// Finalizes the operation graph of `g`'s ops.
absl::StatusOr<cudnnBackendDescriptor_t> FinalizeGraph(cudnnHandle_t handle, GraphBuilder& g) {
  if (!g.status().ok()) return g.status();
  cudnnBackendDescriptor_t graph = g.Create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  const std::vector<cudnnBackendDescriptor_t>& ops = g.ops();
  g.Set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
        static_cast<int64_t>(ops.size()), ops.data());
  g.Set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  g.Finalize(graph, "operation graph");
  if (!g.status().ok()) return g.status();
  return graph;
}

// The engine configurations cuDNN's heuristics list for `graph`, mode A's
// first, then FALLBACK's. Descriptors are owned by `g`.
absl::StatusOr<std::vector<cudnnBackendDescriptor_t>> HeuristicConfigs(
    cudnnBackendDescriptor_t graph, GraphBuilder& g, absl::Status* last) {
  std::vector<cudnnBackendDescriptor_t> all;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    std::vector<Descriptor> local;
    GraphBuilder h(&local);
    cudnnBackendDescriptor_t heur = h.Create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    h.Set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
    h.Set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    h.Finalize(heur, "engine heuristics");
    if (!h.status().ok()) {
      *last = h.status();
      continue;
    }
    int64_t count = 0;
    CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                                   nullptr));
    if (count == 0) continue;
    std::vector<cudnnBackendDescriptor_t> configs;
    for (int64_t i = 0; i < count; ++i) configs.push_back(g.Create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    if (!g.status().ok()) return g.status();
    int64_t returned = 0;
    CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                                   &returned, configs.data()));
    all.insert(all.end(), configs.begin(), configs.begin() + returned);
  }
  return all;
}

// An engine configuration read back: its engine's global index and its
// knob values, and the range of each knob the engine exposes.
struct ConfigKnobs {
  int64_t engine = -1;
  std::vector<std::pair<int64_t, int64_t>> choices;  // knob type, value
  struct Range {
    int64_t type, min, max, stride;
  };
  std::vector<Range> ranges;
};

absl::StatusOr<ConfigKnobs> ReadConfig(cudnnBackendDescriptor_t config) {
  ConfigKnobs out;
  std::vector<Descriptor> local;
  GraphBuilder h(&local);
  cudnnBackendDescriptor_t engine = h.Create(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  if (!h.status().ok()) return h.status();
  int64_t n = 0;
  CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(config, CUDNN_ATTR_ENGINECFG_ENGINE,
                                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine));
  CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX,
                                                 CUDNN_TYPE_INT64, 1, &n, &out.engine));
  std::vector<cudnnBackendDescriptor_t> choices;
  for (int i = 0; i < CUDNN_KNOB_TYPE_COUNTS; ++i) {
    choices.push_back(h.Create(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR));
  }
  std::vector<cudnnBackendDescriptor_t> infos;
  for (int i = 0; i < CUDNN_KNOB_TYPE_COUNTS; ++i) {
    infos.push_back(h.Create(CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR));
  }
  if (!h.status().ok()) return h.status();
  CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(config, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                                                 CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                                 static_cast<int64_t>(choices.size()), &n,
                                                 choices.data()));
  for (int64_t i = 0; i < n; ++i) {
    cudnnBackendKnobType_t type;
    int64_t value = 0, got = 0;
    CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(choices[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE,
                                                   CUDNN_TYPE_KNOB_TYPE, 1, &got, &type));
    CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(choices[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE,
                                                   CUDNN_TYPE_INT64, 1, &got, &value));
    out.choices.emplace_back(static_cast<int64_t>(type), value);
  }
  CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_KNOB_INFO,
                                                 CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                                 static_cast<int64_t>(infos.size()), &n,
                                                 infos.data()));
  for (int64_t i = 0; i < n; ++i) {
    cudnnBackendKnobType_t type;
    ConfigKnobs::Range r{};
    int64_t got = 0;
    CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(infos[i], CUDNN_ATTR_KNOB_INFO_TYPE,
                                                   CUDNN_TYPE_KNOB_TYPE, 1, &got, &type));
    CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(infos[i], CUDNN_ATTR_KNOB_INFO_MINIMUM_VALUE,
                                                   CUDNN_TYPE_INT64, 1, &got, &r.min));
    CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(infos[i], CUDNN_ATTR_KNOB_INFO_MAXIMUM_VALUE,
                                                   CUDNN_TYPE_INT64, 1, &got, &r.max));
    CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(infos[i], CUDNN_ATTR_KNOB_INFO_STRIDE,
                                                   CUDNN_TYPE_INT64, 1, &got, &r.stride));
    r.type = static_cast<int64_t>(type);
    out.ranges.push_back(r);
  }
  return out;
}

// A new configuration of engine `engine` on `graph` with these knob values.
cudnnBackendDescriptor_t MakeConfig(cudnnBackendDescriptor_t graph, int64_t engine,
                                    const std::vector<std::pair<int64_t, int64_t>>& knobs,
                                    GraphBuilder& g) {
  cudnnBackendDescriptor_t e = g.Create(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  g.Set(e, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
  g.Set(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &engine);
  g.Finalize(e, "engine");
  std::vector<cudnnBackendDescriptor_t> choices;
  for (const auto& [type, value] : knobs) {
    cudnnBackendDescriptor_t c = g.Create(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
    const cudnnBackendKnobType_t t = static_cast<cudnnBackendKnobType_t>(type);
    g.Set(c, CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &t);
    g.Set(c, CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &value);
    g.Finalize(c, "knob choice");
    choices.push_back(c);
  }
  cudnnBackendDescriptor_t config = g.Create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  g.Set(config, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &e);
  if (!choices.empty()) {
    g.Set(config, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
          static_cast<int64_t>(choices.size()), choices.data());
  }
  g.Finalize(config, "engine configuration");
  return config;
}

std::string DescribeKnobs(int64_t engine, const std::vector<std::pair<int64_t, int64_t>>& knobs) {
  std::string out = absl::StrCat("engine ", engine, " knobs");
  for (const auto& [type, value] : knobs) absl::StrAppend(&out, " ", type, "=", value);
  return out;
}

// At most this many knob variants are listed per graph.
constexpr int kMaxKnobVariants = 64;

// The configurations a graph can be planned with, in the order tried:
// the heuristics' list, then (when `with_knob_variants`) the first
// configuration's engine with each other value of one of its knobs.
absl::StatusOr<std::vector<std::pair<cudnnBackendDescriptor_t, std::string>>> Candidates(
    cudnnBackendDescriptor_t graph, GraphBuilder& g, bool with_knob_variants,
    absl::Status* last) {
  ASSIGN_OR_RETURN(std::vector<cudnnBackendDescriptor_t> heuristic, HeuristicConfigs(graph, g, last));
  std::vector<std::pair<cudnnBackendDescriptor_t, std::string>> out;
  std::vector<ConfigKnobs> read;
  for (cudnnBackendDescriptor_t c : heuristic) {
    absl::StatusOr<ConfigKnobs> k = ReadConfig(c);
    out.emplace_back(c, k.ok() ? absl::StrCat("heuristics: ", DescribeKnobs(k->engine, k->choices))
                               : absl::StrCat("heuristics (unreadable: ", k.status().message(), ")"));
    if (k.ok()) read.push_back(*k);
  }
  if (!with_knob_variants || read.empty()) return out;
  const ConfigKnobs& first = read.front();
  std::string ranges;
  for (const ConfigKnobs::Range& r : first.ranges) {
    absl::StrAppend(&ranges, " ", r.type, ":", r.min, "..", r.max, "/", r.stride);
  }
  absl::StrAppend(&out.front().second, " (knob ranges", ranges, ")");
  int variants = 0;
  for (const ConfigKnobs::Range& r : first.ranges) {
    if (r.stride <= 0) continue;
    // The heuristics' own setting of this knob, if it sets it.
    const auto own = std::find_if(first.choices.begin(), first.choices.end(),
                                  [&](const auto& kv) { return kv.first == r.type; });
    for (int64_t v = r.min; v <= r.max && variants < kMaxKnobVariants; v += r.stride) {
      if (own != first.choices.end() && own->second == v) continue;  // listed already
      std::vector<std::pair<int64_t, int64_t>> knobs = first.choices;
      if (own != first.choices.end()) {
        knobs[own - first.choices.begin()].second = v;
      } else {
        knobs.emplace_back(r.type, v);
      }
      // A value the engine refuses for this graph is skipped.
      GraphBuilder attempt = g.Sibling();
      cudnnBackendDescriptor_t c = MakeConfig(graph, first.engine, knobs, attempt);
      if (!attempt.status().ok()) continue;
      out.emplace_back(c, absl::StrCat("variant: ", DescribeKnobs(first.engine, knobs)));
      ++variants;
    }
  }
  return out;
}

// Finalizes an execution plan from `config` into `p`.
absl::Status FinalizePlan(cudnnHandle_t handle, cudnnBackendDescriptor_t config,
                          std::vector<Descriptor>& owned, CudnnAttention::Plan& p) {
  cudnnBackendDescriptor_t plan = nullptr;
  CUDNN_RETURN_IF_ERROR(cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan));
  Descriptor owned_plan(plan);
  CUDNN_RETURN_IF_ERROR(cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
                                                 CUDNN_TYPE_HANDLE, 1, &handle));
  CUDNN_RETURN_IF_ERROR(cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &config));
  CUDNN_RETURN_IF_ERROR(cudnnBackendFinalize(plan));
  int64_t workspace = 0;
  int64_t got = 0;
  CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                 CUDNN_TYPE_INT64, 1, &got, &workspace));
  p.plan = plan;
  p.cudnn_workspace = static_cast<size_t>(workspace);
  owned.push_back(std::move(owned_plan));
  return absl::OkStatus();
}

// Plans the graph with the first configuration that finalizes, or with
// candidate `pinned` of Candidates(.., with_knob_variants = true).
absl::Status MakePlan(cudnnHandle_t handle, GraphBuilder& g, std::vector<Descriptor>& owned,
                      CudnnAttention::Plan& p, int pinned) {
  ASSIGN_OR_RETURN(cudnnBackendDescriptor_t graph, FinalizeGraph(handle, g));
  absl::Status last = absl::UnimplementedError("cuDNN attention: no engine configuration");
  ASSIGN_OR_RETURN(auto candidates, Candidates(graph, g, /*with_knob_variants=*/pinned >= 0, &last));
  if (pinned >= 0) {
    if (pinned >= static_cast<int>(candidates.size())) {
      return absl::OutOfRangeError(absl::StrCat("cuDNN attention: candidate ", pinned, " of ",
                                                candidates.size()));
    }
    p.description = candidates[pinned].second;
    return FinalizePlan(handle, candidates[pinned].first, owned, p);
  }
  for (const auto& [config, description] : candidates) {
    const absl::Status made = FinalizePlan(handle, config, owned, p);
    if (made.ok()) {
      p.description = description;
      return made;
    }
    last = made;
  }
  return last;
}

absl::StatusOr<std::vector<std::string>> DescribeCandidates(cudnnHandle_t handle, GraphBuilder& g) {
  ASSIGN_OR_RETURN(cudnnBackendDescriptor_t graph, FinalizeGraph(handle, g));
  absl::Status last = absl::OkStatus();
  ASSIGN_OR_RETURN(auto candidates, Candidates(graph, g, /*with_knob_variants=*/true, &last));
  std::vector<std::string> out;
  for (const auto& c : candidates) out.push_back(c.second);
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudnnAttention>> CudnnAttention::Create() {
  if (Version() < 90000) {
    return absl::UnavailableError(
        absl::StrCat("cuDNN attention needs cuDNN 9 or later; found ", Version()));
  }
  cudnnHandle_t handle = nullptr;
  const cudnnStatus_t s = cudnnCreate(&handle);
  if (s != CUDNN_STATUS_SUCCESS) {
    return absl::UnavailableError(CudnnMessage(s, "cudnnCreate"));
  }
  return std::unique_ptr<CudnnAttention>(new CudnnAttention(handle));
}

CudnnAttention::CudnnAttention(void* handle) : handle_(handle) {}

CudnnAttention::~CudnnAttention() {
  plans_.clear();  // plans before the handle they were made with
  if (handle_ != nullptr) cudnnDestroy(static_cast<cudnnHandle_t>(handle_));
}

int64_t CudnnAttention::Version() { return static_cast<int64_t>(cudnnGetVersion()); }

absl::Status CudnnAttention::CheckShape(const AttentionShape& shape, int kind) {
  if (kind != kForward && kind != kBackwardDeterministic && kind != kBackwardAtomic) {
    return absl::InvalidArgumentError(absl::StrCat("cuDNN attention: no graph kind ", kind));
  }
  if (shape.batch <= 0 || shape.seq <= 0 || shape.heads <= 0 || shape.kv_heads <= 0 ||
      shape.heads % shape.kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuDNN attention: batch ", shape.batch, ", seq ", shape.seq, ", heads ", shape.heads,
        ", kv_heads ", shape.kv_heads, " is not a shape it plans"));
  }
  return absl::OkStatus();
}

namespace {

// The ops of `kind`'s graph for `shape`, into `g`; `p` gets their tensor ids.
void BuildGraph(GraphBuilder& g, const AttentionShape& shape, int kind,
                CudnnAttention::Plan& p) {
  const Layout layout(shape, p.documents, p.band);
  if (kind == kForward) {
    BuildForward(g, layout, p);
  } else {
    BuildBackward(g, layout, kind == kBackwardDeterministic, p);
  }
}

}  // namespace

CudnnAttention::DocumentGroups CudnnAttention::GroupDocuments(
    const DocumentCounts& counts, absl::FunctionRef<bool(const PlannedDocuments&)> fits) {
  const auto plan_of = [](int64_t documents, int longest_class) {
    const int64_t count = std::max<int64_t>(1, documents);
    // Up to 16, the power of two at or above the count (its length class's top).
    return PlannedDocuments{count <= 16 ? int64_t{1} << DocumentCounts::LengthClass(count)
                                        : (count + 15) / 16 * 16,
                            std::max<int64_t>(64, int64_t{1} << longest_class)};
  };
  DocumentGroups out;
  int64_t in_group = 0;
  int first_class = -1, last_class = -1;
  const auto close = [&]() {
    if (in_group == 0) return true;
    if (out.count == kMaxDocumentGroups) return false;
    DocumentGroup& g = out.group[out.count++];
    g.plan = plan_of(in_group, last_class);
    g.above = first_class == 0 ? 0 : int64_t{1} << (first_class - 1);
    g.up_to = int64_t{1} << last_class;
    in_group = 0;
    return true;
  };
  for (int c = 0; c < kDocumentLengthClasses; ++c) {
    const int64_t n = counts.per_length_class[c];
    if (n == 0) continue;
    if (in_group > 0 && fits(plan_of(in_group + n, c))) {
      in_group += n;
      last_class = c;
      continue;
    }
    if (!close() || !fits(plan_of(n, c))) return {};
    in_group = n;
    first_class = last_class = c;
  }
  if (!close()) return {};
  return out;
}

CudnnAttention::Key CudnnAttention::KeyOf(const AttentionShape& shape, int kind,
                                          const PlannedDocuments& documents,
                                          const KeyBand& band) {
  return Key{kind,           shape.batch,        shape.seq,         shape.heads,
             shape.kv_heads, shape.head_dim,     documents.capacity, documents.longest,
             band.rows,      band.keys};
}

absl::Status CudnnAttention::CheckKeyBands(const AttentionShape& shape, bool deterministic,
                                           const Documents* documents, int key_bands) {
  if (key_bands == 1) return absl::OkStatus();
  if (key_bands < 1 || !deterministic || documents != nullptr ||
      shape.seq % (int64_t{64} * key_bands) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuDNN attention: ", key_bands, " key bands need the deterministic backward of whole ",
        "sequences whose length (", shape.seq, ") is a multiple of 64 x the bands"));
  }
  return absl::OkStatus();
}

namespace {

// The document table's pieces in the workspace, from `offset` on: every
// document's first token (one per token at most), then the entries.
struct TableLayout {
  size_t first_tokens, seq_lens, qkv, out, lse, end;
  TableLayout(size_t offset, int64_t capacity, int64_t tokens) {
    const size_t lengths = AlignUp(static_cast<size_t>(capacity) * sizeof(int32_t));
    const size_t offsets = AlignUp(static_cast<size_t>(capacity + 1) * sizeof(int64_t));
    first_tokens = offset;
    seq_lens = first_tokens + AlignUp(static_cast<size_t>(tokens + 1) * sizeof(int32_t));
    qkv = seq_lens + lengths;
    out = qkv + offsets;
    lse = out + offsets;
    end = lse + offsets;
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<CudnnAttention::Plan>> CudnnAttention::BuildPlan(
    const AttentionShape& shape, int kind, int pinned, const PlannedDocuments& documents,
    const KeyBand& band) {
  RETURN_IF_ERROR(CheckShape(shape, kind));
  auto plan = std::make_unique<Plan>();
  plan->scale_value = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  plan->documents = documents;
  plan->band = band;
  const Layout layout(shape, documents, band);
  GraphBuilder g(&plan->descriptors);
  BuildGraph(g, shape, kind, *plan);
  const absl::Status made =
      MakePlan(static_cast<cudnnHandle_t>(handle_), g, plan->descriptors, *plan, pinned);
  if (!made.ok()) {
    return absl::Status(
        made.code(),
        absl::StrCat(kind == kForward ? "forward" : "backward", " graph for B ", shape.batch,
                     " S ", shape.seq, " H ", shape.heads, " KV ", shape.kv_heads, " hd ",
                     shape.head_dim,
                     documents.capacity > 0
                         ? absl::StrCat(" as up to ", documents.capacity, " documents of up to ",
                                        documents.longest, " tokens")
                         : std::string(),
                     band.rows > 0 ? absl::StrCat(" in a key band of ", band.rows,
                                                  " queries and ", band.keys, " keys")
                                   : std::string(),
                     ": ", made.message()));
  }
  // Our buffers after cuDNN's workspace: D (softmax_sum, fp32 per row) and,
  // for the atomic backward, the fp32 dQ accumulator.
  plan->extra_offset = AlignUp(plan->cudnn_workspace);
  size_t end = plan->extra_offset;
  if (kind != kForward) {
    end += AlignUp(static_cast<size_t>(layout.b * layout.h * layout.sq) * sizeof(float));
    plan->dq_accum_offset = end;
    if (kind == kBackwardAtomic) {
      end += AlignUp(static_cast<size_t>(layout.b * layout.h * layout.sq * layout.d) *
                     sizeof(float));
    }
  }
  if (documents.capacity > 0) {
    plan->table_offset = end;
    end = TableLayout(end, documents.capacity, shape.batch * shape.seq).end;
  }
  plan->total_workspace = end;
  return plan;
}

absl::StatusOr<CudnnAttention::Plan*> CudnnAttention::GetPlan(
    const AttentionShape& shape, int kind, const PlannedDocuments& documents,
    const KeyBand& band) {
  const Key key = KeyOf(shape, kind, documents, band);
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second.get();
  if (auto failed = unplannable_.find(key); failed != unplannable_.end()) return failed->second;
  absl::StatusOr<std::unique_ptr<Plan>> plan =
      BuildPlan(shape, kind, /*pinned=*/-1, documents, band);
  if (!plan.ok()) {
    if (absl::IsUnimplemented(plan.status())) unplannable_[key] = plan.status();
    return plan.status();
  }
  Plan* raw = plan->get();
  plans_.emplace(key, *std::move(plan));
  return raw;
}

absl::StatusOr<std::vector<std::string>> CudnnAttention::ListPlanCandidates(
    const AttentionShape& shape, int kind) {
  RETURN_IF_ERROR(CheckShape(shape, kind));
  Plan scratch;
  GraphBuilder g(&scratch.descriptors);
  BuildGraph(g, shape, kind, scratch);
  return DescribeCandidates(static_cast<cudnnHandle_t>(handle_), g);
}

absl::StatusOr<std::string> CudnnAttention::UsePlanCandidate(const AttentionShape& shape,
                                                             int kind, int index) {
  if (index < 0) return absl::InvalidArgumentError("cuDNN attention: candidate index < 0");
  ASSIGN_OR_RETURN(std::unique_ptr<Plan> plan,
                   BuildPlan(shape, kind, index, PlannedDocuments{}, KeyBand{}));
  const Key key = KeyOf(shape, kind, PlannedDocuments{}, KeyBand{});
  std::string description = plan->description;
  plans_[key] = std::move(plan);
  return description;
}

absl::StatusOr<std::string> CudnnAttention::PlanDescription(const AttentionShape& shape,
                                                            int kind) {
  ASSIGN_OR_RETURN(Plan * plan, GetPlan(shape, kind, PlannedDocuments{}, KeyBand{}));
  return plan->description;
}

namespace {

CudnnAttention::PlannedDocuments PlanOf(const CudnnAttention::Documents* documents) {
  return documents != nullptr ? documents->group.plan : CudnnAttention::PlannedDocuments{};
}

}  // namespace

absl::StatusOr<size_t> CudnnAttention::ForwardWorkspaceBytes(const AttentionShape& shape,
                                                             const Documents* documents) {
  absl::StatusOr<Plan*> plan = GetPlan(shape, kForward, PlanOf(documents), KeyBand{});
  if (!plan.ok()) return plan.status();
  return (*plan)->total_workspace;
}

namespace {

// Band c of n: the keys [c S/n, (c+1) S/n) and the queries [c S/n, S).
CudnnAttention::KeyBand BandOf(const AttentionShape& shape, int bands, int c) {
  const int64_t keys = shape.seq / bands;
  return {shape.seq - c * keys, keys};
}

}  // namespace

absl::StatusOr<size_t> CudnnAttention::BackwardWorkspaceBytes(const AttentionShape& shape,
                                                              bool deterministic,
                                                              const Documents* documents,
                                                              int key_bands) {
  RETURN_IF_ERROR(CheckKeyBands(shape, deterministic, documents, key_bands));
  const int kind = deterministic ? kBackwardDeterministic : kBackwardAtomic;
  if (key_bands == 1) {
    absl::StatusOr<Plan*> plan = GetPlan(shape, kind, PlanOf(documents), KeyBand{});
    if (!plan.ok()) return plan.status();
    return (*plan)->total_workspace;
  }
  ASSIGN_OR_RETURN(const size_t partials, BandPartialsOffset(shape, key_bands));
  return partials + static_cast<size_t>(KeyBandPartialOffset(shape, key_bands, key_bands));
}

absl::StatusOr<size_t> CudnnAttention::BandPartialsOffset(const AttentionShape& shape,
                                                          int bands) {
  // The bands run one after another in one workspace: the largest band's
  // own, then every band's partial dQ.
  size_t most = 0;
  for (int c = 0; c < bands; ++c) {
    ASSIGN_OR_RETURN(Plan * plan, GetPlan(shape, kBackwardDeterministic, PlannedDocuments{},
                                          BandOf(shape, bands, c)));
    most = std::max(most, plan->total_workspace);
  }
  return AlignUp(most);
}

namespace {

// At most this many variant packs are kept per plan (more distinct buffer
// sets than a step has layers means buffers are not being reused; those
// calls build a pack each time).
constexpr size_t kMaxCachedPacks = 4096;

absl::StatusOr<cudnnBackendDescriptor_t> MakeVariantPack(const std::vector<int64_t>& uids,
                                                         const std::vector<void*>& pointers,
                                                         void* workspace, Descriptor& owned) {
  cudnnBackendDescriptor_t pack = nullptr;
  CUDNN_RETURN_IF_ERROR(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack));
  owned = Descriptor(pack);
  CUDNN_RETURN_IF_ERROR(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS,
                                                 CUDNN_TYPE_INT64,
                                                 static_cast<int64_t>(uids.size()), uids.data()));
  CUDNN_RETURN_IF_ERROR(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                                 CUDNN_TYPE_VOID_PTR,
                                                 static_cast<int64_t>(pointers.size()),
                                                 pointers.data()));
  CUDNN_RETURN_IF_ERROR(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
                                                 CUDNN_TYPE_VOID_PTR, 1, &workspace));
  CUDNN_RETURN_IF_ERROR(cudnnBackendFinalize(pack));
  return pack;
}

absl::Status Execute(cudnnHandle_t handle, CudnnAttention::Plan& plan,
                     const std::vector<int64_t>& uids, std::vector<void*> pointers,
                     void* workspace, cudaStream_t stream) {
  CUDNN_RETURN_IF_ERROR(cudnnSetStream(handle, stream));
  std::vector<void*> key = pointers;
  key.push_back(workspace);
  cudnnBackendDescriptor_t pack = nullptr;
  Descriptor transient;
  if (auto it = plan.packs.find(key); it != plan.packs.end()) {
    pack = it->second.get();
  } else {
    absl::StatusOr<cudnnBackendDescriptor_t> made =
        MakeVariantPack(uids, pointers, workspace, transient);
    if (!made.ok()) return made.status();
    pack = *made;
    if (plan.packs.size() < kMaxCachedPacks) plan.packs.emplace(std::move(key), std::move(transient));
  }
  CUDNN_RETURN_IF_ERROR(cudnnBackendExecute(handle, plan.plan, pack));
  return absl::OkStatus();
}

void* At(const void* base, int64_t elements, int bytes_per_element) {
  return const_cast<char*>(static_cast<const char*>(base)) + elements * bytes_per_element;
}

// For a ragged plan: builds this batch's document table in the workspace
// (queued before the attention) and adds its tensors to the pack.
absl::Status AddDocumentTable(const CudnnAttention::Plan& p, const AttentionShape& shape,
                              const CudnnAttention::Documents* documents, void* workspace,
                              std::vector<int64_t>& uids, std::vector<void*>& pointers,
                              cudaStream_t stream) {
  if (p.documents.capacity == 0) return absl::OkStatus();
  const TableLayout at(p.table_offset, p.documents.capacity, shape.batch * shape.seq);
  RaggedDocumentTable table;
  table.seq_lens = static_cast<int32_t*>(At(workspace, static_cast<int64_t>(at.seq_lens), 1));
  table.qkv_offsets = static_cast<int64_t*>(At(workspace, static_cast<int64_t>(at.qkv), 1));
  table.out_offsets = static_cast<int64_t*>(At(workspace, static_cast<int64_t>(at.out), 1));
  table.lse_offsets = static_cast<int64_t*>(At(workspace, static_cast<int64_t>(at.lse), 1));
  RETURN_IF_ERROR(LaunchRaggedDocumentTable(
      documents->doc_starts, shape, p.documents.capacity, p.documents.longest,
      documents->group.above, documents->group.up_to,
      static_cast<int32_t*>(At(workspace, static_cast<int64_t>(at.first_tokens), 1)), table,
      stream));
  uids.insert(uids.end(), {p.seq_q, p.seq_kv, p.qkv_offsets, p.out_offsets, p.lse_offsets});
  pointers.insert(pointers.end(), {table.seq_lens, table.seq_lens, table.qkv_offsets,
                                   table.out_offsets, table.lse_offsets});
  return absl::OkStatus();
}

}  // namespace

absl::Status CudnnAttention::Forward(const AttentionShape& shape, const void* qkv, void* out,
                                     float* lse, void* workspace, cudaStream_t stream,
                                     const Documents* documents) {
  absl::StatusOr<Plan*> got = GetPlan(shape, kForward, PlanOf(documents), KeyBand{});
  if (!got.ok()) return got.status();
  Plan& p = **got;
  const Layout L(shape, p.documents, p.band);
  std::vector<int64_t> uids = {p.q, p.k, p.v, p.o, p.stats, p.scale, p.neg_inf};
  std::vector<void*> pointers = {
      const_cast<void*>(qkv), At(qkv, L.KOffset(), 2), At(qkv, L.VOffset(), 2), out, lse,
      &p.scale_value, &p.neg_inf_value};
  RETURN_IF_ERROR(AddDocumentTable(p, shape, documents, workspace, uids, pointers, stream));
  return Execute(static_cast<cudnnHandle_t>(handle_), p, uids, pointers, workspace, stream);
}

absl::Status CudnnAttention::Backward(const AttentionShape& shape, bool deterministic,
                                      const void* grad_out, const void* qkv, const void* out,
                                      const float* lse, void* grad_qkv, void* workspace,
                                      cudaStream_t stream, const Documents* documents,
                                      int key_bands) {
  RETURN_IF_ERROR(CheckKeyBands(shape, deterministic, documents, key_bands));
  if (key_bands > 1) {
    return BackwardInBands(shape, key_bands, grad_out, qkv, out, lse, grad_qkv, workspace,
                           stream);
  }
  absl::StatusOr<Plan*> got =
      GetPlan(shape, deterministic ? kBackwardDeterministic : kBackwardAtomic, PlanOf(documents),
              KeyBand{});
  if (!got.ok()) return got.status();
  Plan& p = **got;
  const Layout L(shape, p.documents, p.band);
  std::vector<int64_t> uids = {p.q,   p.k,   p.v,   p.o,           p.d_o,   p.stats, p.d_q,
                               p.d_k, p.d_v, p.softmax_sum, p.scale, p.neg_inf, p.one};
  std::vector<void*> pointers = {const_cast<void*>(qkv),
                                 At(qkv, L.KOffset(), 2),
                                 At(qkv, L.VOffset(), 2),
                                 const_cast<void*>(out),
                                 const_cast<void*>(grad_out),
                                 const_cast<float*>(lse),
                                 grad_qkv,
                                 At(grad_qkv, L.KOffset(), 2),
                                 At(grad_qkv, L.VOffset(), 2),
                                 At(workspace, static_cast<int64_t>(p.extra_offset), 1),
                                 &p.scale_value,
                                 &p.neg_inf_value,
                                 &p.one_value};
  if (!deterministic) {
    uids.push_back(p.dq_accum);
    pointers.push_back(At(workspace, static_cast<int64_t>(p.dq_accum_offset), 1));
  }
  RETURN_IF_ERROR(AddDocumentTable(p, shape, documents, workspace, uids, pointers, stream));
  return Execute(static_cast<cudnnHandle_t>(handle_), p, uids, pointers, workspace, stream);
}

absl::Status CudnnAttention::BackwardInBands(const AttentionShape& shape, int bands,
                                             const void* grad_out, const void* qkv,
                                             const void* out, const float* lse, void* grad_qkv,
                                             void* workspace, cudaStream_t stream) {
  ASSIGN_OR_RETURN(const size_t partials_at, BandPartialsOffset(shape, bands));
  const int64_t partials = static_cast<int64_t>(partials_at);
  for (int c = 0; c < bands; ++c) {
    const KeyBand band = BandOf(shape, bands, c);
    ASSIGN_OR_RETURN(Plan * plan,
                     GetPlan(shape, kBackwardDeterministic, PlannedDocuments{}, band));
    Plan& p = *plan;
    const Layout L(shape, p.documents, p.band);
    // The band's first key, which is also its first query: a row of qkv,
    // grad_qkv, out and lse.
    const int64_t first = shape.seq - band.rows;
    void* partial = At(workspace, partials + KeyBandPartialOffset(shape, bands, c), 1);
    const std::vector<int64_t> uids = {p.q,     p.k,       p.v,     p.o,   p.d_o,
                                       p.stats, p.d_q,     p.d_k,   p.d_v, p.softmax_sum,
                                       p.scale, p.neg_inf, p.one};
    std::vector<void*> pointers = {At(qkv, first * L.ts, 2),
                                   At(qkv, first * L.ts + L.KOffset(), 2),
                                   At(qkv, first * L.ts + L.VOffset(), 2),
                                   At(out, first * L.os, 2),
                                   At(grad_out, first * L.os, 2),
                                   At(lse, first, 4),
                                   partial,
                                   At(grad_qkv, first * L.ts + L.KOffset(), 2),
                                   At(grad_qkv, first * L.ts + L.VOffset(), 2),
                                   At(workspace, static_cast<int64_t>(p.extra_offset), 1),
                                   &p.scale_value,
                                   &p.neg_inf_value,
                                   &p.one_value};
    RETURN_IF_ERROR(
        Execute(static_cast<cudnnHandle_t>(handle_), p, uids, pointers, workspace, stream));
  }
  return LaunchSumKeyBands(shape, bands, At(workspace, partials, 1), grad_qkv, stream);
}

}  // namespace cuda
}  // namespace tessera
