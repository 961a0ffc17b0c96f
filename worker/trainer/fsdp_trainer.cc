// FsdpTrainer setup, collectives bootstrap and abort (see fsdp_trainer.h).
// The step itself is in train_step.cc, checkpoints and restore in
// fsdp_checkpoint.cc.
#include "worker/trainer/fsdp_trainer.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_layout.h"
#include "common/memory_estimate.h"
#include "common/parallelism.h"
#include "common/status_macros.h"
#include "worker/model/param_init.h"

namespace tessera {
namespace {

constexpr float kInitStd = 0.02f;

// The field of a block's parameters (or of a tensor set laid out like them)
// that holds `linear`.
template <typename BlockFields>
auto& LinearField(BlockFields& fields, BlockLinear linear) {
  switch (linear) {
    case BlockLinear::kQkv:
      return fields.qkv;
    case BlockLinear::kOutProj:
      return fields.out_proj;
    case BlockLinear::kGateUp:
      return fields.gate_up;
    case BlockLinear::kDown:
      break;
  }
  return fields.down;
}

}  // namespace

FsdpTrainer::FsdpTrainer(std::unique_ptr<Ops> ops, CommunicatorFactory make_communicator,
                         int buffer_ring_depth)
    : ops_(std::make_unique<CountingOps>(std::move(ops))),
      make_communicator_(std::move(make_communicator)),
      buffer_ring_depth_(buffer_ring_depth) {}

FsdpTrainer::~FsdpTrainer() = default;

void FsdpTrainer::Abort() {
  aborted_ = true;
  writer_.Cancel();
  if (comm_ != nullptr) comm_->Abort();
  if (replica_comm_ != nullptr) replica_comm_->Abort();
}

absl::Status FsdpTrainer::CheckAborted() const {
  if (aborted_) return absl::CancelledError("step aborted");
  return absl::OkStatus();
}

absl::StatusOr<DeviceTensor> FsdpTrainer::Alloc(DType dtype, Shape shape) {
  return AllocateTensor(*ops_, dtype, shape);
}

LinearSpec FsdpTrainer::Spec(int layer, BlockLinear linear, int64_t tokens) const {
  LinearSpec s;
  s.tokens = tokens;
  s.linear = LinearId{layer, linear};
  s.fp8 = fp8_;
  s.in = linear == BlockLinear::kDown ? ffn_ : hidden_;
  switch (linear) {
    case BlockLinear::kQkv:
      s.out = qkv_width_;
      break;
    case BlockLinear::kGateUp:
      s.out = 2 * ffn_;
      break;
    case BlockLinear::kOutProj:
    case BlockLinear::kDown:
      s.out = hidden_;
      break;
  }
  return s;
}

Fp8ShardedParam& FsdpTrainer::Block::linear(BlockLinear l) { return LinearField(*this, l); }

const DeviceTensor& FsdpTrainer::BlockTensors::linear(BlockLinear l) const {
  return LinearField(*this, l);
}

FsdpTrainer::GatheredBlock& FsdpTrainer::GatheredFor(int layer) {
  return gathered_[weight_ring_.SlotOf(layer)];
}

FsdpTrainer::BlockGrads& FsdpTrainer::GradsFor(int layer) {
  return block_grads_[grad_ring_.SlotOf(layer)];
}

std::vector<Fp8ShardedParam*> FsdpTrainer::AllParams() {
  std::vector<Fp8ShardedParam*> all = {&embedding_};
  for (Block& b : blocks_) {
    for (Fp8ShardedParam Block::*member : kBlockParams) all.push_back(&(b.*member));
  }
  all.push_back(&final_norm_);
  all.push_back(&lm_head_);
  return all;
}

absl::StatusOr<SetupReport> FsdpTrainer::Setup(const v1::JobSpec& spec, int rank, int world_size) {
  spec_ = spec;
  // Hybrid sharding: parameters are sharded over a group of shard_group_size
  // consecutive ranks and replicated across the groups. rank_ and world_
  // are the rank's place in its shard group (all of FSDP is written against
  // them); plain FSDP is one group of every rank.
  v1::JobSpec sized = spec;
  sized.set_world_size(world_size);
  const int shard_size = ShardGroupSize(sized);
  if (world_size % shard_size != 0 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parallelism.shard_group_size: ", spec.parallelism().shard_group_size(),
        " does not divide world_size ", world_size, " (validate the spec first)"));
  }
  global_rank_ = rank;
  global_world_ = world_size;
  rank_ = rank % shard_size;
  world_ = shard_size;
  replica_rank_ = rank / shard_size;
  replicas_ = world_size / shard_size;
  const v1::ModelConfig& m = spec.model();
  vocab_ = m.vocab_size();
  hidden_ = m.d_model();
  ffn_ = m.ffn_dim();
  heads_ = m.n_heads();
  head_dim_ = heads_ > 0 ? hidden_ / heads_ : 0;
  kv_heads_ = m.n_kv_heads() == 0 ? m.n_heads() : m.n_kv_heads();
  qkv_width_ = (heads_ + 2 * int64_t{kv_heads_}) * head_dim_;
  layers_ = m.n_layers();
  batch_ = spec.data().micro_batch_size();
  seq_ = m.seq_len();
  tokens_ = batch_ * seq_;
  fp8_ = !spec.fp8().disabled();
  if (hidden_ <= 0 || heads_ <= 0 || hidden_ % heads_ != 0 || head_dim_ % 2 != 0 || layers_ < 1 ||
      kv_heads_ <= 0 || heads_ % kv_heads_ != 0) {
    return absl::InvalidArgumentError("model: shapes are inconsistent (validate the spec first)");
  }
  // The checkpoint directory, parents included, exists before any step: a
  // path that cannot be made fails the job now, not at its first checkpoint
  // after hours of training. Only the ranks that write checkpoints make it
  // (under hybrid sharding, the first shard group).
  if (replica_rank_ == 0 && !spec.checkpoint().dir().empty()) {
    RETURN_IF_ERROR(CreateCheckpointRoot(spec.checkpoint().dir()));
  }
  // Refuse a job this device cannot hold before allocating any of it.
  const RankMemoryEstimate need = EstimateRankMemory(spec, rank_, world_, buffer_ring_depth_);
  ASSIGN_OR_RETURN(const int64_t available, ops_->AvailableMemoryBytes());
  if (need.total() > available) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "rank ", rank, " needs about ", need.ToString(), ", but its device has ",
        FormatBytesAsGiB(available), " free: use more workers (world_size), a smaller micro_batch_size or seq_len, or a "
        "smaller model"));
  }
  // A starting directory is checked against the model before anything is
  // allocated, and closed once the shards are read.
  std::unique_ptr<HfLlamaSource> init_from;
  if (!m.init_from().empty()) {
    ASSIGN_OR_RETURN(init_from, HfLlamaSource::Open(m, m.init_from()));
  }
  ASSIGN_OR_RETURN(data_, OpenBatchSource(spec, global_rank_, global_world_,
                                           data_trace_dir_.empty()
                                               ? std::string()
                                               : absl::StrCat(data_trace_dir_, "/data-trace-rank-",
                                                              global_rank_, ".txt")));
  ASSIGN_OR_RETURN(stream_, ops_->CreateStream());
  RETURN_IF_ERROR(AllocateState());
  RETURN_IF_ERROR(SetupValidation());
  RETURN_IF_ERROR(SetupShadowLoss());
  RETURN_IF_ERROR(InitParams(init_from.get()));
  RETURN_IF_ERROR(SetupCheckpointSnapshot());

  SetupReport report;
  report.warning = checkpoint_warning_;
  for (Fp8ShardedParam* p : AllParams()) {
    report.shard_parameters += p->layout.shard_numel();
    report.total_parameters += p->rows * p->cols;
  }
  return report;
}

absl::Status FsdpTrainer::AllocateState() {
  const DType block_dtype = fp8_ ? DType::kE4M3 : DType::kBFloat16;
  auto param = [&](const std::string& name, int64_t rows, int64_t cols, DType dtype,
                   bool decay) -> absl::StatusOr<Fp8ShardedParam> {
    return CreateShardedParam(*ops_, name, rows, cols, dtype, decay, rank_, world_);
  };
  ASSIGN_OR_RETURN(embedding_, param("embedding", vocab_, hidden_, DType::kBFloat16, true));
  blocks_.resize(layers_);
  for (int l = 0; l < layers_; ++l) {
    Block& b = blocks_[l];
    const std::string p = absl::StrCat("blocks.", l, ".");
    ASSIGN_OR_RETURN(b.attn_norm, param(p + "attn_norm", hidden_, 1, DType::kBFloat16, false));
    ASSIGN_OR_RETURN(b.qkv, param(p + "qkv", qkv_width_, hidden_, block_dtype, true));
    ASSIGN_OR_RETURN(b.out_proj, param(p + "out_proj", hidden_, hidden_, block_dtype, true));
    ASSIGN_OR_RETURN(b.mlp_norm, param(p + "mlp_norm", hidden_, 1, DType::kBFloat16, false));
    ASSIGN_OR_RETURN(b.gate_up, param(p + "gate_up", 2 * ffn_, hidden_, block_dtype, true));
    ASSIGN_OR_RETURN(b.down, param(p + "down", hidden_, ffn_, block_dtype, true));
  }
  ASSIGN_OR_RETURN(final_norm_, param("final_norm", hidden_, 1, DType::kBFloat16, false));
  ASSIGN_OR_RETURN(lm_head_, param("lm_head", vocab_, hidden_, DType::kBFloat16, true));

  // Quantizer state, built once; each FP8 weight points into it.
  ASSIGN_OR_RETURN(Fp8Meta meta, Fp8Meta::Create(*ops_, layers_, spec_.fp8()));
  meta_ = std::make_unique<Fp8Meta>(std::move(meta));
  fuse_fp8_casts_ = fp8_ && !meta_->current_scaling();
  for (int l = 0; l < layers_; ++l) {
    for (const BlockLinear linear : kEveryBlockLinear) {
      Fp8ShardedParam& weight = blocks_[l].linear(linear);
      if (!weight.is_fp8()) continue;
      const LinearId id{l, linear};
      const E4m3Slot slot = meta_->layout().WeightSlot(id);
      weight.scale = meta_->scale(slot);
      weight.scale_inv = meta_->weight_data_scale_inv(id);
      weight.amax = meta_->amax(slot);
    }
  }
  std::vector<AdamShard> shards;
  for (Fp8ShardedParam* p : AllParams()) shards.push_back(p->AsAdamShard());
  ASSIGN_OR_RETURN(adam_, ops_->CreateAdamPlan(shards));

  const bool sharded = world_ > 1;
  weight_ring_ = sharded && spec_.reshard_after_forward()
                     ? BlockBufferRing::Shared(layers_, buffer_ring_depth_)
                     : BlockBufferRing::OnePerBlock(layers_, buffer_ring_depth_);
  grad_ring_ = sharded ? BlockBufferRing::Shared(layers_, buffer_ring_depth_)
                      : BlockBufferRing::OnePerBlock(layers_, buffer_ring_depth_);
  gather_done_.assign(layers_, CollectiveTicket{});
  grads_reduced_.assign(layers_, CollectiveTicket{});
  replicas_reduced_.assign(layers_, CollectiveTicket{});
  if (world_ == 1) {
    // One rank holds every parameter whole: the gathered weights are its
    // compute shards and the full gradients its gradient shards, views with
    // nothing to gather, reduce or copy.
    gathered_.resize(weight_ring_.sets());
    block_grads_.resize(grad_ring_.sets());
    for (int l = 0; l < layers_; ++l) {
      for (int i = 0; i < 6; ++i) {
        const Fp8ShardedParam& p = blocks_[l].*kBlockParams[i];
        (gathered_[l].*kBlockTensors[i]).desc = p.compute.desc;
        (block_grads_[l].*kBlockTensors[i]).desc = p.grad_shard.desc;
      }
    }
    gathered_embedding_.desc = embedding_.compute.desc;
    gathered_final_norm_.desc = final_norm_.compute.desc;
    gathered_lm_head_.desc = lm_head_.compute.desc;
    grad_embedding_.desc = embedding_.grad_shard.desc;
    grad_final_norm_.desc = final_norm_.grad_shard.desc;
    grad_lm_head_.desc = lm_head_.grad_shard.desc;
  } else {
    // Gathered compute weights: when resharding after forward, a ring of
    // sets that consecutive blocks use in turn, so that the next blocks'
    // all-gathers fill sets while block l computes from its own; else one
    // per block.
    auto gathered = [&](const Fp8ShardedParam& p) {
      return Alloc(p.compute_dtype, Shape{p.layout.gathered_numel()});
    };
    gathered_.resize(weight_ring_.sets());
    for (GatheredBlock& g : gathered_) RETURN_IF_ERROR(AllocateBlockTensors(std::nullopt, g));
    ASSIGN_OR_RETURN(gathered_embedding_, gathered(embedding_));
    ASSIGN_OR_RETURN(gathered_final_norm_, gathered(final_norm_));
    ASSIGN_OR_RETURN(gathered_lm_head_, gathered(lm_head_));

    // Full-size fp32 gradients: a ring of sets that consecutive blocks use
    // in turn, so that block l's reduce-scatter reads one while block
    // l - 1's backward writes another.
    auto full_grad = [&](const Fp8ShardedParam& p) {
      return Alloc(DType::kFloat32, Shape{p.layout.gathered_numel()});
    };
    block_grads_.resize(grad_ring_.sets());
    for (BlockGrads& g : block_grads_) RETURN_IF_ERROR(AllocateBlockTensors(DType::kFloat32, g));
    // The embedding's gradient: a full [V, H] reduce-scattered, or, where
    // the ranks' tokens are fewer than its rows, built in the shard from
    // every rank's tokens and residual-gradient rows (train_step.cc).
    embedding_grad_from_rows_ = EmbeddingGradientFromRows(world_, tokens_, vocab_);
    if (embedding_grad_from_rows_) {
      ASSIGN_OR_RETURN(all_inputs_, Alloc(DType::kInt32, Shape{world_ * tokens_}));
      ASSIGN_OR_RETURN(all_embedding_grad_rows_,
                       Alloc(DType::kFloat32, Shape{world_ * tokens_, hidden_}));
    } else {
      ASSIGN_OR_RETURN(grad_embedding_, full_grad(embedding_));
    }
    ASSIGN_OR_RETURN(grad_final_norm_, full_grad(final_norm_));
    ASSIGN_OR_RETURN(grad_lm_head_, full_grad(lm_head_));
    // The fused loss writes the first vocab x hidden elements every step;
    // the padding past them, reduce-scattered with the rest, stays zero.
    RETURN_IF_ERROR(ops_->Memset(grad_lm_head_.desc.data, 0, grad_lm_head_.desc.Bytes(), nullptr));
  }

  // Activations saved for backward.
  const int64_t t = tokens_, h = hidden_, f = ffn_;
  acts_.resize(layers_);
  for (int l = 0; l < layers_; ++l) RETURN_IF_ERROR(AllocateBlockActivations(l));
  // Largest linear input and output widths (the qkv width exceeds H).
  const int64_t max_in = std::max(h, f), max_out = std::max(qkv_width_, 2 * f);
  ASSIGN_OR_RETURN(scratch_.x_fp8, Alloc(DType::kE4M3, Shape{t * max_in}));
  ASSIGN_OR_RETURN(scratch_.dy_fp8, Alloc(DType::kE5M2, Shape{t * max_out}));
  ASSIGN_OR_RETURN(scratch_.dy_fp8_t, Alloc(DType::kE5M2, Shape{t * max_out}));
  ASSIGN_OR_RETURN(scratch_.w_t, Alloc(DType::kE4M3, Shape{max_in * max_out}));
  if (fp8_ && spec_.fp8().stats_interval_steps() > 0) {
    ASSIGN_OR_RETURN(fp8_stats_, Fp8StepStats::Create(*ops_, layers_));
    if (fuse_fp8_casts_) {
      ASSIGN_OR_RETURN(fp8_stats_scratch_, Alloc(DType::kBFloat16, Shape{t * std::max(h, 2 * f)}));
    }
  }

  ASSIGN_OR_RETURN(inputs_, Alloc(DType::kInt32, Shape{t}));
  ASSIGN_OR_RETURN(targets_, Alloc(DType::kInt32, Shape{t}));
  ASSIGN_OR_RETURN(x_final_, Alloc(DType::kFloat32, Shape{t, h}));
  ASSIGN_OR_RETURN(rstd_final_, Alloc(DType::kFloat32, Shape{t}));
  ASSIGN_OR_RETURN(h_final_, Alloc(DType::kBFloat16, Shape{t, h}));
  ASSIGN_OR_RETURN(grad_h_, Alloc(DType::kBFloat16, Shape{t, h}));
  ASSIGN_OR_RETURN(grad_residual_, Alloc(DType::kFloat32, Shape{t, h}));
  ASSIGN_OR_RETURN(grad_bf16_a_, Alloc(DType::kBFloat16, Shape{t * max_out}));
  ASSIGN_OR_RETURN(grad_bf16_b_, Alloc(DType::kBFloat16, Shape{t * max_in}));
  ASSIGN_OR_RETURN(grad_qkv_,
                   Alloc(DType::kBFloat16, Shape{batch_, seq_, heads_ + 2 * kv_heads_, head_dim_}));
  ASSIGN_OR_RETURN(scalars_, Alloc(DType::kFloat32, Shape{8}));
  ASSIGN_OR_RETURN(adam_step_values_, Alloc(DType::kFloat32, Shape{3}));
  host_inputs_.resize(t);
  host_targets_.resize(t);
  if (spec_.data().document_masking()) {
    ASSIGN_OR_RETURN(doc_starts_, Alloc(DType::kInt32, Shape{batch_, seq_}));
    host_doc_starts_.resize(t);
  }
  return absl::OkStatus();
}

bool FsdpTrainer::Recomputes(int layer) const {
  return RecomputesBlock(spec_.memory(), layer);
}

absl::Status FsdpTrainer::AllocateBlockActivations(int l) {
  const int64_t t = tokens_, h = hidden_, f = ffn_;
  BlockActivations& a = acts_[l];
  const bool selective = spec_.memory().recompute() == v1::MemoryConfig::SELECTIVE;
  // `keep`: whether a recomputed block keeps this tensor (its recomputation
  // would need a GEMM or attention); every other block keeps everything.
  auto place = [&](DeviceTensor BlockActivations::*field, DType dtype, Shape shape,
                   bool keep) -> absl::Status {
    if (!Recomputes(l) || keep) {
      ASSIGN_OR_RETURN(a.*field, Alloc(dtype, shape));
      return absl::OkStatus();
    }
    DeviceTensor& shared = recompute_shared_.*field;
    if (shared.buffer == nullptr) {
      ASSIGN_OR_RETURN(shared, Alloc(dtype, shape));
    }
    (a.*field).desc = shared.desc;
    return absl::OkStatus();
  };
  using A = BlockActivations;
  RETURN_IF_ERROR(place(&A::x_in, DType::kFloat32, Shape{t, h}, /*keep=*/true));
  RETURN_IF_ERROR(place(&A::rstd1, DType::kFloat32, Shape{t}, false));
  if (!fuse_fp8_casts_) RETURN_IF_ERROR(place(&A::h1, DType::kBFloat16, Shape{t, h}, false));
  RETURN_IF_ERROR(place(&A::qkv, DType::kBFloat16,
                        Shape{batch_, seq_, heads_ + 2 * kv_heads_, head_dim_}, selective));
  RETURN_IF_ERROR(place(&A::attn, DType::kBFloat16, Shape{t, h}, selective));
  RETURN_IF_ERROR(place(&A::lse, DType::kFloat32, Shape{batch_, heads_, seq_}, selective));
  RETURN_IF_ERROR(place(&A::x_mid, DType::kFloat32, Shape{t, h}, selective));
  RETURN_IF_ERROR(place(&A::rstd2, DType::kFloat32, Shape{t}, false));
  if (!fuse_fp8_casts_) RETURN_IF_ERROR(place(&A::h2, DType::kBFloat16, Shape{t, h}, false));
  RETURN_IF_ERROR(place(&A::gate_up, DType::kBFloat16, Shape{t, 2 * f}, selective));
  if (!fuse_fp8_casts_) RETURN_IF_ERROR(place(&A::swiglu, DType::kBFloat16, Shape{t, f}, false));
  // Each FP8 linear's transposed input: a cast, recomputed by both policies.
  for (const BlockLinear linear : kEveryBlockLinear) {
    if (!Recomputes(l)) {
      RETURN_IF_ERROR(AllocateLinearSaved(*ops_, Spec(l, linear), a.saved[linear]));
      continue;
    }
    LinearSaved& shared = recompute_shared_.saved[linear];
    if (shared.x_t.buffer == nullptr) {
      RETURN_IF_ERROR(AllocateLinearSaved(*ops_, Spec(l, linear), shared));
    }
    a.saved[linear].x_t.desc = shared.x_t.desc;
  }
  return absl::OkStatus();
}

absl::Status FsdpTrainer::InitParams(const HfLlamaSource* source) {
  const float out_std = kInitStd / std::sqrt(2.0f * static_cast<float>(layers_));
  uint64_t index = 0;
  std::vector<float> host;
  for (Fp8ShardedParam* p : AllParams()) {
    const bool norm = p->cols == 1;
    const bool scaled = p->name.find("out_proj") != std::string::npos ||
                        p->name.find(".down") != std::string::npos;
    const float std = norm ? 0.f : scaled ? out_std : kInitStd;
    const int64_t n = p->layout.shard_numel();
    host.assign(n, 0.f);
    if (source != nullptr) {
      RETURN_IF_ERROR(source->Read(p->name, p->layout.first_elem(), n, host.data()));
    } else {
      FillInit(host.data(), n, spec_.seed(), index++, p->layout.first_elem(), std, 1.0f);
    }
    RETURN_IF_ERROR(ops_->CopyToDevice(p->master.desc.data, host.data(), n * sizeof(float), nullptr));
    if (!p->is_fp8() && n > 0) {
      TensorDesc src = Reshaped(p->master.desc, Shape{n});
      TensorDesc dst = Reshaped(p->compute.desc, Shape{n});
      RETURN_IF_ERROR(ops_->Cast(src, dst, nullptr));
    }
    if (p->is_fp8() && n > 0) {
      RETURN_IF_ERROR(ops_->Amax(Reshaped(p->master.desc, Shape{n}), p->amax, nullptr));
    }
  }
  return absl::OkStatus();
}

absl::Status FsdpTrainer::QuantizeWeightsFromMaster(Stream* stream) {
  for (Fp8ShardedParam* p : AllParams()) {
    const int64_t n = p->layout.shard_numel();
    if (!p->is_fp8() || n == 0) continue;
    TensorDesc out = Reshaped(p->compute.desc, Shape{n});
    out.scale = p->scale;
    out.scale_inv = p->scale_inv;
    RETURN_IF_ERROR(ops_->Quantize(Reshaped(p->master.desc, Shape{n}), out, stream));
  }
  // Also on ranks whose shard of some weight is empty (they encoded nothing).
  return meta_->RecordWeightEncodeScales(*ops_, stream);
}

absl::Status FsdpTrainer::InitCollective(RendezvousStore* store, const std::string& host,
                                         absl::Duration timeout) {
  if (data_ == nullptr) return absl::FailedPreconditionError("InitCollective before Setup");
  // A group of one needs no communicator: its collectives are copies on the
  // step's stream. Plain FSDP bootstraps one group through the job's store;
  // hybrid sharding one shard group and one replica group per rank, each
  // under its own prefix of the store.
  if (world_ == 1) {
    comm_ = std::make_unique<SingleRankCommunicator>(*ops_);
  } else if (replicas_ == 1) {
    ASSIGN_OR_RETURN(comm_, make_communicator_(store, rank_, world_, host, timeout));
  } else {
    PrefixedRendezvousStore shard_store(store, absl::StrCat("shard/", replica_rank_, "/"));
    ASSIGN_OR_RETURN(comm_, make_communicator_(&shard_store, rank_, world_, host, timeout));
  }
  if (replicas_ > 1) {
    PrefixedRendezvousStore replica_store(store, absl::StrCat("replica/", rank_, "/"));
    ASSIGN_OR_RETURN(replica_comm_, make_communicator_(&replica_store, replica_rank_, replicas_,
                                                      host, timeout));
  }
  if (aborted_) Abort();
  // Agree on every FP8 weight's scale from the global amax of its master,
  // then encode the compute shards with it. A restored job already holds the
  // scales and the encoded shards of the step it resumes, unless it changed
  // the FP8 recipe: then its quantizer state is a fresh job's and its
  // masters' amaxes are recorded (Restore), and it does what a fresh job does.
  if (!restored_ || quantize_restored_masters_) {
    RETURN_IF_ERROR(comm_->AllReduce(meta_->amaxes(), ReduceOp::kMax, nullptr));
    if (replica_comm_ != nullptr) {
      RETURN_IF_ERROR(replica_comm_->AllReduce(meta_->amaxes(), ReduceOp::kMax, nullptr));
    }
    RETURN_IF_ERROR(meta_->UpdateScales(*ops_, nullptr));
    RETURN_IF_ERROR(QuantizeWeightsFromMaster(nullptr));
  }
  RETURN_IF_ERROR(ops_->Synchronize(nullptr));
  RETURN_IF_ERROR(comm_->FirstFailure());
  if (replica_comm_ != nullptr) RETURN_IF_ERROR(replica_comm_->FirstFailure());
  collective_ready_ = true;
  return absl::OkStatus();
}

absl::Status FsdpTrainer::AllocateBlockTensors(std::optional<DType> dtype, BlockTensors& out) {
  const Block& b = blocks_[0];  // every block has the same shapes
  for (int i = 0; i < 6; ++i) {
    const Fp8ShardedParam& p = b.*kBlockParams[i];
    ASSIGN_OR_RETURN(out.*kBlockTensors[i],
                     Alloc(dtype.value_or(p.compute_dtype), Shape{p.layout.gathered_numel()}));
  }
  return absl::OkStatus();
}

}  // namespace tessera
