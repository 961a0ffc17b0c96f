// The ops API: every compute command a worker runs goes through this one
// interface. The CPU reference engine (worker/engine/cpu) and the CUDA engine
// (worker/engine/cuda) implement it with the same semantics, so the model and
// the training step (worker/model, worker/trainer) are written once.
//
// Conventions (in the spirit of TransformerEngine's C API):
//  * Tensors are non-owning TensorDesc values; the stream is the last argument.
//  * All matrices are row-major. "T" is tokens (batch * seq), "H" d_model,
//    "F" ffn_dim, "V" vocab, "nh" heads, "hd" head dim.
//  * Activations are bf16 in memory; arithmetic accumulates in fp32.
//  * Scalars an op produces or consumes per step (loss, token count, grad
//    scale, amax) live in engine memory, so a GPU step needs no host sync.
//  * Errors come back as absl::Status: INVALID_ARGUMENT for shapes/dtypes
//    that do not fit, RESOURCE_EXHAUSTED for out-of-memory, INTERNAL for a
//    library failure (message carries file:line and the library's string).
#ifndef TESSERA_WORKER_OPS_OPS_H_
#define TESSERA_WORKER_OPS_OPS_H_

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/ops/tensor.h"

namespace tessera {

// How an FP8 scale is derived from amax values (see UpdateFp8Scales).
enum class AmaxAlgo : uint8_t { kMax = 0, kMostRecent = 1 };

// One parameter shard as FusedAdam sees it: a *sharded FP8 tensor*. All
// tensors are 1-D views over this rank's flat shard of `numel` elements;
// numel may be 0 (an empty shard is a no-op, never an error).
struct AdamShard {
  TensorDesc master;   // [numel] fp32, updated in place
  TensorDesc grad;     // [numel] fp32, read (unscaled sum-of-token grads)
  TensorDesc exp_avg;  // [numel] fp32 (Adam m), updated in place
  TensorDesc exp_avg_sq;  // [numel] fp32 (Adam v), updated in place
  // [numel] e4m3 (or bf16 for non-FP8 params, then scale/amax may be null).
  // Written from the new master with *fp8.scale; *fp8.amax receives
  // max(|new master|) over this shard (max-combined with its old value).
  TensorDesc fp8;
  bool apply_weight_decay = true;
};

struct AdamHyper {
  float lr = 0.f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.f;
  int step = 1;  // 1-based, for bias correction
  // When set: three fp32 in engine memory, StepValuesFor(hyper) of the
  // step being run, read when the update runs; lr and step above are then
  // not used. A captured step (BeginCapture) keeps its kernels' arguments,
  // so it takes the values that change every step from here, written
  // before each replay.
  const float* step_values = nullptr;
};

// The per-step values FusedAdam uses, computed once on the host so that
// every engine and both ways of passing them use the same bits:
// {lr, 1 - beta1^step, 1 - beta2^step}.
struct AdamStepValues {
  float lr = 0.f;
  float bias_correction1 = 1.f;
  float bias_correction2 = 1.f;
};
inline AdamStepValues StepValuesFor(const AdamHyper& hyper) {
  const float step = static_cast<float>(hyper.step);
  return {hyper.lr, 1.0f - std::pow(hyper.beta1, step), 1.0f - std::pow(hyper.beta2, step)};
}

// Built once at setup from the rank's shard table (on the GPU: a
// device-resident pointer table), then reused by every FusedAdam call.
class AdamPlan {
 public:
  virtual ~AdamPlan() = default;
};

// Engine-owned memory. Freed on destruction.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual void* data() const = 0;
  virtual size_t bytes() const = 0;
};

// What the host counted in a batch's document starts (CountDocuments):
// documents in the whole batch, tokens in the longest, and how many fall in
// each length class, class c holding the documents of (2^(c-1), 2^c]
// tokens (class 0: one token).
inline constexpr int kDocumentLengthClasses = 32;
struct DocumentCounts {
  int64_t count = 0;
  int64_t longest = 0;
  std::array<int32_t, kDocumentLengthClasses> per_length_class{};

  static int LengthClass(int64_t length) {
    int c = 0;
    while ((int64_t{1} << c) < length) ++c;
    return c;
  }
  bool operator==(const DocumentCounts& o) const {
    return count == o.count && longest == o.longest && per_length_class == o.per_length_class;
  }
};

// Counts the documents of host-side starts in Ops::AttentionForward's form
// ([rows, seq] flattened): a document begins at every row start and where
// an entry equals its own position.
inline DocumentCounts CountDocuments(absl::Span<const int32_t> starts, int64_t seq) {
  DocumentCounts out;
  if (seq <= 0) return out;
  int64_t begin = 0;
  for (int64_t i = 0; i <= static_cast<int64_t>(starts.size()); ++i) {
    const bool ends = i == static_cast<int64_t>(starts.size());
    if (ends || i % seq == 0 || starts[i] == i % seq) {
      if (i > begin) {
        out.longest = std::max(out.longest, i - begin);
        ++out.per_length_class[DocumentCounts::LengthClass(i - begin)];
      }
      if (!ends) ++out.count;
      begin = i;
    }
  }
  return out;
}

// A batch's documents for attention (Ops::AttentionForward): `starts`, the
// per-token document starts on the device, and `counts`, what the host
// counted in them when it filled them (count 0: not counted). An engine
// that plans attention per document layout (the CUDA engine through cuDNN's
// ragged batches) needs the counts and otherwise runs kernels that read
// the starts alone. Built implicitly from a TensorDesc of starts (not
// counted).
struct AttentionDocuments {
  TensorDesc starts;
  DocumentCounts counts;

  AttentionDocuments() = default;
  AttentionDocuments(const TensorDesc& starts_on_device)  // NOLINT: implicit by design
      : starts(starts_on_device) {}
  AttentionDocuments(const TensorDesc& starts_on_device, const DocumentCounts& host_counts)
      : starts(starts_on_device), counts(host_counts) {}
  bool Counted() const { return counts.count > 0; }
};

class Ops {
 public:
  virtual ~Ops() = default;

  // ---- Memory -------------------------------------------------------------
  // Allocation happens at setup only; a steady-state step allocates nothing.
  virtual absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t bytes) = 0;
  // Host memory that CopyToHost and CopyToDevice reach at full bus speed:
  // page-locked on the CUDA engine, ordinary memory on the CPU engine. For
  // checkpoint snapshots, allocated at setup. RESOURCE_EXHAUSTED when the
  // host cannot provide it.
  virtual absl::StatusOr<std::unique_ptr<Buffer>> AllocateHost(size_t bytes) = 0;
  virtual absl::Status CopyToDevice(void* dst, const void* src, size_t bytes, Stream* stream) = 0;
  virtual absl::Status CopyToHost(void* dst, const void* src, size_t bytes, Stream* stream) = 0;
  virtual absl::Status CopyDeviceToDevice(void* dst, const void* src, size_t bytes, Stream* stream) = 0;
  virtual absl::Status Memset(void* dst, int value, size_t bytes, Stream* stream) = 0;
  virtual absl::Status Synchronize(Stream* stream) = 0;

  // ---- Streams and captured work ------------------------------------------
  // A stream the engine owns (freed with it) for the training step's work.
  // It is ordered with the default stream (nullptr): work queued on either
  // waits for the other's earlier work, so callers that use nullptr for
  // setup, checkpoints or tests need no extra synchronisation. Unlike the
  // default stream, it can be captured. The CPU engine returns nullptr (it
  // runs work as it is queued).
  virtual absl::StatusOr<Stream*> CreateStream() = 0;
  // Capture: the work queued on `stream` from BeginCapture to EndCapture is
  // recorded, not run, and EndCapture returns it as one replayable unit (a
  // CUDA graph). The captured work keeps every argument it was queued with
  // (pointers, sizes, scalars), so what must change between replays has to
  // be read from engine memory, and the caller's buffers it uses must
  // outlive it; the engine keeps its own scratch memory valid for as long as
  // the engine lives, even when later work needs larger scratch. Nothing may
  // allocate, synchronise or read back to the host while capturing. Time
  // marks recorded while capturing are recorded again by every replay. BeginCapture: UNIMPLEMENTED where
  // the engine cannot capture (the CPU engine), INVALID_ARGUMENT for the
  // default stream. EndCapture: FAILED_PRECONDITION when no capture is open
  // or the engine invalidated it (something not capturable was queued); the
  // stream is out of capture either way.
  class CapturedWork {
   public:
    virtual ~CapturedWork() = default;
  };
  virtual absl::Status BeginCapture(Stream* stream) = 0;
  virtual absl::StatusOr<std::unique_ptr<CapturedWork>> EndCapture(Stream* stream) = 0;
  // Queues the captured work on `stream` (one launch).
  virtual absl::Status Replay(const CapturedWork& work, Stream* stream) = 0;

  // ---- Step timing --------------------------------------------------------
  // Records time mark `mark` (0 <= mark < kTimeMarks) when the work queued
  // on `stream` before it has run: a GPU event on the CUDA engine, the host
  // clock on the CPU engine (whose work is done when each call returns).
  // Recording costs no allocation and no host wait.
  // Enough for the deepest model a job may name (the step's laps per block
  // times common/spec_limits.h's kMaxLayers: train_step.cc checks).
  static constexpr int kTimeMarks = 16384;
  virtual absl::Status MarkTime(int mark, Stream* stream) = 0;
  // Seconds from mark `from` to mark `to`, both recorded and, on the GPU,
  // reached (call after Synchronize).
  virtual absl::StatusOr<double> SecondsBetween(int from, int to) = 0;

  // ---- FP8 ----------------------------------------------------------------
  // out = saturate(rne(in * *out.scale)) as e4m3/e5m2; in is fp32 or bf16 of
  // the same element count. *out.amax = max(*out.amax, max|in|) (fused amax;
  // out.amax may be null). *out.scale_inv = 1 / *out.scale if non-null.
  // Bit-identical across engines for the same input and scale.
  virtual absl::Status Quantize(const TensorDesc& in, const TensorDesc& out, Stream* stream) = 0;
  // As Quantize for a 2-D in [R, C], also writing out_t [C, R] (the
  // transposed FP8 copy the FP8 GEMM layout needs). out.data may be null to
  // skip the plain copy. out_t uses out's scale (out_t.scale is ignored).
  virtual absl::Status QuantizeTranspose(const TensorDesc& in, const TensorDesc& out,
                                         const TensorDesc& out_t, Stream* stream) = 0;
  // out (fp32 or bf16) = in (e4m3/e5m2) * *in.scale_inv.
  virtual absl::Status Dequantize(const TensorDesc& in, const TensorDesc& out, Stream* stream) = 0;
  // *amax = max(*amax, max|in|); in is fp32 or bf16. amax: one fp32 in engine memory.
  virtual absl::Status Amax(const TensorDesc& in, float* amax, Stream* stream) = 0;
  // How `in` (fp32 or bf16) fares when encoded as `format` (kE4M3 or kE5M2)
  // with *scale, exactly as Quantize encodes it: counts[0] += the elements
  // whose code is the format's largest magnitude (they saturate at its
  // maximum: 448 for e4m3, 57344 for e5m2, infinities included), and
  // counts[1] += the nonzero elements whose code is ±0 (they underflow).
  // NaN counts as neither. scale: one fp32, counts: two int64, both in
  // engine memory. The counts are exact and equal across engines.
  virtual absl::Status Fp8Stats(const TensorDesc& in, DType format, const float* scale,
                                int64_t* counts, Stream* stream) = 0;
  // Delayed/current scaling for n tensors at once.
  //   amax [n]: this step's amaxes (already all-reduced if shared); zeroed after use.
  //   history [history_len, n]: rolled by one row, newest amax in row 0.
  //   scale [n]: scale = fp8_max / a / 2^margin where a is the max over the
  //   history (kMax) or the newest entry (kMostRecent); if a == 0 or not
  //   finite, the scale is left unchanged. history_len 1 with kMostRecent is
  //   current scaling. fp8_max: 448 (e4m3) or 57344 (e5m2).
  //   scale_inv: 1 / scale of tensor i at scale_inv[i * scale_inv_stride]
  //   (stride >= 1). A stride of 4 puts every value on its own 16 bytes,
  //   which cuBLASLt requires of the scale pointers an FP8 GEMM reads.
  virtual absl::Status UpdateFp8Scales(float* amax, float* history, float* scale, float* scale_inv,
                                       int scale_inv_stride, int n, int history_len,
                                       float fp8_max, int margin, AmaxAlgo algo,
                                       Stream* stream) = 0;
  // out [C, R] = in [R, C]ᵀ for 1-, 2- or 4-byte dtypes (FP8 bytes transpose
  // exactly; out keeps in's scale_inv).
  virtual absl::Status Transpose(const TensorDesc& in, const TensorDesc& out, Stream* stream) = 0;

  // ---- Memory -------------------------------------------------------------
  // Bytes the engine could still allocate: free device memory (CUDA) or the
  // host's available memory (CPU). Lets a job that cannot fit be refused
  // before anything is allocated.
  virtual absl::StatusOr<int64_t> AvailableMemoryBytes() = 0;
  // Device memory in use now. CUDA: the device's used memory (total minus
  // free, cudaMemGetInfo), the figure nvidia-smi shows: every allocation,
  // the context and the libraries' workspaces. CPU: the bytes of the
  // engine's live buffers. Nothing is allocated per step, so read after a
  // step it is that step's peak.
  virtual absl::StatusOr<int64_t> MemoryInUseBytes() = 0;

  // ---- Provenance ---------------------------------------------------------
  // What besides the job decides this engine's bits: the device and the
  // library versions its kernels come from, in one line ("CUDA runtime
  // 13000, driver 13000, cuBLASLt 130100, cuDNN 91400, NVIDIA H100 80GB
  // HBM3 (sm_90)"; the CPU engine names its BLAS). A checkpoint records it,
  // and a resume under another says that the run's bits will differ from
  // an unbroken run's.
  virtual std::string NumericsStack() const = 0;

  // ---- GEMM ---------------------------------------------------------------
  // d [M, N] = op(a) · op(b) (+ d if accumulate), op(x) = xᵀ when trans_x.
  // a is [M, K] ([K, M] if trans_a); b is [K, N] ([N, K] if trans_b).
  // Operands: both bf16, or both FP8 (e4m3×e4m3, e5m2×e4m3, e4m3×e5m2); the
  // product is multiplied by *a.scale_inv * *b.scale_inv for FP8 operands.
  // FP8 operands must be K-contiguous: trans_a == false and trans_b == true
  // (the only FP8 layout cuBLASLt offers). d is bf16 or fp32; accumulate
  // (beta = 1) requires fp32 d. Accumulation is fp32.
  virtual absl::Status Gemm(const TensorDesc& a, bool trans_a, const TensorDesc& b, bool trans_b,
                            const TensorDesc& d, bool accumulate, Stream* stream) = 0;
  // d [M, N] = op(a) · op(b) + c, with c and d fp32 [M, N]: the addend is
  // read where the product is written (a residual connection with no pass
  // of its own). c may be d itself (Gemm with accumulate) but must not
  // otherwise overlap it. Operands as Gemm's.
  virtual absl::Status GemmAdd(const TensorDesc& a, bool trans_a, const TensorDesc& b,
                               bool trans_b, const TensorDesc& c, const TensorDesc& d,
                               Stream* stream) = 0;

  // ---- Elementwise and normalisation --------------------------------------
  // out = a + b; each fp32 or bf16, same element count (out may alias a).
  virtual absl::Status Add(const TensorDesc& a, const TensorDesc& b, const TensorDesc& out,
                           Stream* stream) = 0;
  // out = in converted between fp32 and bf16 (rne).
  virtual absl::Status Cast(const TensorDesc& in, const TensorDesc& out, Stream* stream) = 0;
  // out [T, H] = table[ids[t]]; ids [T] int32, table [V, H] fp32 or bf16, out bf16/fp32.
  // An id outside [0, V) is INVALID_ARGUMENT on the CPU engine (the CUDA
  // engine writes zeros for it and raises a sticky error flag).
  virtual absl::Status EmbeddingForward(const TensorDesc& ids, const TensorDesc& table,
                                        const TensorDesc& out, Stream* stream) = 0;
  // grad_table [R, H] fp32 += scatter-add of grad_out [T, H] rows by ids,
  // where grad_table holds rows [first_row, first_row + R) of the gradient
  // of a [vocab, H] table (first_row 0 and vocab R: the whole table; an
  // FSDP rank passes its shard's rows and every rank's tokens). A token
  // whose id is in [0, vocab) but outside those rows adds nothing.
  // Deterministic on both engines: the CPU engine adds each id's rows in
  // token order; the CUDA engine gives the same bits on every run (no float
  // atomics) and matches the CPU engine up to rounding (bit for bit when
  // every id occurs once). An id outside [0, vocab) is skipped (and
  // reported as for EmbeddingForward). INVALID_ARGUMENT unless 0 <=
  // first_row and first_row + R <= vocab.
  virtual absl::Status EmbeddingBackward(const TensorDesc& ids, const TensorDesc& grad_out,
                                         const TensorDesc& grad_table, int64_t first_row,
                                         int64_t vocab, Stream* stream) = 0;
  // out [T, H] = x / rms(x) * weight; x fp32/bf16, weight [H] fp32/bf16,
  // out bf16/fp32, rstd [T] fp32 saved for backward.
  virtual absl::Status RmsNormForward(const TensorDesc& x, const TensorDesc& weight, float eps,
                                      const TensorDesc& out, const TensorDesc& rstd,
                                      Stream* stream) = 0;
  // RmsNormForward into a bf16 [T, H] temporary, then QuantizeTranspose of
  // that bf16 tensor into out [T, H] and out_t [H, T] (FP8, out's scale,
  // amax and scale_inv as in QuantizeTranspose; out.data may be null),
  // bit-identical to the two ops in sequence on the same engine: the same
  // codes, rstd, amax and scale_inv. x is fp32 or bf16 (the fp32 residual
  // stream), weight fp32 or bf16. The CUDA engine fuses them where the
  // shapes allow, so the bf16 normalised tensor is never stored: the FP8
  // QKV and gate/up projections' input.
  virtual absl::Status RmsNormForwardQuantize(const TensorDesc& x, const TensorDesc& weight,
                                              float eps, const TensorDesc& out,
                                              const TensorDesc& out_t, const TensorDesc& rstd,
                                              Stream* stream) = 0;
  // grad_x [T, H] (fp32/bf16) = dL/dx; if accumulate_grad_x, added to it.
  // grad_weight [H] fp32 += dL/dweight.
  virtual absl::Status RmsNormBackward(const TensorDesc& grad_out, const TensorDesc& x,
                                       const TensorDesc& weight, const TensorDesc& rstd,
                                       const TensorDesc& grad_x, bool accumulate_grad_x,
                                       const TensorDesc& grad_weight, Stream* stream) = 0;
  // Attention uses grouped-query heads throughout: qkv [B, S, nh + 2*nkv, hd]
  // bf16 holds, per token, the nh query heads, then the nkv key heads, then
  // the nkv value heads (the output columns of the fused QKV projection in
  // that order). nkv divides nh; query head h reads key/value head
  // h / (nh / nkv). nkv == nh is plain multi-head attention.
  //
  // Rotary embedding, in place on the query and key heads of qkv (heads
  // [0, nh + nkv)); the value heads are untouched. Position of token s is s.
  // Pairs are (i, i + hd/2) (the "rotate half" convention);
  // freq_i = theta^(-2i/hd).
  virtual absl::Status RopeForward(const TensorDesc& qkv, int n_kv_heads, float theta,
                                   Stream* stream) = 0;
  // Inverse rotation of the query and key heads of grad_qkv, in place.
  virtual absl::Status RopeBackward(const TensorDesc& grad_qkv, int n_kv_heads, float theta,
                                    Stream* stream) = 0;
  // Causal softmax attention. qkv [B, S, nh + 2*nkv, hd] bf16 (RoPE
  // applied); nh is taken from out [B, S, nh, hd] bf16; lse [B, nh, S] fp32
  // is the log-sum-exp of each query's scaled scores, the only softmax
  // statistic kept for backward (no S x S tensor exists anywhere).
  // Scale 1/sqrt(hd).
  //
  // Document masking: doc_starts [B, S] int32, for sequences that pack
  // several documents, holds for each token the position in its sequence
  // where its document begins, so that token i attends to keys
  // doc_starts[b, i] .. i only. A sequence's documents are contiguous:
  // doc_starts[b, 0] is 0 and each next entry repeats the previous one or
  // starts a document at its own position. One entry per token (rather than
  // a list of offsets whose length changes every step) keeps the shape fixed
  // for a captured step. WholeSequences() (no data) is causal attention over
  // each whole sequence. The CPU engine refuses entries that break the rule
  // (INVALID_ARGUMENT naming the first); the CUDA engine does not read them
  // back to check, but clamps each into [0, i], so that no content makes it
  // read outside the sequence.
  //
  // `documents` also carries the host's count of the starts
  // (AttentionDocuments, CountDocuments). Where given, the CPU engine
  // checks it against the starts (INVALID_ARGUMENT naming the field of
  // documents.counts that differs); the CUDA engine plans cuDNN's ragged attention
  // from it (documents as separate sequences of a batch), so a count that
  // does not match the starts on the device gives wrong results there.
  // Without it the CUDA engine runs its own kernels for documents.
  static TensorDesc WholeSequences() { return TensorDesc{}; }
  virtual absl::Status AttentionForward(const TensorDesc& qkv, int n_kv_heads,
                                        const AttentionDocuments& documents, const TensorDesc& out,
                                        const TensorDesc& lse, Stream* stream) = 0;
  // grad_qkv [B, S, nh + 2*nkv, hd] bf16 from grad_out [B, S, nh, hd] bf16;
  // every element is written (key and value gradients are summed over the
  // query heads of their group). Deterministic: the same inputs give the
  // same bits.
  virtual absl::Status AttentionBackward(const TensorDesc& grad_out, const TensorDesc& qkv,
                                         int n_kv_heads, const AttentionDocuments& documents,
                                         const TensorDesc& out, const TensorDesc& lse,
                                         const TensorDesc& grad_qkv, Stream* stream) = 0;
  // gate_up [T, 2F] bf16 holds gate in columns [0, F) and up in [F, 2F);
  // out [T, F] bf16 = silu(gate) * up.
  virtual absl::Status SwiGluForward(const TensorDesc& gate_up, const TensorDesc& out,
                                     Stream* stream) = 0;
  // grad_gate_up [T, 2F] bf16 from grad_out [T, F] bf16.
  virtual absl::Status SwiGluBackward(const TensorDesc& grad_out, const TensorDesc& gate_up,
                                      const TensorDesc& grad_gate_up, Stream* stream) = 0;
  // SwiGluForward, then QuantizeTranspose of its bf16 result into out
  // [T, F] and out_t [F, T] (FP8, out's scale, amax and scale_inv as in
  // QuantizeTranspose; out.data may be null), bit-identical to the two ops
  // in sequence. The CUDA engine fuses them where the shapes allow, so the
  // bf16 activation is never stored: the FP8 down projection's input.
  virtual absl::Status SwiGluForwardQuantize(const TensorDesc& gate_up, const TensorDesc& out,
                                             const TensorDesc& out_t, Stream* stream) = 0;
  // SwiGluBackward, then QuantizeTranspose of its bf16 grad_gate_up into
  // dgu [T, 2F] and dgu_t [2F, T], likewise: the FP8 gate/up projection's
  // output gradient.
  virtual absl::Status SwiGluBackwardQuantize(const TensorDesc& grad_out, const TensorDesc& gate_up,
                                              const TensorDesc& dgu, const TensorDesc& dgu_t,
                                              Stream* stream) = 0;

  // ---- Fused linear + cross-entropy (the LM head) --------------------------
  // For x [T, H] bf16, weight [V, H] bf16, targets [T] int32:
  //   logits_t = weight · x_t (never materialised beyond one chunk of
  //   chunk_tokens x V), loss_t = logsumexp(logits_t) - logits_t[target_t].
  //   *loss_sum += sum of loss_t over valid tokens (target != ignore_index),
  //   summed in an order fixed by the shapes (the same bits on every run);
  //   *valid_tokens += count of valid tokens (fp32 scalar, exact to 2^24).
  //   grad_x [T, H] bf16 = d(sum loss)/dx (rows of ignored tokens are zero);
  //   grad_weight [V, H] fp32 = d(sum loss)/dweight, plus its old value when
  //   accumulate_grad_weight (gradient accumulation), built in place by one
  //   GEMM per chunk with bf16 operands and fp32 output: no [V, H] temporary.
  //   The first chunk's GEMM writes it (beta = 0) unless accumulating, so
  //   the caller needs no zeroing pass and the GEMM reads no old values;
  //   every later chunk adds (beta = 1). With no tokens and no
  //   accumulation, grad_weight is zeroed.
  // Loss only: when grad_x.data and grad_weight.data are both null (e.g.
  // default TensorDesc{} values) no gradient is computed or written: the
  // backward GEMMs are skipped, accumulate_grad_weight is ignored, and
  // *loss_sum and *valid_tokens get the same bits a full call would add.
  // Evaluation uses this, so it needs no gradient buffer. Exactly one of the
  // two null is INVALID_ARGUMENT.
  // Gradients are of the *sum* of token losses; the caller divides by the
  // global token count later (FusedAdam's grad_scale). A target outside
  // [0, V) other than ignore_index is INVALID_ARGUMENT (CPU) / sticky flag (CUDA).
  // The CUDA engine keeps each chunk's logits in bf16, as PyTorch's autocast
  // does, and writes the dlogits over them: its workspace is chunk_tokens x V
  // x 2 bytes. The CPU reference keeps fp32 logits.
  virtual absl::Status FusedLinearCrossEntropy(const TensorDesc& x, const TensorDesc& weight,
                                               const TensorDesc& targets, int ignore_index,
                                               int chunk_tokens, float* loss_sum,
                                               float* valid_tokens, const TensorDesc& grad_x,
                                               const TensorDesc& grad_weight,
                                               bool accumulate_grad_weight, Stream* stream) = 0;

  // ---- Optimizer ----------------------------------------------------------
  virtual absl::StatusOr<std::unique_ptr<AdamPlan>> CreateAdamPlan(
      absl::Span<const AdamShard> shards) = 0;
  // *sum_sq = sum over every shard of sum(grad^2) (fp32 scalar in engine
  // memory), for the global grad norm. One pass, all shards.
  virtual absl::Status GradSumSquares(const AdamPlan& plan, float* sum_sq, Stream* stream) = 0;
  // From the all-reduced sum of squares and token count, computes
  //   *grad_norm = sqrt(sum_sq) / tokens  (norm of the mean-loss gradient)
  //   *grad_scale = (1 / tokens) * min(1, max_norm / (*grad_norm + 1e-6))
  // (no clipping when max_norm <= 0). All four scalars in engine memory.
  virtual absl::Status ComputeGradScale(const float* sum_sq, const float* tokens, float max_norm,
                                        float* grad_norm, float* grad_scale, Stream* stream) = 0;
  // One pass over every shard: g = grad * *grad_scale; AdamW with bias
  // correction and decoupled weight decay updates master, m, v; then the FP8
  // (or bf16) shard is rewritten from the new master and its amax recorded.
  virtual absl::Status FusedAdam(const AdamPlan& plan, const AdamHyper& hyper,
                                 const float* grad_scale, Stream* stream) = 0;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_OPS_OPS_H_
