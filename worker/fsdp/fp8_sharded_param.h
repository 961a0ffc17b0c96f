// One parameter of the model as FSDP2 holds it on one rank: a *sharded FP8
// tensor*. The rank owns a dim-0 shard (ShardLayout) and keeps for it:
//   master      [padded] fp32   the optimizer's weights
//   exp_avg     [padded] fp32   Adam m
//   exp_avg_sq  [padded] fp32   Adam v
//   grad_shard  [padded] fp32   reduce-scattered gradient
//   compute     [padded] e4m3 (block linears) or bf16 (the rest): what is
//                               all-gathered, 1 byte per element for FP8
// The FP8 quantizer state (scale, scale_inv, amax) lives in the trainer's
// packed metadata block and is referenced here by pointer: it is built once
// at setup and never copied per step. Every rank quantizes with the same
// (all-reduced) scale, so the gathered bytes need no per-shard metadata:
// each rank already holds the scale_inv to decode them with, recorded by
// Fp8Meta::RecordWeightEncodeScales on every rank, including ranks whose
// shard is empty and which encoded nothing.
#ifndef TESSERA_WORKER_FSDP_FP8_SHARDED_PARAM_H_
#define TESSERA_WORKER_FSDP_FP8_SHARDED_PARAM_H_

#include <string>

#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"
#include "worker/fsdp/shard_layout.h"
#include "worker/ops/device_tensor.h"

namespace tessera {

struct Fp8ShardedParam {
  std::string name;
  int64_t rows = 0, cols = 1;  // full logical shape [rows, cols] ([rows] if cols == 1)
  ShardLayout layout;
  DType compute_dtype = DType::kBFloat16;
  bool apply_weight_decay = true;

  DeviceTensor master, exp_avg, exp_avg_sq, grad_shard, compute;
  // Quantizer state in the packed metadata block (null for bf16 params).
  float* scale = nullptr;      // recipe scale used to encode this weight
  float* scale_inv = nullptr;  // 1/scale the current compute bytes were encoded with
  float* amax = nullptr;       // max |master| written by FusedAdam

  bool is_fp8() const { return compute_dtype == DType::kE4M3; }
  // The shard as FusedAdam sees it (views over the real, unpadded elements).
  AdamShard AsAdamShard() const;
};

// Allocates the shard buffers of a [rows, cols] parameter for rank/world.
absl::StatusOr<Fp8ShardedParam> CreateShardedParam(Ops& ops, std::string name, int64_t rows,
                                                   int64_t cols, DType compute_dtype,
                                                   bool apply_weight_decay, int rank, int world);

// All-gathers the compute shards into `gathered` ([gathered_numel] of the
// compute dtype, allocated once by the caller and reused every step). The
// result's first rows*cols elements are the full parameter.
absl::Status AllGatherParam(Communicator& comm, const Fp8ShardedParam& param,
                            const TensorDesc& gathered, Stream* stream);

// Reduce-scatters a full fp32 gradient ([gathered_numel]) into grad_shard.
absl::Status ReduceScatterGrad(Communicator& comm, const Fp8ShardedParam& param,
                               const TensorDesc& full_grad, Stream* stream);

// The same two collectives as parts of a grouped collective
// (Communicator::StartAllGather / StartReduceScatter), for a caller that
// moves several parameters at once and overlaps them with compute.
absl::StatusOr<AllGatherPart> GatherPart(const Fp8ShardedParam& param, int world_size,
                                         const TensorDesc& gathered);
ReduceScatterPart ScatterPart(const Fp8ShardedParam& param, const TensorDesc& full_grad);

}  // namespace tessera

#endif  // TESSERA_WORKER_FSDP_FP8_SHARDED_PARAM_H_
