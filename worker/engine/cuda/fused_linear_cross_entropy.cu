// The per-row part of the fused linear + cross-entropy on the GPU (the GEMMs
// around it are cuBLASLt calls in CudaOps::FusedLinearCrossEntropy). For one
// chunk of bf16 logits [rows, V] (the LM head GEMM's bf16 output, as under
// PyTorch's autocast): row logsumexp in fp32 with max subtraction, the row's
// loss into a per-row buffer that one block then adds to *loss_sum, with the
// count of valid rows to *valid_tokens, in a fixed order (nothing is read
// back to the host), and dlogits = softmax - onehot rounded to bf16 (zero
// rows for ignored tokens), written over the logits when the caller passes
// the same buffer, so a chunk needs V * 2 bytes per row of workspace and
// nothing else. A target outside [0, V) raises the device error flag and is
// treated as ignored.
//
// The kernel is memory-bound (V = 32768: 64 KiB in and 64 KiB out per row).
// Where V is a multiple of 8 and the rows are 16-byte aligned, it moves 8
// logits per 16-byte access:
//  * V <= 32768: a block of 256 or 1024 threads holds its row in registers
//    (32 logits per thread), so the row is read from memory once: max, then
//    sum of exp(x - max), then dlogits.
//  * V up to 147456 (the 128256 and 131072 of large vocabularies): the
//    same, with the row's first 32768 logits in registers and the rest
//    staged in up to 224 KiB of shared memory by asynchronous copies, one
//    block of 1024 threads per SM. The row is still read once: 4 bytes of
//    traffic per logit instead of the streaming kernel's 6.
//  * wider V: one pass for the max and sum together (online softmax: the
//    running sum is rescaled when the max grows), a second for dlogits.
// Any other V or alignment takes the general kernel, which reads the row
// three times with scalar loads. All use the same formulas (expf, logf,
// one rounding to bf16); every sum runs in an order fixed by the shape, so
// dlogits and the loss are the same bits on every run. Every thread reads an element before it writes the same element
// and the target's logit is read before the first barrier, so writing in
// place is safe.
//
// Determinism across runs: which kernel runs depends on V, the pointers'
// alignment (fixed by the allocation) and, for the staged kernel, on
// whether the device grants its shared memory (StagedKernelAllowed's static
// flag caches that per device): the same job on the same GPU model always
// takes the same kernel. The per-row losses are added by one block in row
// order.

#include <cuda_bf16.h>

#include <atomic>
#include <cstdint>

#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/device_util.cuh"
#include "worker/engine/cuda/kernels.h"

namespace tessera {
namespace cuda {
namespace {

constexpr int kVecWidth = 8;       // logits per vector: one 16-byte load, one 16-byte store
constexpr int kVecsPerThread = 4;  // 32 logits per thread in registers
constexpr int kMaxThreads = 1024;
constexpr int kMaxRegisterVocab = kMaxThreads * kVecsPerThread * kVecWidth;  // 32768
// V above kMaxRegisterVocab: the logits past the registers' in shared memory.
constexpr int kMaxStagedSmemBytes = 224 * 1024;
constexpr int kMaxStagedVocab = kMaxRegisterVocab + kMaxStagedSmemBytes / 2;  // 147456
constexpr int kStreamingThreads = 512;  // wider V: two passes over the row

// ---- kernels ---------------------------------------------------------------

// Rows the vector kernels do not sum: an ignored token's dlogits row is
// zeros (8 per 16-byte store), and a target outside [0, V) also raises the
// error flag. Returns whether the row was one of them.
__device__ __forceinline__ bool SkippedRowVectors(int32_t target, int vocab, int ignore_index,
                                                  __nv_bfloat16* drow, float* row_loss,
                                                  int* error_flag) {
  const bool bad = target != ignore_index && (target < 0 || target >= vocab);
  if (target != ignore_index && !bad) return false;
  if (threadIdx.x == 0) *row_loss = 0.f;
  if (bad && threadIdx.x == 0) atomicExch(error_flag, 1);
  for (int c = threadIdx.x * kVecWidth; c < vocab; c += blockDim.x * kVecWidth) {
    *reinterpret_cast<uint4*>(drow + c) = make_uint4(0, 0, 0, 0);  // bf16 +0 is all zero bits
  }
  return true;
}

// A summed row's loss, stored once per block for AddRowLossesKernel.
__device__ __forceinline__ void StoreRowLoss(float lse, float target_logit, float* row_loss) {
  if (threadIdx.x == 0) *row_loss = lse - target_logit;
}

// *loss_sum += the chunk's row losses, *valid_tokens += its valid rows, in
// an order fixed by the row count (one block; BlockSum's tree is fixed).
__global__ void AddRowLossesKernel(const float* row_losses, const int32_t* targets, int rows,
                                   int vocab, int ignore_index, float* loss_sum,
                                   float* valid_tokens) {
  __shared__ float scratch[32];
  float loss = 0.f, count = 0.f;
  for (int r = threadIdx.x; r < rows; r += blockDim.x) {
    const int32_t target = targets[r];
    loss += row_losses[r];
    count += target != ignore_index && target >= 0 && target < vocab ? 1.f : 0.f;
  }
  loss = BlockSum(loss, scratch);
  count = BlockSum(count, scratch);
  if (threadIdx.x == 0) {
    *loss_sum += loss;
    *valid_tokens += count;
  }
}

// dlogits of 8 consecutive logits starting at column c, as one 16-byte word.
__device__ __forceinline__ uint4 SoftmaxMinusOneHot8(const float (&v)[kVecWidth], int c, float lse,
                                                     int target) {
  uint32_t pairs[kVecWidth / 2];
#pragma unroll
  for (int e = 0; e < kVecWidth; e += 2) {
    const __nv_bfloat162 d =
        __floats2bfloat162_rn(expf(v[e] - lse) - (c + e == target ? 1.0f : 0.0f),
                              expf(v[e + 1] - lse) - (c + e + 1 == target ? 1.0f : 0.0f));
    pairs[e / 2] = *reinterpret_cast<const uint32_t*>(&d);
  }
  return make_uint4(pairs[0], pairs[1], pairs[2], pairs[3]);
}

// The three passes of a row over one packed vector of 8 bf16 logits, widened
// exactly to fp32 each time: the running max, the running sum of
// exp(x - m), and the dlogits starting at column c.
__device__ __forceinline__ float MaxOf8(const uint4 raw, float m) {
  float v[kVecWidth];
  Bf16x8AsFloats(raw, v);
#pragma unroll
  for (int e = 0; e < kVecWidth; ++e) m = fmaxf(m, v[e]);
  return m;
}
__device__ __forceinline__ float AddExpsOf8(const uint4 raw, float m, float z) {
  float v[kVecWidth];
  Bf16x8AsFloats(raw, v);
#pragma unroll
  for (int e = 0; e < kVecWidth; ++e) z += expf(v[e] - m);
  return z;
}
__device__ __forceinline__ uint4 DlogitsOf8(const uint4 raw, int c, float lse, int target) {
  float v[kVecWidth];
  Bf16x8AsFloats(raw, v);
  return SoftmaxMinusOneHot8(v, c, lse, target);
}

// Fast path: one block of kThreads per row; thread i holds the vectors
// starting at columns (k * kThreads + i) * 8, so every load is coalesced.
// The row stays in registers as packed bf16 (16 registers a thread), widened
// again in each pass: at 32 registers a thread two 1024-thread blocks share
// an SM, so one row's loads are in flight while another reduces (fp32
// copies took 59 registers and left one block per SM).
template <int kThreads>
__global__ void __launch_bounds__(kThreads, 2048 / kThreads)
    CrossEntropyRowsInRegistersKernel(const __nv_bfloat16* logits, const int32_t* targets, int vocab,
                                      int ignore_index, float* row_losses, __nv_bfloat16* dlogits,
                                      int* error_flag) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const __nv_bfloat16* row = logits + r * vocab;
  __nv_bfloat16* drow = dlogits + r * vocab;
  const int32_t target = targets[r];
  if (SkippedRowVectors(target, vocab, ignore_index, drow, row_losses + r, error_flag)) return;
  const float target_logit = __bfloat162float(row[target]);  // before any dlogits are written
  uint4 held[kVecsPerThread];
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < kVecsPerThread; ++k) {
    const int c = (k * kThreads + threadIdx.x) * kVecWidth;
    if (c < vocab) {
      held[k] = *reinterpret_cast<const uint4*>(row + c);
      m = MaxOf8(held[k], m);
    }
  }
  m = BlockMax(m, scratch);
  float z = 0.f;
#pragma unroll
  for (int k = 0; k < kVecsPerThread; ++k) {
    const int c = (k * kThreads + threadIdx.x) * kVecWidth;
    if (c < vocab) z = AddExpsOf8(held[k], m, z);
  }
  z = BlockSum(z, scratch);
  const float lse = logf(z) + m;
#pragma unroll
  for (int k = 0; k < kVecsPerThread; ++k) {
    const int c = (k * kThreads + threadIdx.x) * kVecWidth;
    if (c < vocab) *reinterpret_cast<uint4*>(drow + c) = DlogitsOf8(held[k], c, lse, target);
  }
  StoreRowLoss(lse, target_logit, row_losses + r);
}

// Rows of kMaxRegisterVocab < V <= kMaxStagedVocab (V a multiple of 8): one
// block of kMaxThreads per row. Columns [0, kMaxRegisterVocab) sit in
// registers as in the kernel above (raw bf16, 16 registers a thread); the
// rest, vector j at column kMaxRegisterVocab + 8 j, is copied asynchronously
// into `staged` (dynamic shared memory) by thread j % kMaxThreads, which is
// also the only thread that reads it back, so no barrier guards the copies.
__global__ void __launch_bounds__(kMaxThreads)
    CrossEntropyRowsStagedKernel(const __nv_bfloat16* logits, const int32_t* targets, int vocab,
                                 int ignore_index, float* row_losses,
                                 __nv_bfloat16* dlogits, int* error_flag) {
  extern __shared__ uint4 staged[];
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const __nv_bfloat16* row = logits + r * vocab;
  __nv_bfloat16* drow = dlogits + r * vocab;
  const int32_t target = targets[r];
  if (SkippedRowVectors(target, vocab, ignore_index, drow, row_losses + r, error_flag)) return;
  const float target_logit = __bfloat162float(row[target]);  // before any dlogits are written
  const int staged_vectors = (vocab - kMaxRegisterVocab) / kVecWidth;
  for (int j = threadIdx.x; j < staged_vectors; j += kMaxThreads) {
    CopyAsync16(SmemAddress(staged + j), row + kMaxRegisterVocab + j * kVecWidth, 16);
  }
  CommitAsyncCopies();
  uint4 held[kVecsPerThread];
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < kVecsPerThread; ++k) {
    held[k] = *reinterpret_cast<const uint4*>(row + (k * kMaxThreads + threadIdx.x) * kVecWidth);
    m = MaxOf8(held[k], m);
  }
  WaitAsyncCopies();
  for (int j = threadIdx.x; j < staged_vectors; j += kMaxThreads) m = MaxOf8(staged[j], m);
  m = BlockMax(m, scratch);
  float z = 0.f;
#pragma unroll
  for (int k = 0; k < kVecsPerThread; ++k) z = AddExpsOf8(held[k], m, z);
  for (int j = threadIdx.x; j < staged_vectors; j += kMaxThreads) z = AddExpsOf8(staged[j], m, z);
  z = BlockSum(z, scratch);
  const float lse = logf(z) + m;
#pragma unroll
  for (int k = 0; k < kVecsPerThread; ++k) {
    const int c = (k * kMaxThreads + threadIdx.x) * kVecWidth;
    *reinterpret_cast<uint4*>(drow + c) = DlogitsOf8(held[k], c, lse, target);
  }
  for (int j = threadIdx.x; j < staged_vectors; j += kMaxThreads) {
    const int c = kMaxRegisterVocab + j * kVecWidth;
    *reinterpret_cast<uint4*>(drow + c) = DlogitsOf8(staged[j], c, lse, target);
  }
  StoreRowLoss(lse, target_logit, row_losses + r);
}

// Merges the softmax sum (om, os) into (m, s), where s = sum of exp(x - m)
// over some logits: the result is over both sets, relative to the larger
// max. Symmetric in its operands, so a butterfly gives every lane the same
// bits.
__device__ __forceinline__ void MergeExpSums(float& m, float& s, float om, float os) {
  const float nm = fmaxf(m, om);
  if (nm == -INFINITY) return;  // both empty
  s = s * expf(m - nm) + os * expf(om - nm);
  m = nm;
}

// Wide rows (V a multiple of 8 above kMaxRegisterVocab): one pass of 16-byte
// loads for the max and sum together (online softmax: the running sum is
// rescaled when the max grows), then a second pass for dlogits.
__global__ void __launch_bounds__(kStreamingThreads)
    CrossEntropyRowsStreamingKernel(const __nv_bfloat16* logits, const int32_t* targets, int vocab,
                                    int ignore_index, float* row_losses,
                                    __nv_bfloat16* dlogits, int* error_flag) {
  __shared__ float warp_m[32], warp_s[32];
  const int64_t r = blockIdx.x;
  const __nv_bfloat16* row = logits + r * vocab;
  __nv_bfloat16* drow = dlogits + r * vocab;
  const int32_t target = targets[r];
  if (SkippedRowVectors(target, vocab, ignore_index, drow, row_losses + r, error_flag)) return;
  const float target_logit = __bfloat162float(row[target]);  // before any dlogits are written
  float m = -INFINITY, s = 0.f;
#pragma unroll 4
  for (int c = threadIdx.x * kVecWidth; c < vocab; c += kStreamingThreads * kVecWidth) {
    float v[kVecWidth];
    LoadBf16x8AsFloats(row + c, v);
    float vm = v[0];
    for (int e = 1; e < kVecWidth; ++e) vm = fmaxf(vm, v[e]);
    if (vm > m) {
      s *= expf(m - vm);
      m = vm;
    }
    for (int e = 0; e < kVecWidth; ++e) s += expf(v[e] - m);
  }
  for (int o = 16; o > 0; o >>= 1) {
    MergeExpSums(m, s, __shfl_xor_sync(0xffffffff, m, o), __shfl_xor_sync(0xffffffff, s, o));
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_m[warp] = m, warp_s[warp] = s;
  __syncthreads();
  m = lane < kStreamingThreads / 32 ? warp_m[lane] : -INFINITY;
  s = lane < kStreamingThreads / 32 ? warp_s[lane] : 0.f;
  for (int o = 16; o > 0; o >>= 1) {
    MergeExpSums(m, s, __shfl_xor_sync(0xffffffff, m, o), __shfl_xor_sync(0xffffffff, s, o));
  }
  const float lse = logf(s) + m;
#pragma unroll 4
  for (int c = threadIdx.x * kVecWidth; c < vocab; c += kStreamingThreads * kVecWidth) {
    float v[kVecWidth];
    LoadBf16x8AsFloats(row + c, v);
    *reinterpret_cast<uint4*>(drow + c) = SoftmaxMinusOneHot8(v, c, lse, target);
  }
  StoreRowLoss(lse, target_logit, row_losses + r);
}

// General path: any V and alignment, scalar loads, three reads of the row.
__global__ void CrossEntropyRowsKernel(const __nv_bfloat16* logits, const int32_t* targets, int vocab,
                                       int ignore_index, float* row_losses,
                                       __nv_bfloat16* dlogits, int* error_flag) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const __nv_bfloat16* row = logits + r * vocab;
  __nv_bfloat16* drow = dlogits + r * vocab;
  const int32_t target = targets[r];
  const bool bad = target != ignore_index && (target < 0 || target >= vocab);
  if (target == ignore_index || bad) {
    if (threadIdx.x == 0) row_losses[r] = 0.f;
    if (bad && threadIdx.x == 0) atomicExch(error_flag, 1);
    for (int v = threadIdx.x; v < vocab; v += blockDim.x) drow[v] = __float2bfloat16_rn(0.f);
    return;
  }
  const float target_logit = __bfloat162float(row[target]);  // before any dlogits are written
  float m = -INFINITY;
  for (int v = threadIdx.x; v < vocab; v += blockDim.x) m = fmaxf(m, __bfloat162float(row[v]));
  m = BlockMax(m, scratch);
  float z = 0.f;
  for (int v = threadIdx.x; v < vocab; v += blockDim.x) z += expf(__bfloat162float(row[v]) - m);
  z = BlockSum(z, scratch);
  const float lse = logf(z) + m;
  for (int v = threadIdx.x; v < vocab; v += blockDim.x) {
    drow[v] = __float2bfloat16_rn(expf(__bfloat162float(row[v]) - lse) - (v == target ? 1.0f : 0.0f));
  }
  StoreRowLoss(lse, target_logit, row_losses + r);
}

bool Is16ByteAligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Whether the staged kernel may use `bytes` of dynamic shared memory: its
// limit is raised to the most it ever takes, once per device. A device
// that refuses (less shared memory per block) gets the streaming kernel.
bool StagedKernelAllowed(int bytes) {
  static std::atomic<uint64_t> allowed{0};
  if (bytes <= 48 * 1024) return true;  // within every device's default limit
  if (AllowDynamicSmem(CrossEntropyRowsStagedKernel, kMaxStagedSmemBytes, allowed) ==
      cudaSuccess) {
    return true;
  }
  (void)cudaGetLastError();  // not sticky: clear it and stream instead
  return false;
}

}  // namespace

// ---- launchers -------------------------------------------------------------

absl::Status LaunchCrossEntropyRows(const void* logits_bf16, const int32_t* targets, int rows,
                                    int vocab, int ignore_index, float* row_losses,
                                    float* loss_sum, float* valid_tokens, void* dlogits_bf16,
                                    int* error_flag, cudaStream_t stream) {
  if (rows == 0) return absl::OkStatus();
  const __nv_bfloat16* logits = static_cast<const __nv_bfloat16*>(logits_bf16);
  __nv_bfloat16* dlogits = static_cast<__nv_bfloat16*>(dlogits_bf16);
  const bool vectors = vocab % kVecWidth == 0 && Is16ByteAligned(logits) &&
                       Is16ByteAligned(dlogits);
  if (vectors && vocab <= kMaxRegisterVocab / 4) {
    CrossEntropyRowsInRegistersKernel<kMaxThreads / 4><<<rows, kMaxThreads / 4, 0, stream>>>(
        logits, targets, vocab, ignore_index, row_losses, dlogits, error_flag);
  } else if (vectors && vocab <= kMaxRegisterVocab) {
    CrossEntropyRowsInRegistersKernel<kMaxThreads><<<rows, kMaxThreads, 0, stream>>>(
        logits, targets, vocab, ignore_index, row_losses, dlogits, error_flag);
  } else if (vectors && vocab <= kMaxStagedVocab &&
             StagedKernelAllowed((vocab - kMaxRegisterVocab) * 2)) {
    const int smem = (vocab - kMaxRegisterVocab) * 2;
    CrossEntropyRowsStagedKernel<<<rows, kMaxThreads, smem, stream>>>(
        logits, targets, vocab, ignore_index, row_losses, dlogits, error_flag);
  } else if (vectors) {
    CrossEntropyRowsStreamingKernel<<<rows, kStreamingThreads, 0, stream>>>(
        logits, targets, vocab, ignore_index, row_losses, dlogits, error_flag);
  } else {
    CrossEntropyRowsKernel<<<rows, 256, 0, stream>>>(logits, targets, vocab, ignore_index,
                                                     row_losses, dlogits, error_flag);
  }
  CUDA_RETURN_IF_LAUNCH_FAILED();
  AddRowLossesKernel<<<1, 1024, 0, stream>>>(row_losses, targets, rows, vocab, ignore_index,
                                             loss_sum, valid_tokens);
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

}  // namespace cuda
}  // namespace tessera
