// FsdpTrainer: the FSDP2 + FP8 trainer for the Llama-style decoder, written
// once against the ops API (worker/ops/ops.h) and the Communicator, so the
// same code runs on the CPU reference engine with Gloo and on the CUDA
// engine with NCCL.
//
// Model: token embedding [V, H]; per block attn_norm [H], qkv
// [(nh + 2*nkv) * hd, H], out_proj [H, H], mlp_norm [H], gate_up [2F, H],
// down [H, F]; final_norm [H]; lm_head [V, H] (untied). Attention is
// grouped-query: nh = n_heads query heads of hd = H / nh share nkv =
// n_kv_heads key/value heads (nkv == nh is multi-head attention), so the
// qkv rows are the nh query heads, then the nkv key heads, then the nkv
// value heads, and its output per token is the [nh + 2*nkv, hd] layout the
// ops API's RoPE and attention take. The four block linears hold FP8 (e4m3)
// compute weights and run FP8 GEMMs (e4m3 activations forward, e5m2
// gradients backward); the embedding, norms and the LM head keep bf16
// compute copies: they are a small share of the FLOPs and the most
// precision-sensitive places. With fp8.disabled the block linears run in
// bf16 too. Every parameter is sharded on dim 0 (fp8_sharded_param.h).
//
// Setup (fsdp_trainer.cc) allocates everything and initialises the weights,
// randomly or from a Hugging Face directory (model.init_from, hf_import.h);
// RunStep (train_step.cc, one file that reads top to bottom) allocates
// nothing; checkpoints (a snapshot to host memory, written in the
// background) and Restore are in fsdp_checkpoint.cc; the forward passes
// outside the step in evaluate.cc, and the bf16 shadow loss
// (fp8.shadow_interval_steps) in shadow_loss.cc.
#ifndef TESSERA_WORKER_TRAINER_FSDP_TRAINER_H_
#define TESSERA_WORKER_TRAINER_FSDP_TRAINER_H_

#include <atomic>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/block_buffer_ring.h"
#include "absl/synchronization/mutex.h"
#include "common/durable_file.h"
#include "worker/comm/communicator.h"
#include "worker/comm/communicator_factory.h"
#include "worker/comm/prefixed_rendezvous_store.h"
#include "worker/comm/single_rank_communicator.h"
#include "worker/data/batch_source.h"
#include "worker/data/validation_batch_source.h"
#include "worker/fsdp/fp8_sharded_param.h"
#include "worker/model/fp8_linear.h"
#include "worker/model/fp8_meta.h"
#include "worker/trainer/counting_ops.h"
#include "worker/trainer/fp8_step_stats.h"
#include "formats/hf_import.h"
#include "worker/trainer/background_checkpoint_writer.h"
#include "worker/trainer/step_clock.h"
#include "worker/trainer/trainer.h"

namespace tessera {

class StateSink;  // where a rank's state file goes (fsdp_checkpoint.cc)

class FsdpTrainer : public Trainer {
 public:
  // `buffer_ring_depth`: how many blocks' gathered weights and full
  // gradients are in use at once (common/block_buffer_ring.h); tests vary it.
  FsdpTrainer(std::unique_ptr<Ops> ops, CommunicatorFactory make_communicator,
              int buffer_ring_depth = BlockBufferRing::kDefaultDepth);
  // A directory where each rank appends the training sequences it reads to
  // data-trace-rank-R.txt (mixtures only; worker/data/mixture_batch_source.h).
  // Empty (the default): no trace. Set before Setup.
  void set_data_trace_dir(const std::string& dir) { data_trace_dir_ = dir; }
  ~FsdpTrainer() override;

  absl::StatusOr<SetupReport> Setup(const v1::JobSpec& spec, int rank, int world_size) override;
  // A one-rank job gets a SingleRankCommunicator (no group, no rendezvous);
  // larger jobs the communicator `make_communicator` builds.
  absl::Status InitCollective(RendezvousStore* store, const std::string& host,
                              absl::Duration timeout) override;
  absl::StatusOr<StepReport> RunStep(int step) override;
  // The snapshot goes to page-locked host memory allocated at Setup, and a
  // background thread writes it (fsdp_checkpoint.cc). Where the host cannot
  // hold a snapshot, StartCheckpoint writes the file itself, and Setup's
  // report warns that checkpoints will stop training for the write.
  absl::StatusOr<CheckpointStarted> StartCheckpoint(int step, const std::string& dir) override;
  absl::StatusOr<CheckpointWritten> AwaitCheckpoint(int step) override;
  // Loads master, Adam m and v, the compute shards (FP8 codes or bf16), the
  // packed quantizer block, the data position and the step counter
  // (fsdp_checkpoint.cc); InitCollective then keeps them as they are. When
  // the job's FP8 recipe is not the checkpoint's, the masters, moments, step
  // and data position load as saved, the quantizer state starts as a fresh
  // job's, and the block linears' compute shards are re-derived from the
  // masters: cast to bf16 here, or quantized by InitCollective with scales
  // agreed from the masters' global amax, as a fresh job's are.
  absl::Status Restore(const std::string& dir, int step) override;
  std::string restore_note() const override { return restore_note_; }
  std::string restore_warning() const override { return restore_warning_; }
  void Abort() override;

  // For tests: engine allocations and host reads so far, counted at the ops
  // boundary (a step allocates nothing and reads back one block of scalars),
  // and the gathered (full) compute bytes of a block linear weight.
  int64_t allocation_count() const { return ops_->allocations(); }
  int64_t allocated_bytes() const { return ops_->allocated_bytes(); }
  int64_t host_read_count() const { return ops_->host_reads(); }
  int64_t fp8_stats_call_count() const { return ops_->fp8_stats_calls(); }
  absl::StatusOr<std::vector<uint8_t>> GatheredWeightBytes(int layer, BlockLinear linear);
  // Every gradient buffer's bytes, concatenated: each parameter's gradient
  // shard, then the full-size gradients the step reduce-scatters from
  // (views of the shards at world size 1).
  absl::StatusOr<std::vector<uint8_t>> GradientBytes();
  // Whether steps now replay a captured CUDA graph (train_step.cc), and why
  // not when a capture was tried and failed (the steps then run eagerly).
  // Runs on the checkpoint writer's thread before each background write
  // (background_checkpoint_writer.h), so a test can hold a write open.
  void set_checkpoint_write_hook_for_test(std::function<void()> hook) {
    writer_.set_before_write_for_test(std::move(hook));
  }
  bool replays_step_graph() const { return step_graph_ != nullptr; }
  const absl::Status& step_graph_status() const { return step_graph_status_; }

 private:
  // Parameters of one block, in the order of the block's linears.
  struct Block {
    Fp8ShardedParam attn_norm, qkv, out_proj, mlp_norm, gate_up, down;
    Fp8ShardedParam& linear(BlockLinear l);
  };
  // One full-size tensor per parameter of a block, field for field with
  // Block. Used for the gathered compute weights (shared by all blocks when
  // reshard_after_forward, else one set per block) and for the fp32
  // gradients (one shared set: each block's are reduce-scattered right after
  // its backward).
  struct BlockTensors {
    DeviceTensor attn_norm, qkv, out_proj, mlp_norm, gate_up, down;
    const DeviceTensor& linear(BlockLinear l) const;
  };
  using GatheredBlock = BlockTensors;
  using BlockGrads = BlockTensors;
  // The pairing of the two, for code that treats every block parameter alike.
  static constexpr Fp8ShardedParam Block::*kBlockParams[6] = {
      &Block::attn_norm, &Block::qkv, &Block::out_proj,
      &Block::mlp_norm,  &Block::gate_up, &Block::down};
  static constexpr DeviceTensor BlockTensors::*kBlockTensors[6] = {
      &BlockTensors::attn_norm, &BlockTensors::qkv, &BlockTensors::out_proj,
      &BlockTensors::mlp_norm,  &BlockTensors::gate_up, &BlockTensors::down};
  // Activations one block saves for backward.
  struct BlockActivations {
    DeviceTensor x_in;      // [T, H] fp32 residual entering the block
    DeviceTensor rstd1;     // [T] fp32
    DeviceTensor h1;        // [T, H] bf16 attn_norm output (not kept with fused FP8 casts)
    DeviceTensor qkv;       // [B, S, nh + 2*nkv, hd] bf16 after RoPE
    DeviceTensor attn;      // [T, H] bf16 attention output
    DeviceTensor lse;       // [B, nh, S] fp32
    DeviceTensor x_mid;     // [T, H] fp32 residual after attention
    DeviceTensor rstd2;     // [T] fp32
    DeviceTensor h2;        // [T, H] bf16 mlp_norm output (likewise)
    DeviceTensor gate_up;   // [T, 2F] bf16
    DeviceTensor swiglu;    // [T, F] bf16 (likewise)
    PerBlockLinear<LinearSaved> saved;  // each FP8 linear's transposed input
  };
  // Allocates one full-size (gathered_numel) tensor of `dtype` per block
  // parameter, or of each parameter's compute dtype when dtype is unset.
  absl::Status AllocateBlockTensors(std::optional<DType> dtype, BlockTensors& out);

  absl::StatusOr<StepReport> Step(int step);  // RunStep without the abort mapping
  // Queues the step's work from the first all-gather to the FP8 scale update
  // on stream_ (train_step.cc). Everything it queues reads the batch, the
  // per-step Adam values and the FP8 scales from engine memory, so it can be
  // captured once and replayed.
  absl::Status QueueStep();
  // Runs QueueStep captured into step_graph_; on failure the steps stay eager.
  absl::Status CaptureStep();
  // Whether this job's steps are captured once warm: the engine can capture,
  // there are no collectives (one rank), the job did not ask for eager
  // steps, and its batches do not bring documents (whose attention each
  // step plans anew).
  bool CapturesSteps() const;
  absl::Status AllocateState();
  // The initial master weights of this rank's shards: from `source` (the
  // job's model.init_from) or, when it is null, the seeded random init.
  absl::Status InitParams(const HfLlamaSource* source);
  absl::Status QuantizeWeightsFromMaster(Stream* stream);
  // ---- Checkpoints (fsdp_checkpoint.cc) ------------------------------------
  // The size of this rank's state file, counted by writing it nowhere (one
  // small read of the FP8 quantizer block); the snapshot is allocated to it.
  absl::StatusOr<int64_t> StateFileBytes();
  // Called by Setup: allocates the snapshot when this rank writes
  // checkpoints and the host can hold it, else notes the warning.
  absl::Status SetupCheckpointSnapshot();
  // Puts this rank's state file into `out` (StateSink: the snapshot, or a
  // file through a staging buffer).
  absl::Status WriteState(int step, StateSink& out);
  // What this rank's checkpoint manifests record of the job and engine,
  // and of the engine alone (its numerics stack as a manifest keeps it).
  ManifestSpec ManifestSpecForSave() const;
  std::string RecordedNumericsStack() const;
  // The synchronous write, when there is no snapshot.
  absl::StatusOr<CheckpointWritten> WriteCheckpointNow(int step, const std::string& dir);
  absl::StatusOr<DeviceTensor> Alloc(DType dtype, Shape shape);
  // Collectives (fsdp_collectives.cc). The Start* forms queue one grouped
  // collective after the compute stream's work so far and return its ticket;
  // the step waits for it with comm_->WaitFor where it needs the result.
  // GatherBlock gathers block `layer` into `out` and makes the compute
  // stream wait for it.
  absl::StatusOr<CollectiveTicket> StartGather(
      std::initializer_list<std::pair<const Fp8ShardedParam*, const DeviceTensor*>> params);
  absl::StatusOr<CollectiveTicket> StartGatherBlock(int layer, GatheredBlock& out);
  absl::Status GatherBlock(int layer, GatheredBlock& out);
  absl::StatusOr<CollectiveTicket> StartReduceScatterBlock(int layer);
  // Full fp32 gradients of the embedding, final norm or LM head.
  absl::StatusOr<CollectiveTicket> StartReduceScatter(
      std::initializer_list<std::pair<const Fp8ShardedParam*, const DeviceTensor*>> grads);
  // Hybrid sharding: once `reduced` (the reduce-scatter that produced them)
  // has finished, all-reduces the gradient shards of block `layer` (or, for
  // layer -1, of the embedding, final norm and LM head, whose reduce-scatters
  // the caller has already waited for but the last) across the replicas. The compute
  // stream waits for `reduced`; nothing waits for the all-reduce until
  // WaitForReplicas. No-ops under plain FSDP.
  absl::Status ReduceAcrossReplicas(int layer, const CollectiveTicket& reduced);
  absl::Status WaitForReplicas();
  // Which run of a block's forward: the step's, or its recomputation in
  // the backward under memory.recompute BLOCKS, which quantizes with the
  // scales the step's set (InputScaling::kReuse) and stops before the down
  // projection's GEMM (the backward does not read the block's output).
  enum class ForwardPass { kStep, kRecompute };
  // Runs on the sequences x_in holds ([t, H], t a multiple of S and at
  // most the micro-batch's tokens), using the prefix of each activation.
  absl::Status BlockForward(int layer, const GatheredBlock& w, BlockActivations& a,
                            const TensorDesc& x_in, const TensorDesc& x_out,
                            ForwardPass pass = ForwardPass::kStep);
  absl::Status NormThenLinear(int layer, BlockLinear linear, const TensorDesc& x,
                              const TensorDesc& norm_weight, const TensorDesc& rstd,
                              const TensorDesc& normed, const TensorDesc& weight,
                              const TensorDesc& y, LinearSaved& saved, InputScaling scaling);
  // Activation recomputation (job.proto's MemoryConfig). Recomputes(l):
  // whether block l keeps only part of its activations. RecomputeForward
  // writes the rest again, the same bits the step's forward wrote, into
  // the shared set acts_[l] views, right before block l's backward.
  bool Recomputes(int layer) const;
  absl::Status RecomputeForward(int layer, const GatheredBlock& w, BlockActivations& a);
  absl::Status RecomputeSwiGlu(int layer, BlockActivations& a);
  // Allocates block l's activations: what a recomputed block does not keep
  // is a view of recompute_shared_, allocated with the first such block.
  absl::Status AllocateBlockActivations(int layer);
  absl::Status BlockBackward(int layer, const GatheredBlock& w, BlockActivations& a,
                             const TensorDesc& grad_residual);
  // FP8 statistics (fp8_step_stats.h), on a statistics step only
  // (measuring_fp8_); elsewhere they queue nothing. MeasureFp8 measures block
  // l's `linear`'s input (e4m3, only in the step's own forward pass) or
  // output gradient (e5m2) with the scale its cast used; call it after the
  // linear, whose current-scaling cast sets that scale. MeasureFp8Weights
  // measures every block linear's fp32 master shard with the scale its FP8
  // bytes were just encoded with. StatsScratch: a bf16 `shape` view of
  // fp8_stats_scratch_, for the tensors a fused FP8 cast never stores.
  absl::Status MeasureFp8(int layer, BlockLinear linear, Fp8TensorReport::Role role,
                          const TensorDesc& in, InputScaling scaling = InputScaling::kMeasure);
  absl::Status MeasureFp8Weights();
  TensorDesc StatsScratch(Shape shape) const;
  // What attention keeps to, forward, recomputed and backward, for the
  // first `batch` sequences: that prefix of doc_starts_ under
  // data.document_masking, with the host's count of its documents where
  // that prefix is what was last copied (device_documents_), else whole
  // sequences.
  AttentionDocuments BatchDocuments(int64_t batch) const;
  // Copies host_doc_starts_ into doc_starts_ (no-op without masking).
  absl::Status CopyDocStartsToDevice();
  // Copies the first `rows` sequences' starts into doc_starts_ and counts
  // their documents into device_documents_.
  absl::Status CopyDocStartsToDevice(absl::Span<const int32_t> starts);
  absl::Status CheckAborted() const;
  std::vector<Fp8ShardedParam*> AllParams();
  // A block linear over `tokens` rows: the micro-batch's (the first form),
  // or the fewer of the shadow loss's first sequences.
  LinearSpec Spec(int layer, BlockLinear linear) const { return Spec(layer, linear, tokens_); }
  LinearSpec Spec(int layer, BlockLinear linear, int64_t tokens) const;
  GatheredBlock& GatheredFor(int layer);
  BlockGrads& GradsFor(int layer);

  std::unique_ptr<CountingOps> ops_;  // the engine, behind the counting decorator
  StepClock clock_{*ops_};            // the step's phase timing, on ops_
  // The stream every step's work is queued on (engine-owned; nullptr, the
  // default stream, on the CPU engine), and once a step has run eagerly,
  // the captured step replayed on it.
  Stream* stream_ = nullptr;
  std::unique_ptr<Ops::CapturedWork> step_graph_;
  absl::Status step_graph_status_;
  int eager_steps_ = 0;  // steps this trainer ran without the graph
  int64_t peak_memory_bytes_ = 0;  // the most Ops::MemoryInUseBytes read after a step
  CommunicatorFactory make_communicator_;
  std::unique_ptr<Communicator> comm_;  // the shard group (every rank under plain FSDP)
  // Hybrid sharding only: the ranks holding the same shard in the other
  // groups, across which gradients are all-reduced after the reduce-scatter.
  std::unique_ptr<Communicator> replica_comm_;
  std::unique_ptr<BatchSource> data_;
  std::atomic<bool> aborted_{false};
  bool collective_ready_ = false;
  bool restored_ = false;  // Restore loaded a checkpoint: InitCollective keeps its state
  // ...except the FP8 compute shards when the checkpoint's recipe was not FP8
  // with this job's scaling: InitCollective quantizes them from the masters.
  bool quantize_restored_masters_ = false;
  std::string restore_note_;     // see Trainer::restore_note
  std::string restore_warning_;  // see Trainer::restore_warning
  int next_step_ = 0;

  v1::JobSpec spec_;
  int rank_ = 0, world_ = 1;                // within the shard group: what FSDP shards over
  int global_rank_ = 0, global_world_ = 1;  // within the job: what the data is split over
  int replica_rank_ = 0, replicas_ = 1;     // which shard group, and how many
  int64_t vocab_ = 0, hidden_ = 0, ffn_ = 0, heads_ = 0, head_dim_ = 0;
  int kv_heads_ = 0;        // n_kv_heads (n_heads when the spec leaves it 0)
  int64_t qkv_width_ = 0;   // (nh + 2*nkv) * hd: output features of the qkv linear
  int64_t batch_ = 0, seq_ = 0, tokens_ = 0;
  int layers_ = 0;
  bool fp8_ = true;
  // FP8 with delayed scaling (every scale is known before the step): the
  // two RMSNorms write the qkv and gate/up projections' FP8 inputs, the
  // SwiGLU the down projection's, and the SwiGLU backward the gate/up
  // projection's FP8 gradient, directly; no bf16 copy of those is stored.
  bool fuse_fp8_casts_ = false;

  Fp8ShardedParam embedding_, final_norm_, lm_head_;
  std::vector<Block> blocks_;
  std::unique_ptr<Fp8Meta> meta_;
  std::unique_ptr<AdamPlan> adam_;

  // Which set of gathered weights and of full gradients each block uses,
  // and which collective frees a set for the next block (set up in
  // AllocateState). The weights' ring shares its sets only when resharding
  // after forward; the gradients' whenever there is more than one rank. At
  // world size 1 both are one set per block, views over the shards.
  const int buffer_ring_depth_;
  BlockBufferRing weight_ring_ = BlockBufferRing::OnePerBlock(1);
  BlockBufferRing grad_ring_ = BlockBufferRing::OnePerBlock(1);
  // weight_ring_.sets() gathered weight sets.
  std::vector<GatheredBlock> gathered_;
  DeviceTensor gathered_embedding_, gathered_final_norm_, gathered_lm_head_;
  std::vector<BlockActivations> acts_;
  // The one set of activations the recomputed blocks share (Recomputes).
  BlockActivations recompute_shared_;
  // grad_ring_.sets() full gradient sets (each block's are reduce-scattered
  // while the next blocks' backward runs).
  std::vector<BlockGrads> block_grads_;
  // The step's collectives in flight, per block: its weights' all-gather
  // and its gradients' reduce-scatter.
  std::vector<CollectiveTicket> gather_done_, grads_reduced_;
  // Checkpoints. The snapshot: the rank's state file, byte for byte, in
  // host memory the engine copies into at full speed (null when this rank
  // writes no checkpoints or the host cannot hold it). Declared before the
  // writer, which reads it until destroyed.
  std::unique_ptr<Buffer> snapshot_;
  BackgroundCheckpointWriter writer_;
  std::string checkpoint_warning_;  // reported by Setup
  absl::Mutex checkpoint_mu_;
  // The last checkpoint written without the background writer (no snapshot,
  // or an HSDP replica that writes nothing): its step and result.
  std::optional<std::pair<int, absl::StatusOr<CheckpointWritten>>> sync_checkpoint_
      ABSL_GUARDED_BY(checkpoint_mu_);
  // Hybrid sharding: each block's gradient shards all-reduced across replicas.
  std::vector<CollectiveTicket> replicas_reduced_;
  CollectiveTicket outer_replicas_reduced_;
  // The full gradients of the outer parameters (views of the shards' at
  // world size 1). With embedding_grad_from_rows_ (common/memory_estimate.h)
  // there is no grad_embedding_: the embedding's gradient is built in its
  // shard from every rank's token ids and residual-gradient rows, [world *
  // T] int32 and [world * T, H] fp32.
  DeviceTensor grad_embedding_, grad_final_norm_, grad_lm_head_;
  bool embedding_grad_from_rows_ = false;
  DeviceTensor all_inputs_, all_embedding_grad_rows_;
  LinearScratch scratch_;
  // fp8.stats_interval_steps > 0 with FP8 on: the statistics' buffers, and
  // with fused FP8 casts a bf16 [T * max(H, 2F)] that a statistics step
  // writes the normalised, SwiGLU and SwiGLU-gradient tensors into, which
  // the fused casts never store. Null and empty otherwise.
  std::unique_ptr<Fp8StepStats> fp8_stats_;
  DeviceTensor fp8_stats_scratch_;
  bool measuring_fp8_ = false;  // set by Step() around a statistics step's QueueStep

  DeviceTensor inputs_, targets_;        // [T] int32
  // [B, S] int32: attention's document starts of the micro-batch, with
  // data.document_masking only (worker/data/document_window.h).
  DeviceTensor doc_starts_;
  DeviceTensor x_final_, rstd_final_;    // [T, H] fp32, [T]
  DeviceTensor h_final_;                 // [T, H] bf16
  DeviceTensor grad_h_;                  // [T, H] bf16 gradient of a norm output
  DeviceTensor grad_residual_;           // [T, H] fp32 residual-stream gradient, updated in place
  DeviceTensor grad_bf16_a_;             // [T, max(qkv width, 2F)] bf16 scratch
  DeviceTensor grad_bf16_b_;             // [T, max(H, F)] bf16 scratch
  DeviceTensor grad_qkv_;                // [B, S, nh + 2*nkv, hd] bf16
  DeviceTensor scalars_;  // [loss_sum, valid_tokens, grad_sum_sq, grad_norm, grad_scale]
  DeviceTensor adam_step_values_;  // [3] fp32: AdamStepValues of the step being run
  std::vector<int32_t> host_inputs_, host_targets_;
  std::vector<int32_t> host_doc_starts_;  // [B * S] with data.document_masking, else empty
  // What doc_starts_ holds now: the documents of its first `rows` sequences.
  struct DeviceDocuments {
    int64_t rows = 0;
    DocumentCounts counts;
  } device_documents_;

  // ---- Validation (evaluate.cc) -------------------------------------------
  // Forward passes over data.validation with the training step's weights
  // and activation buffers; the fused loss runs loss only, so no gradient
  // buffer is passed anywhere.
 public:
  absl::StatusOr<ValidationReport> Evaluate() override;

  // The model's next-token logits at every position of one sequence of
  // `tokens` (1 to seq_len ids in [0, vocab)): [tokens.size(), vocab] fp32,
  // row-major, the LM head's GEMM output. The forward pass Evaluate runs,
  // leaving weights, optimizer and FP8 state as they were. Collective like
  // a step (it gathers the weights): every rank calls it with the same
  // tokens, after InitCollective. It allocates its output on each call; it
  // is for tools and tests (checking an export against another
  // implementation), not for the training loop.
  absl::StatusOr<std::vector<float>> ForwardLogits(const std::vector<int32_t>& tokens);

 private:
  // Called by Setup: allocates the copy of the FP8 state forward passes
  // restore, and with data.validation opens its reader (sharded over the
  // job's ranks like training) and the evaluation's sums.
  absl::Status SetupValidation();
  absl::StatusOr<ValidationReport> Score();  // Evaluate without the abort mapping
  // Around a forward pass outside the step: Begin copies the packed FP8
  // state aside (quantizing records amaxes or resets scales) and gathers
  // the embedding, final norm and LM head; End puts the FP8 state back.
  absl::Status BeginForwardPass();
  absl::Status EndForwardPass();
  // inputs_ -> embedding -> every block (gathering each) -> final RMSNorm
  // into h_final_, for the gathered outer weights, over the first `batch`
  // sequences of the micro-batch's buffers (batch_ for all of them): every
  // op reads and writes only the leading batch * S tokens.
  absl::Status ForwardToFinalNorm(int64_t batch);
  std::vector<ValidationSet> validation_sets_;
  DeviceTensor eval_scalars_;    // [sets, 2] fp32: loss_sum, valid_tokens per validation set
  std::string data_trace_dir_;
  DeviceTensor saved_fp8_meta_;  // the packed FP8 state as it was before an evaluation

  // ---- The bf16 shadow loss (shadow_loss.cc) -------------------------------
  // After every fp8.shadow_interval_steps-th step, the FP8 and the bf16
  // forward of the step's weights on a fixed held-out batch. Nothing here
  // is allocated unless the job asks for it.
  bool ShadowLossAfterStep(int step) const;
  // Called by Setup (after SetupValidation): allocates the bf16 block
  // weights and sums, and reads the held-out batch onto the host.
  absl::Status SetupShadowLoss();
  absl::StatusOr<ShadowReport> RunShadowLoss();
  // Casts block `layer`'s linear masters to bf16 into shadow_weights_
  // (gathered across the shard group with the block's norms).
  absl::Status GatherShadowBlock(int layer);
  absl::Status ShadowBlockForward(int layer, BlockActivations& a, const TensorDesc& x_in,
                                  const TensorDesc& x_out);
  // The four block linears of one block in bf16: [gathered_numel] each,
  // shared by every block; at world size > 1 also this rank's bf16 shard of
  // each ([padded_numel]), the all-gather's source.
  PerBlockLinear<DeviceTensor> shadow_weights_, shadow_shards_;
  DeviceTensor shadow_scalars_;  // [4] fp32: FP8 loss sum, tokens; bf16 loss sum, tokens
  // How many of the held-out batch's sequences both forwards run, from the
  // first (fp8.shadow_batch_sequences, or its default).
  int64_t shadow_sequences_ = 0;
  // [B * S] int32: the held-out batch (doc starts only with document masking).
  std::vector<int32_t> host_shadow_inputs_, host_shadow_targets_, host_shadow_doc_starts_;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_TRAINER_FSDP_TRAINER_H_
