// Sharded FP8 parameters: allocation and the two FSDP2 collectives (see
// fp8_sharded_param.h).
#include "worker/fsdp/fp8_sharded_param.h"

#include "absl/strings/str_cat.h"

namespace tessera {
namespace {

TensorDesc FirstElements(const TensorDesc& t, int64_t n) {
  TensorDesc v = t;
  v.shape = Shape{n};
  return v;
}

}  // namespace

AdamShard Fp8ShardedParam::AsAdamShard() const {
  const int64_t n = layout.shard_numel();
  AdamShard s;
  s.master = FirstElements(master.desc, n);
  s.grad = FirstElements(grad_shard.desc, n);
  s.exp_avg = FirstElements(exp_avg.desc, n);
  s.exp_avg_sq = FirstElements(exp_avg_sq.desc, n);
  s.fp8 = FirstElements(compute.desc, n);
  s.fp8.scale = scale;
  s.fp8.scale_inv = scale_inv;
  s.fp8.amax = amax;
  s.apply_weight_decay = apply_weight_decay;
  return s;
}

absl::StatusOr<Fp8ShardedParam> CreateShardedParam(Ops& ops, std::string name, int64_t rows,
                                                   int64_t cols, DType compute_dtype,
                                                   bool apply_weight_decay, int rank, int world) {
  Fp8ShardedParam p;
  p.name = std::move(name);
  p.rows = rows;
  p.cols = cols;
  p.layout = ShardLayout{rows, cols, world, rank};
  p.compute_dtype = compute_dtype;
  p.apply_weight_decay = apply_weight_decay;
  const Shape padded{p.layout.padded_numel()};
  for (DeviceTensor* t : {&p.master, &p.exp_avg, &p.exp_avg_sq, &p.grad_shard}) {
    absl::StatusOr<DeviceTensor> a = AllocateTensor(ops, DType::kFloat32, padded);
    if (!a.ok()) return a.status();
    *t = std::move(*a);
  }
  absl::StatusOr<DeviceTensor> c = AllocateTensor(ops, compute_dtype, padded);
  if (!c.ok()) return c.status();
  p.compute = std::move(*c);
  return p;
}

absl::StatusOr<AllGatherPart> GatherPart(const Fp8ShardedParam& param, int world_size,
                                         const TensorDesc& gathered) {
  const size_t chunk_bytes = static_cast<size_t>(param.layout.padded_numel()) *
                             DTypeSize(param.compute_dtype);
  if (gathered.Bytes() < chunk_bytes * world_size) {
    return absl::InternalError(absl::StrCat(param.name, ": gathered buffer too small"));
  }
  return AllGatherPart{param.compute.desc.data, gathered.data, chunk_bytes};
}

ReduceScatterPart ScatterPart(const Fp8ShardedParam& param, const TensorDesc& full_grad) {
  TensorDesc send = full_grad;
  send.shape = Shape{param.layout.gathered_numel()};
  return ReduceScatterPart{send, param.grad_shard.desc};
}

absl::Status AllGatherParam(Communicator& comm, const Fp8ShardedParam& param,
                            const TensorDesc& gathered, Stream* stream) {
  absl::StatusOr<AllGatherPart> part = GatherPart(param, comm.world_size(), gathered);
  if (!part.ok()) return part.status();
  return comm.AllGather(part->send, part->recv, part->bytes_per_rank, stream);
}

absl::Status ReduceScatterGrad(Communicator& comm, const Fp8ShardedParam& param,
                               const TensorDesc& full_grad, Stream* stream) {
  const ReduceScatterPart part = ScatterPart(param, full_grad);
  return comm.ReduceScatter(part.send, part.recv, stream);
}

}  // namespace tessera
