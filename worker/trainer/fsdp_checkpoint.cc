// FsdpTrainer's checkpoints: what a rank's state file holds, how it is
// written through checkpoint_io.h, and how Restore loads it back, re-slicing
// the dim-0 shards when the job now runs at another world size.
//
// rank-<R>.state, little-endian:
//   "TSRSTAT1"
//   int64 step, rank, world_size, data_position, parameter count
//   per parameter, in model order (embedding; each block's attn_norm, qkv,
//   out_proj, mlp_norm, gate_up, down; final_norm; lm_head):
//     int64 name length, name, int64 rows, cols, compute dtype (DType value),
//     first element, n (the rank's elements, ShardLayout)
//     n fp32 master, n fp32 Adam m, n fp32 Adam v, n compute elements
//     (e4m3 codes for FP8 block linears, bf16 for the rest)
//   int64 m, then the m floats of the packed FP8 quantizer block (amaxes,
//   scales, amax histories, and the scale_inv each weight's FP8 bytes were
//   encoded with; fp8_meta.h)
//
// Why the compute bytes are saved instead of re-quantized from the masters:
// under delayed scaling FusedAdam encodes step k's FP8 weights with the scale
// from before step k's scale update, and the packed block keeps only its
// inverse (weight_data_scale_inv), not the scale itself, so re-encoding from
// the master with the block's current scale would give other bytes than the
// unbroken run gathers at step k+1. Restoring the bytes makes a resumed run
// bit-identical; they cost one byte per FP8 parameter (two for bf16).
//
// The batch source is a pure function of (seed, step, rank), so the data
// position is the step; it is stored and checked so that a reader that one
// day keeps state has its place in the format.
//
// Hybrid sharding: only the first shard group writes (the replicas hold the
// same shards), so the checkpoint is that of a plain FSDP job over one shard
// group and its commit counts shard_group_size ranks.
//
// Re-slicing: every saved parameter shard records its element range, so each
// rank copies the overlap of its own range with every saved rank's. The
// quantizer block is identical on all ranks after a step's all-reduce; a
// re-sliced job takes saved rank 0's.
//
// A change of FP8 recipe (the manifests record the recipe the state was
// written under; formats/checkpoint_compatibility.h): the masters, Adam
// moments, step and data position are what define the run, and load as
// saved. The saved quantizer block belongs to the recipe being left (its
// histories and scales, even its size, follow that recipe), so it is
// dropped and the block Setup built stays: the entered recipe starts as a
// fresh job's. The block linears' saved compute bytes were encoded for the
// old recipe, so they are re-derived from the masters: a bf16 cast here
// when FP8 is off; when FP8 is on, each weight's amax slot is set to its
// restored master's (Setup recorded the initial weights' there) and
// InitCollective agrees on the scales and quantizes, as for a fresh job.
// The embedding, norms and LM head are bf16 under every recipe and load
// as saved.
#include <algorithm>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/checkpoint_layout.h"
#include "common/host_memory.h"
#include "common/memory_estimate.h"
#include "common/status_macros.h"
#include "formats/checkpoint_compatibility.h"
#include "formats/checkpoint_io.h"
#include "formats/checkpoint_state.h"
#include "worker/trainer/fsdp_trainer.h"

namespace tessera {

// Where WriteState puts the state file's bytes: host bytes as they are,
// engine tensors copied off the device.
class StateSink {
 public:
  virtual ~StateSink() = default;
  virtual absl::Status Put(const void* data, size_t size) = 0;
  virtual absl::Status PutFromDevice(const void* src, size_t size) = 0;
  absl::Status PutInt(int64_t v) { return Put(&v, sizeof(v)); }
};

namespace {

// Into the host snapshot, at the bytes' final offsets: the device copies
// land in (page-locked) host memory with no staging copy.
class SnapshotSink : public StateSink {
 public:
  SnapshotSink(Ops& ops, char* base, size_t capacity)
      : ops_(ops), base_(base), capacity_(capacity) {}
  absl::Status Put(const void* data, size_t size) override {
    RETURN_IF_ERROR(Reserve(size));
    std::memcpy(base_ + offset_ - size, data, size);
    return absl::OkStatus();
  }
  absl::Status PutFromDevice(const void* src, size_t size) override {
    RETURN_IF_ERROR(Reserve(size));
    return ops_.CopyToHost(base_ + offset_ - size, src, size, nullptr);
  }
  size_t size() const { return offset_; }

 private:
  absl::Status Reserve(size_t size) {
    if (size > capacity_ - offset_) {
      return absl::InternalError(absl::StrCat("checkpoint snapshot overflows its ", capacity_,
                                              " bytes"));
    }
    offset_ += size;
    return absl::OkStatus();
  }
  Ops& ops_;
  char* base_;
  size_t capacity_;
  size_t offset_ = 0;
};

// Straight into a file, each tensor through a host staging buffer (the
// write when the host cannot hold a snapshot).
class FileSink : public StateSink {
 public:
  FileSink(Ops& ops, DurableFileWriter& out) : ops_(ops), out_(out) {}
  absl::Status Put(const void* data, size_t size) override { return out_.Append(data, size); }
  absl::Status PutFromDevice(const void* src, size_t size) override {
    staging_.resize(size);
    RETURN_IF_ERROR(ops_.CopyToHost(staging_.data(), src, size, nullptr));
    RETURN_IF_ERROR(ops_.Synchronize(nullptr));
    return out_.Append(staging_.data(), size);
  }

 private:
  Ops& ops_;
  DurableFileWriter& out_;
  std::vector<char> staging_;
};

// Nowhere: counts the bytes, so the file's size comes from WriteState itself.
class CountingSink : public StateSink {
 public:
  absl::Status Put(const void*, size_t size) override {
    bytes_ += static_cast<int64_t>(size);
    return absl::OkStatus();
  }
  absl::Status PutFromDevice(const void*, size_t size) override { return Put(nullptr, size); }
  int64_t bytes() const { return bytes_; }

 private:
  int64_t bytes_ = 0;
};

double SecondsSince(absl::Time start) { return absl::ToDoubleSeconds(absl::Now() - start); }

}  // namespace

absl::StatusOr<int64_t> FsdpTrainer::StateFileBytes() {
  CountingSink sink;
  RETURN_IF_ERROR(WriteState(0, sink));
  return sink.bytes();
}

absl::Status FsdpTrainer::SetupCheckpointSnapshot() {
  if (replica_rank_ > 0 || spec_.checkpoint().dir().empty() ||
      spec_.checkpoint().synchronous()) {
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(const int64_t bytes, StateFileBytes());
  // At most half of what the host has free now: the other ranks on this
  // host take theirs too, and the write streams through the page cache.
  const int64_t available = AvailableHostMemoryBytes();
  if (bytes <= available / 2) {
    absl::StatusOr<std::unique_ptr<Buffer>> buffer = ops_->AllocateHost(bytes);
    if (buffer.ok()) {
      snapshot_ = *std::move(buffer);
      return absl::OkStatus();
    }
    checkpoint_warning_ = absl::StrCat("cannot allocate the ", FormatBytesAsGiB(bytes),
                                       " checkpoint snapshot (", buffer.status().message(), ")");
  } else {
    checkpoint_warning_ = absl::StrCat("the host has ", FormatBytesAsGiB(available),
                                       " available, too little for a ", FormatBytesAsGiB(bytes),
                                       " checkpoint snapshot");
  }
  absl::StrAppend(&checkpoint_warning_,
                  ": checkpoints will stop training while they are written to disk");
  return absl::OkStatus();
}

absl::StatusOr<CheckpointStarted> FsdpTrainer::StartCheckpoint(int step, const std::string& dir) {
  if (meta_ == nullptr) return absl::FailedPreconditionError("Checkpoint before Setup");
  CheckpointStarted started;
  started.manifest_path = absl::StrCat(StepDir(dir, step), "/", RankManifestName(rank_));
  // Under hybrid sharding every replica holds the same shards: the first
  // shard group writes them, as a plain FSDP job of world_ ranks would, so
  // the checkpoint resumes at any world size or sharding.
  if (replica_rank_ > 0) {
    absl::MutexLock lock(&checkpoint_mu_);
    sync_checkpoint_ = {step, CheckpointWritten{StepDir(dir, step), 0, 0.0}};
    return started;
  }
  if (snapshot_ == nullptr) {
    // No snapshot: the state goes to disk before training continues.
    const absl::Time start = absl::Now();
    absl::StatusOr<CheckpointWritten> written = WriteCheckpointNow(step, dir);
    if (written.ok()) written->write_s = SecondsSince(start);
    absl::MutexLock lock(&checkpoint_mu_);
    sync_checkpoint_ = {step, written};
    if (!written.ok()) return written.status();
    started.bytes = written->bytes;
    return started;
  }
  {
    absl::MutexLock lock(&checkpoint_mu_);
    sync_checkpoint_.reset();
  }
  // The snapshot is reused: the previous write must have read all of it.
  started.wait_s = writer_.WaitIdle();
  const absl::Time start = absl::Now();
  SnapshotSink sink(*ops_, static_cast<char*>(snapshot_->data()), snapshot_->bytes());
  RETURN_IF_ERROR(WriteState(step, sink));
  // Every copy has landed before the next step's optimizer can overwrite
  // the state it came from.
  RETURN_IF_ERROR(ops_->Synchronize(nullptr));
  if (sink.size() != snapshot_->bytes()) {
    return absl::InternalError(absl::StrCat("checkpoint snapshot holds ", sink.size(),
                                            " bytes, it was sized for ", snapshot_->bytes()));
  }
  started.snapshot_s = SecondsSince(start);
  started.bytes = static_cast<int64_t>(sink.size());
  started.background = true;
  RETURN_IF_ERROR(writer_.Start(CheckpointWriteRequest{
      dir, step, rank_, world_, ManifestSpecForSave(), StateFileName(rank_),
      static_cast<const char*>(snapshot_->data()), sink.size()}));
  return started;
}

std::string FsdpTrainer::RecordedNumericsStack() const {
  return ops_->NumericsStack().substr(0, kMaxManifestNumericsStackChars);
}

ManifestSpec FsdpTrainer::ManifestSpecForSave() const {
  ManifestSpec spec = ManifestSpecOf(spec_);
  spec.numerics_stack = RecordedNumericsStack();
  return spec;
}

absl::StatusOr<CheckpointWritten> FsdpTrainer::AwaitCheckpoint(int step) {
  {
    absl::MutexLock lock(&checkpoint_mu_);
    if (sync_checkpoint_.has_value()) {
      if (sync_checkpoint_->first != step) {
        return absl::FailedPreconditionError(absl::StrCat(
            "no checkpoint of step ", step, " was started on this rank (the last was step ",
            sync_checkpoint_->first, ")"));
      }
      return sync_checkpoint_->second;
    }
  }
  return writer_.Await(step);
}

absl::StatusOr<CheckpointWritten> FsdpTrainer::WriteCheckpointNow(int step,
                                                                 const std::string& dir) {
  ASSIGN_OR_RETURN(std::unique_ptr<RankCheckpointWriter> writer,
                   RankCheckpointWriter::Begin(dir, step, rank_, world_, ManifestSpecForSave()));
  int64_t bytes = 0;
  RETURN_IF_ERROR(writer->AddFile(StateFileName(rank_), [&](DurableFileWriter& out) {
    FileSink sink(*ops_, out);
    absl::Status s = WriteState(step, sink);
    bytes = out.size();
    return s;
  }));
  CheckpointWritten written;
  ASSIGN_OR_RETURN(written.manifest_path, writer->Finish());
  written.bytes = bytes;
  return written;
}

absl::Status FsdpTrainer::WriteState(int step, StateSink& out) {
  const std::vector<Fp8ShardedParam*> params = AllParams();
  RETURN_IF_ERROR(out.Put(kStateMagic, 8));
  for (int64_t v : {int64_t{step}, int64_t{rank_}, int64_t{world_}, int64_t{step},
                    static_cast<int64_t>(params.size())}) {
    RETURN_IF_ERROR(out.PutInt(v));
  }
  for (const Fp8ShardedParam* p : params) {
    const int64_t n = p->layout.shard_numel();
    RETURN_IF_ERROR(out.PutInt(static_cast<int64_t>(p->name.size())));
    RETURN_IF_ERROR(out.Put(p->name.data(), p->name.size()));
    for (int64_t v : {p->rows, p->cols, static_cast<int64_t>(p->compute_dtype),
                      p->layout.first_elem(), n}) {
      RETURN_IF_ERROR(out.PutInt(v));
    }
    const size_t compute_bytes = n * DTypeSize(p->compute_dtype);
    for (const DeviceTensor* t : {&p->master, &p->exp_avg, &p->exp_avg_sq, &p->compute}) {
      const size_t bytes = t == &p->compute ? compute_bytes : n * sizeof(float);
      RETURN_IF_ERROR(out.PutFromDevice(t->desc.data, bytes));
    }
  }
  ASSIGN_OR_RETURN(const std::vector<float> meta, meta_->ToCheckpoint(*ops_));
  RETURN_IF_ERROR(out.PutInt(static_cast<int64_t>(meta.size())));
  return out.Put(meta.data(), meta.size() * sizeof(float));
}

absl::Status FsdpTrainer::Restore(const std::string& dir, int step) {
  if (meta_ == nullptr) return absl::FailedPreconditionError("Restore before Setup");
  if (collective_ready_ || next_step_ != 0) {
    return absl::FailedPreconditionError("Restore after InitCollective or a step");
  }
  if (step < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("resume step: must be >= 1 (a checkpoint follows at least one step), got ",
                     step));
  }
  ASSIGN_OR_RETURN(const CommitRecord commit, ReadCommitMarker(dir, step));
  const int saved_world = commit.world_size;
  const std::vector<Fp8ShardedParam*> params = AllParams();

  // The saved ranks whose shards overlap this rank's, and the one whose
  // quantizer block is taken.
  const int meta_rank = saved_world == world_ ? rank_ : 0;
  std::map<int, SavedState> saved;
  saved[meta_rank];
  for (const Fp8ShardedParam* p : params) {
    const int64_t lo = p->layout.first_elem(), hi = lo + p->layout.shard_numel();
    for (int s = 0; s < saved_world; ++s) {
      const ShardLayout theirs{p->rows, p->cols, saved_world, s};
      const int64_t their_lo = theirs.first_elem(), their_hi = their_lo + theirs.shard_numel();
      if (std::max(lo, their_lo) < std::min(hi, their_hi)) saved[s];
    }
  }
  // Block linears: the parameters whose compute dtype follows the recipe.
  std::vector<const Fp8ShardedParam*> block_linears;
  for (Block& b : blocks_) {
    for (const BlockLinear linear : kEveryBlockLinear) block_linears.push_back(&b.linear(linear));
  }
  auto is_block_linear = [&](const Fp8ShardedParam& p) {
    return std::find(block_linears.begin(), block_linears.end(), &p) != block_linears.end();
  };
  v1::Fp8Recipe saved_recipe;
  std::string saved_stack;
  for (auto& [s, state] : saved) {
    ASSIGN_OR_RETURN(const RankManifest manifest, ReadRankManifest(dir, step, s));
    const std::string what = absl::StrCat(StepDir(dir, step), "/", StateFileName(s));
    const std::string manifest_path = absl::StrCat(StepDir(dir, step), "/", RankManifestName(s));
    RETURN_IF_ERROR(CheckCheckpointFitsJob(manifest, spec_, manifest_path));
    RETURN_IF_ERROR(CheckManifestWorldSize(manifest, saved_world, manifest_path));
    if (s == meta_rank) {
      ASSIGN_OR_RETURN(saved_recipe, SavedFp8Recipe(manifest, spec_, manifest_path));
      saved_stack = manifest.spec.numerics_stack;
    }
    ASSIGN_OR_RETURN(state.bytes, ReadVerifiedFile(dir, manifest, StateFileName(s)));
    RETURN_IF_ERROR(ParseState(what, state));
    if (state.step != step || state.rank != s || state.world != saved_world ||
        state.data_position != step || state.params.size() != params.size()) {
      return absl::DataLossError(absl::StrCat(
          what, ": header (step ", state.step, ", rank ", state.rank, " of ", state.world,
          ", data position ", state.data_position, ", ", state.params.size(),
          " parameters) does not match its step, rank, world size and model"));
    }
  }
  const std::string recipe_change = DescribeFp8RecipeChange(saved_recipe, spec_.fp8());
  const bool recipe_changed = !recipe_change.empty();
  for (auto& [s, state] : saved) {
    const std::string what = absl::StrCat(StepDir(dir, step), "/", StateFileName(s));
    for (size_t i = 0; i < params.size(); ++i) {
      const Fp8ShardedParam& p = *params[i];
      const SavedParam& q = state.params[i];
      const ShardLayout theirs{p.rows, p.cols, saved_world, s};
      // A block linear saved under another recipe may hold other codes.
      const bool dtype_fits = q.dtype == static_cast<int64_t>(p.compute_dtype) ||
                              (recipe_changed && is_block_linear(p));
      if (q.name != p.name || q.rows != p.rows || q.cols != p.cols || !dtype_fits ||
          q.first != theirs.first_elem() || q.n != theirs.shard_numel()) {
        return absl::DataLossError(absl::StrCat(what, ": parameter ", i, " (", q.name,
                                                ") does not match this model's ", p.name));
      }
    }
  }

  // Copy each parameter's overlap with every saved shard, then onto the engine.
  std::vector<char> master, exp_avg, exp_avg_sq, compute;
  for (size_t i = 0; i < params.size(); ++i) {
    const Fp8ShardedParam& p = *params[i];
    const bool rederive = recipe_changed && is_block_linear(p);
    const int64_t n = p.layout.shard_numel(), lo = p.layout.first_elem();
    const int64_t esize = static_cast<int64_t>(DTypeSize(p.compute_dtype));
    master.resize(n * 4);
    exp_avg.resize(n * 4);
    exp_avg_sq.resize(n * 4);
    compute.resize(n * esize);
    int64_t covered = 0;
    for (const auto& [s, state] : saved) {
      const SavedParam& q = state.params[i];
      const int64_t from = std::max(lo, q.first), to = std::min(lo + n, q.first + q.n);
      if (from >= to) continue;
      const int64_t src = from - q.first, dst = from - lo, count = to - from;
      std::memcpy(master.data() + dst * 4, q.master + src * 4, count * 4);
      std::memcpy(exp_avg.data() + dst * 4, q.exp_avg + src * 4, count * 4);
      std::memcpy(exp_avg_sq.data() + dst * 4, q.exp_avg_sq + src * 4, count * 4);
      if (!rederive) {
        std::memcpy(compute.data() + dst * esize, q.compute + src * esize, count * esize);
      }
      covered += count;
    }
    if (covered != n) {
      return absl::DataLossError(absl::StrCat(StepDir(dir, step), ": the saved shards of ",
                                              p.name, " cover ", covered, " of this rank's ", n,
                                              " elements"));
    }
    // Setup recorded the initial master's amax: the restored one replaces it
    // (also on ranks with an empty shard, which record nothing).
    if (rederive && p.is_fp8()) RETURN_IF_ERROR(ops_->Memset(p.amax, 0, sizeof(float), nullptr));
    if (n == 0) continue;
    RETURN_IF_ERROR(ops_->CopyToDevice(p.master.desc.data, master.data(), n * 4, nullptr));
    RETURN_IF_ERROR(ops_->CopyToDevice(p.exp_avg.desc.data, exp_avg.data(), n * 4, nullptr));
    RETURN_IF_ERROR(ops_->CopyToDevice(p.exp_avg_sq.desc.data, exp_avg_sq.data(), n * 4, nullptr));
    if (!rederive) {
      RETURN_IF_ERROR(ops_->CopyToDevice(p.compute.desc.data, compute.data(), n * esize, nullptr));
    } else if (p.is_fp8()) {
      RETURN_IF_ERROR(ops_->Amax(Reshaped(p.master.desc, Shape{n}), p.amax, nullptr));
    } else {
      RETURN_IF_ERROR(ops_->Cast(Reshaped(p.master.desc, Shape{n}),
                                 Reshaped(p.compute.desc, Shape{n}), nullptr));
    }
  }
  const SavedState& meta_state = saved[meta_rank];
  if (!recipe_changed) {
    if (meta_state.meta_count == meta_->checkpoint_floats()) {
      RETURN_IF_ERROR(meta_->FromCheckpoint(*ops_, meta_state.meta));
    } else if (fp8_) {
      return absl::DataLossError(absl::StrCat(
          StepDir(dir, step), "/", StateFileName(meta_rank), ": quantizer block of ",
          meta_state.meta_count, " floats, this model's has ", meta_->checkpoint_floats()));
    }
    // Else bf16 before and after, under scaling parameters that differ but
    // were never read: there is no FP8 state to keep.
  }
  RETURN_IF_ERROR(ops_->Synchronize(nullptr));
  next_step_ = step;
  restored_ = true;
  quantize_restored_masters_ = recipe_changed && fp8_;
  restore_note_.clear();
  restore_warning_.clear();
  if (recipe_changed) {
    restore_note_ = absl::StrCat(
        "resumed from step ", step, ": ", recipe_change,
        "; master weights and Adam moments restored as saved, block linear weights ",
        fp8_ ? "quantized from the masters with fresh scales agreed across ranks"
             : "cast to bf16 from the masters",
        ", FP8 amax histories and scales started fresh");
  }
  // A checkpoint from before the stack was recorded says nothing either way.
  if (const std::string now = RecordedNumericsStack(); !saved_stack.empty() && saved_stack != now) {
    restore_warning_ = absl::StrCat(
        "resumed from step ", step, " on another numerics stack: the checkpoint was written "
        "under \"", saved_stack, "\", this rank runs \"", now, "\"; training goes on from the "
        "saved state, but its losses and weights will not match an unbroken run's bit for bit");
  }
  return absl::OkStatus();
}

}  // namespace tessera
