// cuBLASLt GEMM with cached plans (see gemm.h). Host code, plus one tiny
// kernel that moves an FP8 GEMM's scale_inv values into aligned slots when
// the caller's are not 16-byte aligned.
//
// Determinism: a plan's algorithm is a function of its key and the
// heuristic's answer (gemm_algo_choice.h), unless the runner times
// candidates; cuBLASLt runs one algorithm the same way every time with our
// own workspace on one stream. No attribute that makes cuBLASLt
// synchronise through atomics (CUBLASLT_MATMUL_DESC_ATOMIC_SYNC_*) is set.
#include "worker/engine/cuda/gemm.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/engine/cuda/cuda_check.h"

namespace tessera {
namespace cuda {

namespace {

static_assert(kReductionNone == CUBLASLT_REDUCTION_SCHEME_NONE &&
                  kReductionInPlace == CUBLASLT_REDUCTION_SCHEME_INPLACE &&
                  kReductionComputeType == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE &&
                  kReductionOutputType == CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE,
              "gemm_algo_choice.h mirrors cublasLtReductionScheme_t");

// ---- kernels ---------------------------------------------------------------

// slots[0] = cuBLASLt A's scale (our b), slots[4] = cuBLASLt B's (our a).
__global__ void CopyScalesKernel(const float* b_scale_inv, const float* a_scale_inv,
                                 float* slots) {
  slots[0] = *b_scale_inv;
  slots[4] = *a_scale_inv;
}

// ---- host helpers ----------------------------------------------------------

cudaDataType_t ToCudaType(DType d) {
  switch (d) {
    case DType::kBFloat16: return CUDA_R_16BF;
    case DType::kE4M3: return CUDA_R_8F_E4M3;
    case DType::kE5M2: return CUDA_R_8F_E5M2;
    default: return CUDA_R_32F;
  }
}

std::string Describe(int64_t m, int64_t n, int64_t k, const TensorDesc& a, const TensorDesc& b,
                     const TensorDesc& d, bool accumulate) {
  return absl::StrCat(m, "x", n, "x", k, " ", DTypeName(a.dtype), " x ", DTypeName(b.dtype),
                      " -> ", DTypeName(d.dtype), accumulate ? " (accumulate)" : "");
}

// What the selection rule reads of a heuristic result.
GemmCandidate ReadCandidate(const cublasLtMatmulHeuristicResult_t& result) {
  GemmCandidate c;
  c.usable = result.state == CUBLAS_STATUS_SUCCESS;
  size_t written = 0;
  int32_t split_k = 1;
  uint32_t scheme = kReductionNone;
  // An attribute the algorithm cannot report leaves it unusable: the rule
  // must not guess how its partial sums are combined.
  if (cublasLtMatmulAlgoConfigGetAttribute(&result.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                           &split_k, sizeof(split_k),
                                           &written) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatmulAlgoConfigGetAttribute(&result.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                           &scheme, sizeof(scheme),
                                           &written) != CUBLAS_STATUS_SUCCESS) {
    c.usable = false;
  }
  c.split_k = split_k;
  c.reduction_scheme = scheme;
  return c;
}

// "algo 66 tile 20 stages 8 split-k 1 reduction 0 swizzle 0 custom 0 inner 0
// cluster 0": the configuration attributes that identify an algorithm.
std::string DescribeAlgo(const cublasLtMatmulAlgo_t& algo) {
  struct Field {
    const char* name;
    cublasLtMatmulAlgoConfigAttributes_t attr;
    size_t bytes;  // the attribute's storage size (cublasLt.h); all are non-negative
  };
  static constexpr Field kFields[] = {
      {"algo", CUBLASLT_ALGO_CONFIG_ID, 4},
      {"tile", CUBLASLT_ALGO_CONFIG_TILE_ID, 4},
      {"stages", CUBLASLT_ALGO_CONFIG_STAGES_ID, 4},
      {"split-k", CUBLASLT_ALGO_CONFIG_SPLITK_NUM, 4},
      {"reduction", CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, 4},
      {"swizzle", CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, 4},
      {"custom", CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, 4},
      {"inner", CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, 2},
      {"cluster", CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, 2},
  };
  std::string out;
  for (const Field& f : kFields) {
    uint32_t value = 0;  // little-endian: a 2-byte attribute fills the low half
    size_t written = 0;
    const bool ok = cublasLtMatmulAlgoConfigGetAttribute(&algo, f.attr, &value, f.bytes,
                                                         &written) == CUBLAS_STATUS_SUCCESS;
    absl::StrAppend(&out, out.empty() ? "" : " ", f.name, " ", ok ? absl::StrCat(value) : "?");
  }
  return out;
}

}  // namespace

size_t GemmRunner::KeyHash::operator()(const Key& key) const {
  size_t h = std::hash<int64_t>()(key.m);
  auto mix = [&h](size_t v) { h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
  mix(std::hash<int64_t>()(key.n));
  mix(std::hash<int64_t>()(key.k));
  mix(static_cast<size_t>(key.a) | static_cast<size_t>(key.b) << 8 |
      static_cast<size_t>(key.d) << 16 | static_cast<size_t>(key.trans_a) << 24 |
      static_cast<size_t>(key.trans_b) << 25 | static_cast<size_t>(key.accumulate) << 26);
  mix(static_cast<size_t>(key.align_lt_a) | static_cast<size_t>(key.align_lt_b) << 16 |
      static_cast<size_t>(key.align_c) << 32 | static_cast<size_t>(key.align_d) << 48);
  return h;
}

GemmRunner::~GemmRunner() {
  for (auto& entry : plans_) {
    Plan& plan = *entry.second;
    if (plan.lt_a != nullptr) cublasLtMatrixLayoutDestroy(plan.lt_a);
    if (plan.lt_b != nullptr) cublasLtMatrixLayoutDestroy(plan.lt_b);
    if (plan.lt_d != nullptr) cublasLtMatrixLayoutDestroy(plan.lt_d);
    if (plan.desc != nullptr) cublasLtMatmulDescDestroy(plan.desc);
  }
  if (scale_slots_ != nullptr) cudaFree(scale_slots_);
}

absl::Status GemmRunner::Init() {
  CUDA_RETURN_IF_ERROR(cudaMalloc(&scale_slots_, 8 * sizeof(float)));  // cudaMalloc: 256B-aligned
  return absl::OkStatus();
}

absl::Status GemmRunner::BuildPlan(const Key& key, const TensorDesc& a, bool trans_a,
                                   const TensorDesc& b, bool trans_b, const TensorDesc& d,
                                   bool accumulate, Plan& plan) {
  const int64_t m = d.shape[0], n = d.shape[1];
  const int64_t k = trans_a ? a.shape[0] : a.shape[1];
  plan.description = Describe(m, n, k, a, b, d, accumulate);
  // Column-major view: Dᵀ [n, m] = op_lt(B=our b) [n, k] · op_lt(A=our a) [k, m].
  const cublasOperation_t op_lt_a = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_lt_b = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                                        &op_lt_a, sizeof(op_lt_a)));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                                        &op_lt_b, sizeof(op_lt_b)));
  // A row-major [r, c] matrix is column-major [c, r] with leading dimension c.
  CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan.lt_a, ToCudaType(b.dtype), b.shape[1],
                                                    b.shape[0], b.shape[1]));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan.lt_b, ToCudaType(a.dtype), a.shape[1],
                                                    a.shape[0], a.shape[1]));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan.lt_d, ToCudaType(d.dtype), n, m, n));
  if (a.dtype == DType::kE4M3 && b.dtype == DType::kE4M3) {
    // Forward products (activations x weights, both e4m3) accumulate on the
    // tensor cores' fast path; gradient products (an e5m2 operand) keep the
    // periodic promotion to full fp32, as TransformerEngine does.
    const int8_t fast_accumulation = 1;
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accumulation, sizeof(fast_accumulation)));
  }
  if (IsFp8(a.dtype)) {  // the heuristic sees scaled operands; Run sets the pointers
    const float* lt_a_scale = scale_slots_;
    const float* lt_b_scale = scale_slots_ + 4;
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &lt_a_scale, sizeof(lt_a_scale)));
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &lt_b_scale, sizeof(lt_b_scale)));
    plan.lt_a_scale = lt_a_scale;
    plan.lt_b_scale = lt_b_scale;
  }
  cublasLtMatmulPreference_t pref;
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
  const size_t workspace_bytes = ctx_->workspace_bytes();
  // The operands' real alignments, so the heuristic offers only algorithms
  // that run on them (the default assumes 256 bytes).
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> alignments[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_lt_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_lt_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_d},
  };
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes, sizeof(workspace_bytes));
  for (const auto& [attr, bytes] : alignments) {
    if (st == CUBLAS_STATUS_SUCCESS) {
      st = cublasLtMatmulPreferenceSetAttribute(pref, attr, &bytes, sizeof(bytes));
    }
  }
  constexpr int kCandidates = 64;
  cublasLtMatmulHeuristicResult_t results[kCandidates];
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatmulAlgoGetHeuristic(ctx_->cublaslt(), plan.desc, plan.lt_a, plan.lt_b,
                                        plan.lt_d, plan.lt_d, pref, kCandidates, results, &found);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  CUBLAS_RETURN_IF_ERROR(st);
  ++plans_built_;
  std::vector<GemmCandidate> candidates;
  for (int i = 0; i < found; ++i) candidates.push_back(ReadCandidate(results[i]));
  for (const int i : GemmCandidatesToTry(candidates, selection_)) {
    plan.algos.push_back(results[i].algo);
  }
  if (plan.algos.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuBLASLt has no ",
        selection_ == GemmAlgoSelection::kDeterministic ? "fixed-reduction-order " : "",
        "algorithm for ", plan.description, " (", found, " candidates from its heuristic)"));
  }
  plan.needs_timing = selection_ == GemmAlgoSelection::kTimed;
  return absl::OkStatus();
}

absl::Status GemmRunner::SetScales(Plan& plan, const TensorDesc& a, const TensorDesc& b,
                                   cudaStream_t stream) {
  // cuBLASLt's A is our b and its B our a (see gemm.h).
  const float* lt_a_scale = b.scale_inv;
  const float* lt_b_scale = a.scale_inv;
  const auto aligned = [](const float* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (!aligned(lt_a_scale) || !aligned(lt_b_scale)) {
    CopyScalesKernel<<<1, 1, 0, stream>>>(b.scale_inv, a.scale_inv, scale_slots_);
    CUDA_RETURN_IF_LAUNCH_FAILED();
    ++scale_copies_;
    lt_a_scale = scale_slots_;
    lt_b_scale = scale_slots_ + 4;
  }
  if (lt_a_scale != plan.lt_a_scale) {
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &lt_a_scale, sizeof(lt_a_scale)));
    plan.lt_a_scale = lt_a_scale;
  }
  if (lt_b_scale != plan.lt_b_scale) {
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &lt_b_scale, sizeof(lt_b_scale)));
    plan.lt_b_scale = lt_b_scale;
  }
  return absl::OkStatus();
}

absl::Status GemmRunner::ChooseFastest(Plan& plan, const TensorDesc& a, const TensorDesc& b,
                                       void* d, bool accumulate, cudaStream_t stream) {
  plan.needs_timing = false;
  if (plan.algos.size() - plan.chosen < 2) return absl::OkStatus();
  // cuBLASLt's A is our b and its B our a (see gemm.h).
  const void* lt_a = b.data;
  const void* lt_b = a.data;
  // A plan that accumulates must leave D as it found it: its timed launches
  // add a product whose smaller operand is all zeros, so D + 0 = D. (An
  // inf or NaN in the other operand would make that sum NaN; the real
  // product it precedes is then non-finite too.) The zeros are allocated
  // for the timing only, once per plan.
  constexpr int kTimedLaunches = 3;
  cudaEvent_t start, stop;
  CUDA_RETURN_IF_ERROR(cudaEventCreate(&start));
  if (const cudaError_t err = cudaEventCreate(&stop); err != cudaSuccess) {
    cudaEventDestroy(start);
    return CudaStatus(err, "cudaEventCreate", __FILE__, __LINE__);
  }
  const auto destroy_events = [&] {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  };
  void* zeros = nullptr;
  if (accumulate) {
    const bool zero_a = a.Bytes() <= b.Bytes();
    const size_t bytes = zero_a ? a.Bytes() : b.Bytes();
    if (cudaMalloc(&zeros, bytes) != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky: clear it and keep the heuristic's order
      destroy_events();
      return absl::OkStatus();
    }
    const cudaError_t err = cudaMemsetAsync(zeros, 0, bytes, stream);  // +0 in every format
    if (err != cudaSuccess) {
      cudaFree(zeros);
      destroy_events();
      return CudaStatus(err, "zeroing a GEMM timing operand", __FILE__, __LINE__);
    }
    (zero_a ? lt_b : lt_a) = zeros;
  }
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  float best_ms = 0.f;
  size_t best = plan.chosen;
  absl::Status status = absl::OkStatus();
  for (size_t i = plan.chosen; i < plan.algos.size() && status.ok(); ++i) {
    auto launch = [&] {
      return cublasLtMatmul(ctx_->cublaslt(), plan.desc, &alpha, lt_a, plan.lt_a, lt_b, plan.lt_b,
                            &beta, d, plan.lt_d, d, plan.lt_d, &plan.algos[i], ctx_->workspace(),
                            ctx_->workspace_bytes(), stream);
    };
    if (launch() != CUBLAS_STATUS_SUCCESS) continue;  // refused: not a candidate here
    cudaError_t err = cudaEventRecord(start, stream);
    for (int r = 0; r < kTimedLaunches && err == cudaSuccess; ++r) {
      if (launch() != CUBLAS_STATUS_SUCCESS) err = cudaErrorLaunchFailure;
    }
    if (err == cudaSuccess) err = cudaEventRecord(stop, stream);
    if (err == cudaSuccess) err = cudaEventSynchronize(stop);
    float ms = 0.f;
    if (err == cudaSuccess) err = cudaEventElapsedTime(&ms, start, stop);
    if (err != cudaSuccess) {
      status = CudaStatus(err, "timing GEMM candidates", __FILE__, __LINE__);
      break;
    }
    if (best_ms == 0.f || ms < best_ms) best_ms = ms, best = i;
  }
  destroy_events();
  if (zeros != nullptr) {
    const cudaError_t err = cudaStreamSynchronize(stream);  // the launches above read it
    cudaFree(zeros);
    if (status.ok() && err != cudaSuccess) {
      status = CudaStatus(err, "timing GEMM candidates", __FILE__, __LINE__);
    }
  }
  plan.chosen = best;
  return status;
}

absl::Status GemmRunner::Run(const TensorDesc& a, bool trans_a, const TensorDesc& b, bool trans_b,
                             const TensorDesc& d, bool accumulate, cudaStream_t stream,
                             const void* addend) {
  const int64_t m = d.shape[0], n = d.shape[1];
  const int64_t k = trans_a ? a.shape[0] : a.shape[1];
  if (m == 0 || n == 0) return absl::OkStatus();
  const void* c = accumulate && addend != nullptr ? addend : d.data;
  if (k == 0) {  // an empty sum: D = 0, or C when accumulating
    if (!accumulate) CUDA_RETURN_IF_ERROR(cudaMemsetAsync(d.data, 0, d.Bytes(), stream));
    if (accumulate && c != d.data) {
      CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(d.data, c, d.Bytes(), cudaMemcpyDeviceToDevice, stream));
    }
    return absl::OkStatus();
  }
  const bool fp8 = IsFp8(a.dtype);
  if (fp8 && k % 16 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a, b: FP8 GEMM needs K to be a multiple of 16 (got ", k, ")"));
  }
  // cuBLASLt's A is our b and its B our a (see gemm.h).
  const Key key{m, n, k, a.dtype, b.dtype, d.dtype, trans_a, trans_b, accumulate,
                PointerAlignmentBytes(b.data), PointerAlignmentBytes(a.data),
                PointerAlignmentBytes(c), PointerAlignmentBytes(d.data)};
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    auto plan = std::make_unique<Plan>();
    absl::Status built = BuildPlan(key, a, trans_a, b, trans_b, d, accumulate, *plan);
    // A failed key is cached too (with no candidates), so a steady state
    // never repeats the heuristic query; its error is rebuilt below.
    it = plans_.emplace(key, std::move(plan)).first;
    if (!built.ok()) return built;
  } else {
    ++plan_hits_;
  }
  Plan& plan = *it->second;
  if (fp8) {
    const absl::Status scales = SetScales(plan, a, b, stream);
    if (!scales.ok()) return scales;
  }
  if (plan.needs_timing) {
    const absl::Status chosen = ChooseFastest(plan, a, b, d.data, accumulate, stream);
    if (!chosen.ok()) return chosen;
  }
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  cublasStatus_t st = CUBLAS_STATUS_NOT_SUPPORTED;
  for (; plan.chosen < plan.algos.size(); ++plan.chosen) {
    st = cublasLtMatmul(ctx_->cublaslt(), plan.desc, &alpha, b.data, plan.lt_a, a.data, plan.lt_b,
                        &beta, c, plan.lt_d, d.data, plan.lt_d, &plan.algos[plan.chosen],
                        ctx_->workspace(), ctx_->workspace_bytes(), stream);
    if (st != CUBLAS_STATUS_NOT_SUPPORTED) break;
  }
  if (st != CUBLAS_STATUS_SUCCESS) {
    const absl::Status s = CublasStatus(st, "cublasLtMatmul", __FILE__, __LINE__);
    return absl::Status(s.code(), absl::StrCat(s.message(), " for ", plan.description));
  }
  return absl::OkStatus();
}

std::vector<std::string> GemmRunner::ChosenAlgorithms() const {
  std::vector<std::string> lines;
  for (const auto& entry : plans_) {
    const Key& key = entry.first;
    const Plan& plan = *entry.second;
    if (plan.chosen >= plan.algos.size()) continue;  // no algorithm (a failed key)
    lines.push_back(absl::StrCat(plan.description, ", alignments ", key.align_lt_a, "/",
                                 key.align_lt_b, "/", key.align_c, "/", key.align_d, ": ",
                                 DescribeAlgo(plan.algos[plan.chosen])));
  }
  std::sort(lines.begin(), lines.end());
  return lines;
}

}  // namespace cuda
}  // namespace tessera
