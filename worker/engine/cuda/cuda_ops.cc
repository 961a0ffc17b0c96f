// CudaOps: the ops API on the GPU (see cuda_ops.h).
#include "worker/engine/cuda/cuda_ops.h"

#include <unistd.h>

#include <vector>

#include "common/status_macros.h"
#include "worker/engine/cpu/tensor_access.h"
#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/gemm.h"
#include "worker/engine/cuda/kernels.h"

namespace tessera {
namespace {

using cpu::CheckDType;
using cpu::CheckRank;
using cpu::CheckShape;

cudaStream_t S(Stream* stream) { return reinterpret_cast<cudaStream_t>(stream); }

class DeviceBuffer : public Buffer {
 public:
  DeviceBuffer(void* data, size_t bytes) : data_(data), bytes_(bytes) {}
  ~DeviceBuffer() override { cudaFree(data_); }
  void* data() const override { return data_; }
  size_t bytes() const override { return bytes_; }

 private:
  void* data_;
  size_t bytes_;
};

// Device memory that grows on first use for a larger shape, then is reused.
class Scratch {
 public:
  ~Scratch() {
    if (data_ != nullptr) cudaFree(data_);
  }
  absl::StatusOr<void*> Get(size_t bytes) {
    if (bytes > bytes_) {
      if (data_ != nullptr) cudaFree(data_);
      data_ = nullptr;
      CUDA_RETURN_IF_ERROR(cudaMalloc(&data_, bytes));
      bytes_ = bytes;
    }
    return data_;
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

class CudaAdamPlan : public AdamPlan {
 public:
  ~CudaAdamPlan() override {
    for (void* p : {static_cast<void*>(table), static_cast<void*>(block_shard),
                    static_cast<void*>(block_offset), static_cast<void*>(partials)}) {
      if (p != nullptr) cudaFree(p);
    }
  }
  cuda::DeviceAdamShard* table = nullptr;
  int* block_shard = nullptr;
  int64_t* block_offset = nullptr;
  float* partials = nullptr;
  int num_shards = 0;
  int num_blocks = 0;
};

class CudaOps : public Ops {
 public:
  explicit CudaOps(int device) : device_(device) {}

  absl::Status Init() {
    CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&props_, device_));
    CUDA_RETURN_IF_ERROR(cudaMalloc(&error_flag_, sizeof(int)));
    CUDA_RETURN_IF_ERROR(cudaMemset(error_flag_, 0, sizeof(int)));
    return gemm_.Init(32 << 20);
  }
  ~CudaOps() override {
    if (error_flag_ != nullptr) cudaFree(error_flag_);
  }

  // ---- Memory ----
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t bytes) override {
    void* p = nullptr;
    CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes == 0 ? 256 : bytes));
    return std::unique_ptr<Buffer>(new DeviceBuffer(p, bytes));
  }
  absl::Status CopyToDevice(void* dst, const void* src, size_t bytes, Stream* stream) override {
    if (bytes == 0) return absl::OkStatus();
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, S(stream)));
    return absl::OkStatus();
  }
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes, Stream* stream) override {
    if (bytes == 0) return absl::OkStatus();
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, S(stream)));
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(S(stream)));
    return absl::OkStatus();
  }
  absl::Status CopyDeviceToDevice(void* dst, const void* src, size_t bytes, Stream* stream) override {
    if (bytes == 0) return absl::OkStatus();
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, S(stream)));
    return absl::OkStatus();
  }
  absl::Status Memset(void* dst, int value, size_t bytes, Stream* stream) override {
    if (bytes == 0) return absl::OkStatus();
    CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dst, value, bytes, S(stream)));
    return absl::OkStatus();
  }
  absl::Status Synchronize(Stream* stream) override {
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(S(stream)));
    int flag = 0;
    CUDA_RETURN_IF_ERROR(cudaMemcpy(&flag, error_flag_, sizeof(int), cudaMemcpyDeviceToHost));
    if (flag != 0) {
      CUDA_RETURN_IF_ERROR(cudaMemset(error_flag_, 0, sizeof(int)));
      return absl::InvalidArgumentError(
          "a token id or target was outside [0, vocab_size) (rows were treated as zero/ignored)");
    }
    return absl::OkStatus();
  }

  // ---- FP8 ----
  absl::Status Quantize(const TensorDesc& in, const TensorDesc& out, Stream* stream) override {
    RETURN_IF_ERROR(CheckDType("in", in, {DType::kFloat32, DType::kBFloat16}));
    RETURN_IF_ERROR(CheckDType("out", out, {DType::kE4M3, DType::kE5M2}));
    if (out.scale == nullptr) return absl::InvalidArgumentError("out.scale: must be set");
    if (in.NumElements() != out.NumElements()) {
      return absl::InvalidArgumentError("out: element count differs from in");
    }
    return cuda::LaunchQuantize(in, out, nullptr, S(stream));
  }
  absl::Status QuantizeTranspose(const TensorDesc& in, const TensorDesc& out,
                                 const TensorDesc& out_t, Stream* stream) override {
    RETURN_IF_ERROR(CheckDType("in", in, {DType::kFloat32, DType::kBFloat16}));
    RETURN_IF_ERROR(CheckDType("out", out, {DType::kE4M3, DType::kE5M2}));
    RETURN_IF_ERROR(CheckRank("in", in, 2));
    RETURN_IF_ERROR(CheckShape("out_t", out_t, Shape{in.shape[1], in.shape[0]}));
    if (out.scale == nullptr) return absl::InvalidArgumentError("out.scale: must be set");
    return cuda::LaunchQuantize(in, out, &out_t, S(stream));
  }
  absl::Status Dequantize(const TensorDesc& in, const TensorDesc& out, Stream* stream) override {
    RETURN_IF_ERROR(CheckDType("in", in, {DType::kE4M3, DType::kE5M2}));
    RETURN_IF_ERROR(CheckDType("out", out, {DType::kFloat32, DType::kBFloat16}));
    if (in.scale_inv == nullptr) return absl::InvalidArgumentError("in.scale_inv: must be set");
    return cuda::LaunchDequantize(in, out, S(stream));
  }
  absl::Status Amax(const TensorDesc& in, float* amax, Stream* stream) override {
    RETURN_IF_ERROR(CheckDType("in", in, {DType::kFloat32, DType::kBFloat16}));
    return cuda::LaunchAmax(in, amax, S(stream));
  }
  absl::Status UpdateFp8Scales(float* amax, float* history, float* scale, float* scale_inv, int n,
                               int history_len, float fp8_max, int margin, AmaxAlgo algo,
                               Stream* stream) override {
    if (n < 0 || history_len < 1) {
      return absl::InvalidArgumentError("n must be >= 0 and history_len >= 1");
    }
    return cuda::LaunchUpdateFp8Scales(amax, history, scale, scale_inv, n, history_len, fp8_max,
                                       margin, algo, S(stream));
  }
  absl::Status Transpose(const TensorDesc& in, const TensorDesc& out, Stream* stream) override {
    RETURN_IF_ERROR(CheckRank("in", in, 2));
    RETURN_IF_ERROR(CheckShape("out", out, Shape{in.shape[1], in.shape[0]}));
    return cuda::LaunchTranspose(in, out, S(stream));
  }

  // ---- GEMM ----
  absl::Status Gemm(const TensorDesc& a, bool trans_a, const TensorDesc& b, bool trans_b,
                    const TensorDesc& d, bool accumulate, Stream* stream) override {
    const std::initializer_list<DType> operand = {DType::kBFloat16, DType::kE4M3, DType::kE5M2};
    RETURN_IF_ERROR(CheckDType("a", a, operand));
    RETURN_IF_ERROR(CheckDType("b", b, operand));
    RETURN_IF_ERROR(CheckDType("d", d, {DType::kFloat32, DType::kBFloat16}));
    RETURN_IF_ERROR(CheckRank("a", a, 2));
    RETURN_IF_ERROR(CheckRank("b", b, 2));
    RETURN_IF_ERROR(CheckRank("d", d, 2));
    const bool fp8 = IsFp8(a.dtype);
    if (fp8 != IsFp8(b.dtype)) return absl::InvalidArgumentError("a, b: both bf16 or both FP8");
    if (fp8 && a.dtype == DType::kE5M2 && b.dtype == DType::kE5M2) {
      return absl::InvalidArgumentError("a, b: e5m2 x e5m2 is not supported");
    }
    if (fp8 && (trans_a || !trans_b)) {
      return absl::InvalidArgumentError("FP8 operands must be K-contiguous: trans_a=false, trans_b=true");
    }
    if (fp8 && (a.scale_inv == nullptr || b.scale_inv == nullptr)) {
      return absl::InvalidArgumentError("FP8 operands need scale_inv");
    }
    if (accumulate && d.dtype != DType::kFloat32) {
      return absl::InvalidArgumentError("d: accumulate (beta=1) needs an fp32 output");
    }
    const int64_t m = trans_a ? a.shape[1] : a.shape[0], k = trans_a ? a.shape[0] : a.shape[1];
    const int64_t kb = trans_b ? b.shape[1] : b.shape[0], n = trans_b ? b.shape[0] : b.shape[1];
    if (k != kb) return absl::InvalidArgumentError("a, b: inner dimensions differ");
    RETURN_IF_ERROR(CheckShape("d", d, Shape{m, n}));
    return gemm_.Run(a, trans_a, b, trans_b, d, accumulate, S(stream));
  }

  // ---- Elementwise and normalisation ----
  absl::Status Add(const TensorDesc& a, const TensorDesc& b, const TensorDesc& out,
                   Stream* stream) override {
    if (a.NumElements() != out.NumElements() || b.NumElements() != out.NumElements()) {
      return absl::InvalidArgumentError("a, b, out: element counts differ");
    }
    return cuda::LaunchAdd(a, b, out, S(stream));
  }
  absl::Status Cast(const TensorDesc& in, const TensorDesc& out, Stream* stream) override {
    if (in.NumElements() != out.NumElements()) {
      return absl::InvalidArgumentError("out: element count differs from in");
    }
    return cuda::LaunchCast(in, out, S(stream));
  }
  absl::Status EmbeddingForward(const TensorDesc& ids, const TensorDesc& table,
                                const TensorDesc& out, Stream* stream) override {
    RETURN_IF_ERROR(CheckRank("table", table, 2));
    RETURN_IF_ERROR(CheckShape("out", out, Shape{ids.NumElements(), table.shape[1]}));
    return cuda::LaunchEmbeddingForward(ids, table, out, error_flag_, S(stream));
  }
  absl::Status EmbeddingBackward(const TensorDesc& ids, const TensorDesc& grad_out,
                                 const TensorDesc& grad_table, Stream* stream) override {
    RETURN_IF_ERROR(CheckDType("grad_table", grad_table, {DType::kFloat32}));
    return cuda::LaunchEmbeddingBackward(ids, grad_out, grad_table, error_flag_, S(stream));
  }
  absl::Status RmsNormForward(const TensorDesc& x, const TensorDesc& weight, float eps,
                              const TensorDesc& out, const TensorDesc& rstd, Stream* stream) override {
    RETURN_IF_ERROR(CheckRank("x", x, 2));
    RETURN_IF_ERROR(CheckShape("weight", weight, Shape{x.shape[1]}));
    RETURN_IF_ERROR(CheckShape("rstd", rstd, Shape{x.shape[0]}));
    return cuda::LaunchRmsNormForward(x, weight, eps, out, rstd, S(stream));
  }
  absl::Status RmsNormBackward(const TensorDesc& grad_out, const TensorDesc& x,
                               const TensorDesc& weight, const TensorDesc& rstd,
                               const TensorDesc& grad_x, bool accumulate_grad_x,
                               const TensorDesc& grad_weight, Stream* stream) override {
    RETURN_IF_ERROR(CheckRank("x", x, 2));
    RETURN_IF_ERROR(CheckDType("grad_weight", grad_weight, {DType::kFloat32}));
    return cuda::LaunchRmsNormBackward(grad_out, x, weight, rstd, grad_x, accumulate_grad_x,
                                       grad_weight, S(stream));
  }
  absl::Status RopeForward(const TensorDesc& qkv, float theta, Stream* stream) override {
    RETURN_IF_ERROR(CheckRank("qkv", qkv, 5));
    return cuda::LaunchRope(qkv, theta, 1.0f, S(stream));
  }
  absl::Status RopeBackward(const TensorDesc& grad_qkv, float theta, Stream* stream) override {
    RETURN_IF_ERROR(CheckRank("grad_qkv", grad_qkv, 5));
    return cuda::LaunchRope(grad_qkv, theta, -1.0f, S(stream));
  }
  absl::Status AttentionForward(const TensorDesc& qkv, const TensorDesc& out, const TensorDesc& lse,
                                Stream* stream) override {
    RETURN_IF_ERROR(CheckRank("qkv", qkv, 5));
    return cuda::LaunchAttentionForward(qkv, out, lse, S(stream));
  }
  absl::Status AttentionBackward(const TensorDesc& grad_out, const TensorDesc& qkv,
                                 const TensorDesc& out, const TensorDesc& lse,
                                 const TensorDesc& grad_qkv, Stream* stream) override {
    RETURN_IF_ERROR(CheckRank("qkv", qkv, 5));
    ASSIGN_OR_RETURN(void* scratch, attention_scratch_.Get(2 * out.NumElements() * sizeof(float)));
    return cuda::LaunchAttentionBackward(grad_out, qkv, out, lse, grad_qkv,
                                         static_cast<float*>(scratch), S(stream));
  }
  absl::Status SwiGluForward(const TensorDesc& gate_up, const TensorDesc& out, Stream* stream) override {
    RETURN_IF_ERROR(CheckRank("gate_up", gate_up, 2));
    return cuda::LaunchSwiGluForward(gate_up, out, S(stream));
  }
  absl::Status SwiGluBackward(const TensorDesc& grad_out, const TensorDesc& gate_up,
                              const TensorDesc& grad_gate_up, Stream* stream) override {
    RETURN_IF_ERROR(CheckRank("gate_up", gate_up, 2));
    return cuda::LaunchSwiGluBackward(grad_out, gate_up, grad_gate_up, S(stream));
  }

  // ---- Fused linear + cross-entropy ----
  absl::Status FusedLinearCrossEntropy(const TensorDesc& x, const TensorDesc& weight,
                                       const TensorDesc& targets, int ignore_index,
                                       int chunk_tokens, float* loss_sum, float* valid_tokens,
                                       const TensorDesc& grad_x, const TensorDesc& grad_weight,
                                       Stream* stream) override {
    RETURN_IF_ERROR(CheckDType("x", x, {DType::kBFloat16}));
    RETURN_IF_ERROR(CheckDType("weight", weight, {DType::kBFloat16}));
    RETURN_IF_ERROR(CheckDType("grad_weight", grad_weight, {DType::kFloat32}));
    RETURN_IF_ERROR(CheckRank("x", x, 2));
    RETURN_IF_ERROR(CheckRank("weight", weight, 2));
    const int64_t tokens = x.shape[0], h = x.shape[1], vocab = weight.shape[0];
    RETURN_IF_ERROR(CheckShape("grad_x", grad_x, Shape{tokens, h}));
    RETURN_IF_ERROR(CheckShape("grad_weight", grad_weight, Shape{vocab, h}));
    if (chunk_tokens < 1) return absl::InvalidArgumentError("chunk_tokens: must be >= 1");
    const int64_t chunk = std::min<int64_t>(chunk_tokens, tokens);
    ASSIGN_OR_RETURN(void* logits, ce_logits_.Get(chunk * vocab * sizeof(float)));
    ASSIGN_OR_RETURN(void* dlogits, ce_dlogits_.Get(chunk * vocab * 2));
    for (int64_t start = 0; start < tokens; start += chunk) {
      const int64_t c = std::min(chunk, tokens - start);
      TensorDesc xc = MakeTensor(static_cast<uint16_t*>(x.data) + start * h, DType::kBFloat16, Shape{c, h});
      TensorDesc gxc = MakeTensor(static_cast<uint16_t*>(grad_x.data) + start * h, DType::kBFloat16, Shape{c, h});
      TensorDesc lg = MakeTensor(logits, DType::kFloat32, Shape{c, vocab});
      TensorDesc dl = MakeTensor(dlogits, DType::kBFloat16, Shape{c, vocab});
      RETURN_IF_ERROR(gemm_.Run(xc, false, weight, true, lg, false, S(stream)));
      RETURN_IF_ERROR(cuda::LaunchCrossEntropyRows(
          static_cast<float*>(logits), static_cast<const int32_t*>(targets.data) + start,
          static_cast<int>(c), static_cast<int>(vocab), ignore_index, loss_sum, valid_tokens,
          dlogits, error_flag_, S(stream)));
      RETURN_IF_ERROR(gemm_.Run(dl, false, weight, false, gxc, false, S(stream)));
      RETURN_IF_ERROR(gemm_.Run(dl, true, xc, false, grad_weight, true, S(stream)));
    }
    return absl::OkStatus();
  }

  // ---- Optimizer ----
  absl::StatusOr<std::unique_ptr<AdamPlan>> CreateAdamPlan(absl::Span<const AdamShard> shards) override {
    std::vector<cuda::DeviceAdamShard> table;
    std::vector<int> block_shard;
    std::vector<int64_t> block_offset;
    for (size_t i = 0; i < shards.size(); ++i) {
      const AdamShard& s = shards[i];
      const int64_t n = s.master.NumElements();
      if (s.grad.NumElements() != n || s.exp_avg.NumElements() != n ||
          s.exp_avg_sq.NumElements() != n || s.fp8.NumElements() != n) {
        return absl::InvalidArgumentError(absl::StrCat("shard ", i, ": element counts differ"));
      }
      const bool fp8 = s.fp8.dtype == DType::kE4M3;
      if (fp8 && s.fp8.scale == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("shard ", i, ": fp8.scale: must be set"));
      }
      table.push_back({static_cast<float*>(s.master.data), static_cast<const float*>(s.grad.data),
                       static_cast<float*>(s.exp_avg.data), static_cast<float*>(s.exp_avg_sq.data),
                       s.fp8.data, s.fp8.scale, s.fp8.scale_inv, s.fp8.amax, n, fp8 ? 1 : 0,
                       s.apply_weight_decay ? 1 : 0});
      for (int64_t off = 0; off < n; off += cuda::kAdamChunk) {
        block_shard.push_back(static_cast<int>(i));
        block_offset.push_back(off);
      }
    }
    auto plan = std::make_unique<CudaAdamPlan>();
    plan->num_shards = static_cast<int>(table.size());
    plan->num_blocks = static_cast<int>(block_shard.size());
    CUDA_RETURN_IF_ERROR(cudaMalloc(&plan->table, std::max<size_t>(1, table.size()) * sizeof(table[0])));
    CUDA_RETURN_IF_ERROR(cudaMalloc(&plan->block_shard, std::max<size_t>(1, block_shard.size()) * sizeof(int)));
    CUDA_RETURN_IF_ERROR(cudaMalloc(&plan->block_offset, std::max<size_t>(1, block_offset.size()) * sizeof(int64_t)));
    CUDA_RETURN_IF_ERROR(cudaMalloc(&plan->partials, std::max<size_t>(1, block_shard.size()) * sizeof(float)));
    CUDA_RETURN_IF_ERROR(cudaMemcpy(plan->table, table.data(), table.size() * sizeof(table[0]), cudaMemcpyHostToDevice));
    CUDA_RETURN_IF_ERROR(cudaMemcpy(plan->block_shard, block_shard.data(), block_shard.size() * sizeof(int), cudaMemcpyHostToDevice));
    CUDA_RETURN_IF_ERROR(cudaMemcpy(plan->block_offset, block_offset.data(), block_offset.size() * sizeof(int64_t), cudaMemcpyHostToDevice));
    return std::unique_ptr<AdamPlan>(std::move(plan));
  }
  absl::Status GradSumSquares(const AdamPlan& plan, float* sum_sq, Stream* stream) override {
    const auto& p = static_cast<const CudaAdamPlan&>(plan);
    return cuda::LaunchGradSumSquares(p.table, p.block_shard, p.block_offset, p.num_blocks,
                                      p.partials, sum_sq, S(stream));
  }
  absl::Status ComputeGradScale(const float* sum_sq, const float* tokens, float max_norm,
                                float* grad_norm, float* grad_scale, Stream* stream) override {
    return cuda::LaunchComputeGradScale(sum_sq, tokens, max_norm, grad_norm, grad_scale, S(stream));
  }
  absl::Status FusedAdam(const AdamPlan& plan, const AdamHyper& hyper, const float* grad_scale,
                         Stream* stream) override {
    const auto& p = static_cast<const CudaAdamPlan&>(plan);
    return cuda::LaunchFusedAdam(p.table, p.num_shards, p.block_shard, p.block_offset,
                                 p.num_blocks, hyper, grad_scale, S(stream));
  }

 private:
  int device_;
  cudaDeviceProp props_{};
  int* error_flag_ = nullptr;
  cuda::GemmRunner gemm_;
  Scratch attention_scratch_, ce_logits_, ce_dlogits_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Ops>> CreateCudaOps(int device_index) {
  auto ops = std::make_unique<CudaOps>(device_index);
  RETURN_IF_ERROR(ops->Init());
  return std::unique_ptr<Ops>(std::move(ops));
}

absl::StatusOr<v1::DeviceInfo> DescribeCudaDevice(int index) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || index >= count) {
    cudaGetLastError();
    return absl::NotFoundError(absl::StrCat("no CUDA device ", index, " (", count, " visible)"));
  }
  cudaDeviceProp props;
  CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&props, index));
  v1::DeviceInfo info;
  info.set_kind(v1::CUDA);
  info.set_index(index);
  info.set_name(props.name);
  info.set_memory_bytes(static_cast<int64_t>(props.totalGlobalMem));
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  info.set_host(host);
  return info;
}

}  // namespace tessera
