// The seam between the worker daemon (control plane) and compute. The daemon
// drives one Trainer per job through Setup -> (Restore) -> InitCollective ->
// RunStep... -> (StartCheckpoint, more RunSteps, AwaitCheckpoint) and may
// call Abort from any thread at any time. The real
// implementation is the FSDP2 trainer (worker/trainer/fsdp_trainer.h) over a
// compute engine; tests may drive the daemon with a fake.
#ifndef TESSERA_WORKER_TRAINER_TRAINER_H_
#define TESSERA_WORKER_TRAINER_TRAINER_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/tessera/v1/job.pb.h"
#include "worker/comm/rendezvous_store.h"

namespace tessera {

struct SetupReport {
  int64_t shard_parameters = 0;  // elements this rank holds
  int64_t total_parameters = 0;  // elements of the whole model
  // Something the job's log should warn about (empty: nothing), e.g. that
  // checkpoints will stop training while they are written because the host
  // cannot hold a snapshot of the rank's state.
  std::string warning;
};

// A checkpoint once its snapshot is taken (StartCheckpoint).
struct CheckpointStarted {
  std::string manifest_path;  // where the rank's manifest will be
  int64_t bytes = 0;          // what the rank writes (0: nothing, e.g. an HSDP replica)
  double wait_s = 0.0;        // waiting for the previous checkpoint's write to finish
  double snapshot_s = 0.0;    // copying the state off the device
  // The write goes on in the background (false: it finished before
  // StartCheckpoint returned, because the host cannot hold a snapshot).
  bool background = false;
};

// A checkpoint once its files are durable (AwaitCheckpoint).
struct CheckpointWritten {
  std::string manifest_path;
  int64_t bytes = 0;
  double write_s = 0.0;  // from the end of the snapshot to the manifest's fsync
};

// The places a step waits on collectives: one per CollectiveSite
// (step_clock.h).
constexpr int kCollectiveSites = 8;

// Where one step's time went (see step_clock.h): GPU-timed phases on the
// CUDA engine, host-timed on the CPU engine.
struct StepPhaseTimes {
  double forward_s = 0.0;
  double loss_s = 0.0;
  double backward_s = 0.0;
  double optimizer_s = 0.0;
  double collective_s = 0.0;  // all-gathers, reduce-scatters and all-reduces
  double recompute_s = 0.0;   // the forward recomputed in the backward (memory.recompute)
  double host_s = 0.0;        // step wall time outside the timeline above
  // collective_s by where it waited, indexed by CollectiveSite
  // (step_clock.h); the parts add up to collective_s.
  std::array<double, kCollectiveSites> collective_waits{};
};

// One evaluation of the validation data (DataConfig.validation).
struct ValidationReport {
  float loss = 0.f;     // global mean loss over the valid tokens scored (identical on every rank)
  int64_t tokens = 0;   // valid tokens scored, over all ranks
  // With data.validation.sources: each source's share, in the spec's order.
  struct Source {
    std::string path;
    float loss = 0.f;
    int64_t tokens = 0;
  };
  std::vector<Source> sources;
};

// One FP8 tensor of a block at a statistics step (job.proto's
// Fp8TensorStats; worker/trainer/fp8_step_stats.h): this rank's part.
struct Fp8TensorReport {
  enum class Role { kWeight = 0, kInput = 1, kGradient = 2 };
  int block = 0;
  const char* linear = "";  // BlockLinearName: "qkv", "out_proj", "gate_up", "down"
  Role role = Role::kWeight;
  bool e5m2 = false;        // the format: e5m2 (gradients) or e4m3
  float amax = 0.f;         // this rank's max |value|
  float scale = 0.f;        // the scale the values were encoded with
  int64_t saturated = 0;    // values encoded at the format's largest magnitude
  int64_t underflowed = 0;  // nonzero values encoded as zero
  int64_t elements = 0;     // values this rank measured
};

// The bf16 shadow loss (Fp8Recipe.shadow_interval_steps): the FP8 and the
// bf16 forward of the same weights on the job's fixed held-out batch.
struct ShadowReport {
  float fp8_loss = 0.f;   // global mean loss of the FP8 forward
  float bf16_loss = 0.f;  // the same with bf16 block linears cast from the fp32 masters
  int64_t tokens = 0;     // valid tokens scored, over all ranks
  double time_s = 0.0;    // this rank's wall time for both forwards, not in compute_time_s
};

struct StepReport {
  int step = 0;
  float loss = 0.f;       // global mean loss (identical on every rank)
  float grad_norm = 0.f;  // global grad norm before clipping
  float lr = 0.f;
  int64_t tokens = 0;     // this rank's valid tokens
  double compute_time_s = 0.0;
  StepPhaseTimes phases;
  // Device memory in use after the step (Ops::MemoryInUseBytes), the most
  // seen after any step of this trainer: the rank's peak so far.
  int64_t peak_memory_bytes = 0;
  // Set by the daemon when an evaluation ran after this step.
  std::optional<ValidationReport> validation;
  // Set on the steps after which the bf16 shadow loss ran.
  std::optional<ShadowReport> shadow;
  // Set on the step that changed how later steps run, for the job's log:
  // that it was captured in a CUDA graph, or why it could not be (then a
  // warning: the job runs, but slower than it could). Empty on other steps.
  std::string engine_note;
  bool engine_note_is_warning = false;
  // On a statistics step (fp8.stats_interval_steps): every FP8 tensor of
  // the blocks, this rank's part. Empty on other steps.
  std::vector<Fp8TensorReport> fp8_stats;
};

class Trainer {
 public:
  virtual ~Trainer() = default;
  // Builds the rank's shards, quantizers, buffers and data reader. The spec
  // has already been validated by the coordinator.
  virtual absl::StatusOr<SetupReport> Setup(const v1::JobSpec& spec, int rank, int world_size) = 0;
  // Joins the job's collective group through `store` (not owned; only used
  // during this call). `host` is how peers reach this worker. Collectives
  // later fail with ABORTED when they exceed `timeout`.
  virtual absl::Status InitCollective(RendezvousStore* store, const std::string& host,
                                      absl::Duration timeout) = 0;
  // One optimizer step (0-based). Steps must be consecutive.
  virtual absl::StatusOr<StepReport> RunStep(int step) = 0;
  // Takes this rank's state after `step` steps (the steps run so far) and
  // writes it into dir/step-<step>/ as verified files (checkpoint_io.h). It
  // returns once the state is copied off the device; the files are written
  // in the background while later steps run, and AwaitCheckpoint reports
  // the write. At most one write is in flight: a StartCheckpoint that finds
  // the previous write still going waits for it first (wait_s).
  virtual absl::StatusOr<CheckpointStarted> StartCheckpoint(int step, const std::string& dir) = 0;
  // Blocks until the write StartCheckpoint(step) began is durable, and
  // reports it; its error if the write failed. Thread-safe: it may run while
  // the compute thread runs steps. FAILED_PRECONDITION when `step` is not
  // the most recent checkpoint started; CANCELLED when Abort stopped it.
  virtual absl::StatusOr<CheckpointWritten> AwaitCheckpoint(int step) = 0;
  // Both halves at once: the state after `step` steps written when it
  // returns; the rank's manifest path.
  absl::StatusOr<std::string> Checkpoint(int step, const std::string& dir) {
    absl::StatusOr<CheckpointStarted> started = StartCheckpoint(step, dir);
    if (!started.ok()) return started.status();
    absl::StatusOr<CheckpointWritten> written = AwaitCheckpoint(step);
    if (!written.ok()) return written.status();
    return written->manifest_path;
  }
  // Replaces the freshly initialised state with the one a committed
  // checkpoint saved after `step` steps under dir, possibly written at
  // another world size; the next RunStep is then `step`. Call after Setup
  // and before InitCollective. NOT_FOUND: no committed checkpoint of that
  // step; DATA_LOSS: a file is missing or damaged; FAILED_PRECONDITION: it
  // was written by a job whose state-shaping spec fields differ (the FP8
  // recipe may differ: formats/checkpoint_compatibility.h).
  virtual absl::Status Restore(const std::string& dir, int step) = 0;
  // After a Restore that had to adapt the saved state to this job, what the
  // job's log should say about it, e.g. "resumed from step 40: FP8 recipe
  // changed from delayed scaling (amax history 16) to disabled (bf16); ...".
  // Empty when the state was loaded as saved (and before any Restore).
  virtual std::string restore_note() const { return std::string(); }
  // After a Restore whose checkpoint was written under another numerics
  // stack (Ops::NumericsStack: device, CUDA, cuBLASLt, cuDNN or the CPU
  // engine's BLAS), what the job's log should warn about: the run goes on,
  // but no longer bit for bit with an unbroken one. Empty otherwise.
  virtual std::string restore_warning() const { return std::string(); }
  // Scores the validation data with the current weights: each rank its own
  // eval_batches micro-batches, the loss all-reduced. Touches no optimizer
  // or FP8 scaling state, so the next RunStep computes exactly what it would
  // have without it. Call between steps (after InitCollective), on every
  // rank of the job. FAILED_PRECONDITION when the spec has no validation
  // section or out of order; ABORTED if a collective fails.
  virtual absl::StatusOr<ValidationReport> Evaluate() = 0;
  // Thread-safe: makes an in-flight or later RunStep return ABORTED/CANCELLED,
  // and stops a checkpoint write in flight (its partial files are removed).
  virtual void Abort() = 0;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_TRAINER_TRAINER_H_
