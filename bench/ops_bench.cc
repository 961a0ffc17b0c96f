// ops_bench: runs one of three Tessera ops through the Ops interface
// (worker/ops/ops.h) on inputs written by bench/ops_bench.py, writes the
// outputs back for that script to check against PyTorch and NumPy, then
// times the op. It exists so the FP8 GEMM, the optimizer and the fused loss
// can each be measured and verified alone, through the calls the trainer
// makes, without a training step around them.
//
// Usage:
//   ops_bench --op=fp8_gemm|fused_adam|fused_ce --dir=DIR [--shape=A,B,C]
//             [--engine=cuda|cpu] [--device=0] [--warmup=5] [--reps=20] [--inner=1]
//
// --op=fp8_gemm, --shape=M,N,K: Ops::Gemm with d [M, N] bf16 = a [M, K] e4m3
//   · b [N, K]ᵀ e4m3 × *a.scale_inv × *b.scale_inv (trans_a false, trans_b
//   true: the forward GEMM's layout). DIR: a.e4m3, b.e4m3, scale_inv.f32
//   (a's, then b's); receives d.bf16.
// --op=fused_adam: Ops::FusedAdam over parameters built as FsdpTrainer
//   builds them (CreateShardedParam, AsAdamShard, CreateAdamPlan). DIR/
//   adam.json names one (world, rank), the hyperparameters and two
//   parameter tables ([name, rows, cols, "e4m3"|"bf16", weight_decay]):
//   "check", small: its shards are loaded from DIR (master.f32, grad.f32,
//   exp_avg.f32, exp_avg_sq.f32, each the shards' elements concatenated in
//   table order; scale.f32 [params]), updated once, and written back
//   (master_out.f32, exp_avg_out.f32, exp_avg_sq_out.f32; compute_out.bin,
//   1 byte per e4m3 element or 2 per bf16 one; amax_out.f32 and
//   scale_inv_out.f32 [params]). "bench", large: filled on the device by
//   tiling the check inputs, then timed. Last, a device-to-device copy of
//   copy_bytes, timed the same way, gives the copy bandwidth.
// --op=fused_ce, --shape=N,H,V: Ops::FusedLinearCrossEntropy as the
//   training step calls it (grad_weight fp32, written by the op rather than
//   accumulated; ignore_index -100). DIR: hidden.bf16 [N, H], weight.bf16 [V, H],
//   targets.i32 [N]; receives grad_hidden.bf16, grad_weight.f32 and loss.f32
//   (loss_sum, valid_tokens). On the GPU it also reports the device memory
//   the first call added (the op's chunk buffers).
//
// Outputs are poisoned (0xFF bytes: NaN in every float format) before the
// checked run, so an element the engine failed to write cannot pass. Timing:
// cudaEvents on one stream (engine cuda) or the host clock (engine cpu, the
// reference engine, for dry runs); each repetition runs the op `inner` times
// between the two marks; `warmup` untimed repetitions, then the median (and
// minimum) of `reps`, divided by `inner`. Everything is allocated before the
// first run. Prints one JSON line on stdout; a failing CUDA or Ops call
// prints its status on stderr and the exit code is 1 (2 for bad usage).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/bench_engine.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/engine/cpu/cpu_ops.h"
#include "worker/engine/cuda/cuda_ops.h"
#include "worker/fsdp/fp8_sharded_param.h"
#include "worker/fsdp/shard_layout.h"
#include "worker/ops/device_tensor.h"
#include "worker/ops/ops.h"

ABSL_FLAG(std::string, op, "", "fp8_gemm, fused_adam or fused_ce");
ABSL_FLAG(std::string, dir, "", "directory with the op's input files; receives its outputs");
ABSL_FLAG(std::string, shape, "", "M,N,K (fp8_gemm) or N,H,V (fused_ce)");
ABSL_FLAG(std::string, engine, "cuda", "cuda (timed with cudaEvents) or cpu (reference engine)");
ABSL_FLAG(int, device, 0, "CUDA device index (engine cuda)");
ABSL_FLAG(int, warmup, 5, "untimed repetitions before each timed series");
ABSL_FLAG(int, reps, 20, "timed repetitions per series (0: only run once and write outputs)");
ABSL_FLAG(int, inner, 1, "op calls per timed repetition (for ops shorter than a launch gap)");
ABSL_FLAG(bool, ce_accumulate, false,
          "fused_ce: add to grad_weight (gradient accumulation) instead of writing it");
ABSL_FLAG(int, chunk_tokens, 1024, "fused_ce: tokens per logits chunk (the JobSpec default)");

namespace tessera {
namespace {

constexpr int kIgnoreIndex = -100;  // the trainer's (worker/data/batch_source.h)

// ---- Files ---------------------------------------------------------------------------------

// --shape: exactly `count` comma-separated integers >= 1.
absl::StatusOr<std::vector<int64_t>> ParseShape(const std::string& text, size_t count,
                                                const char* names) {
  std::vector<int64_t> dims;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v < 1) {
      dims.clear();
      break;
    }
    dims.push_back(v);
  }
  if (dims.size() != count) {
    return absl::InvalidArgumentError(
        absl::StrCat("--shape: expected ", names, " (integers >= 1), got '", text, "'"));
  }
  return dims;
}

// ---- Engine, stream and timing ---------------------------------------------------------------

// The shared bench engine plus this binary's repetition settings.
struct Engine : bench::BenchEngine {
  int warmup = 0, reps = 0, inner = 1;
};

absl::Status CreateEngine(Engine& e) {
  e.warmup = absl::GetFlag(FLAGS_warmup);
  e.reps = absl::GetFlag(FLAGS_reps);
  e.inner = absl::GetFlag(FLAGS_inner);
  if (e.warmup < 0 || e.reps < 0 || e.inner < 1) {
    return absl::InvalidArgumentError("--warmup and --reps must be >= 0, --inner >= 1");
  }
  return bench::CreateBenchEngine(absl::GetFlag(FLAGS_engine), absl::GetFlag(FLAGS_device), e);
}

using bench::ReadRaw;
using bench::Series;
using bench::WriteRaw;

// The series of `inner` op calls per repetition, per op call.
absl::StatusOr<Series> TimeSeries(Engine& e, const std::function<absl::Status()>& op) {
  const auto body = [&]() -> absl::Status {
    for (int i = 0; i < e.inner; ++i) RETURN_IF_ERROR(op());
    return absl::OkStatus();
  };
  ASSIGN_OR_RETURN(Series series, bench::TimeSeries(*e.timer, body, e.warmup, e.reps));
  RETURN_IF_ERROR(e.ops->Synchronize(e.s()));  // also reports the engine's device error flag
  series.median_ms /= e.inner;
  series.min_ms /= e.inner;
  return series;
}

void PutSeries(nlohmann::json& j, const std::string& name, const Series& s) {
  j[name + "_ms"] = s.median_ms;
  j[name + "_min_ms"] = s.min_ms;
}

// A zero-filled tensor, ready for the bench stream (AllocateTensor fills on
// the default stream, which a non-blocking stream does not wait for).
absl::StatusOr<DeviceTensor> Alloc(Engine& e, DType dtype, Shape shape) {
  ASSIGN_OR_RETURN(DeviceTensor t, AllocateTensor(*e.ops, dtype, shape));
  RETURN_IF_ERROR(e.ops->Synchronize(nullptr));
  return t;
}

absl::StatusOr<DeviceTensor> Upload(Engine& e, DType dtype, Shape shape,
                                    const std::vector<uint8_t>& host) {
  ASSIGN_OR_RETURN(DeviceTensor t, Alloc(e, dtype, shape));
  if (host.size() != t.desc.Bytes()) return absl::InternalError("Upload: size mismatch");
  RETURN_IF_ERROR(e.ops->CopyToDevice(t.desc.data, host.data(), host.size(), e.s()));
  return t;
}

absl::StatusOr<std::vector<uint8_t>> Download(Engine& e, const void* data, size_t bytes) {
  std::vector<uint8_t> host(bytes);
  RETURN_IF_ERROR(e.ops->CopyToHost(host.data(), data, bytes, e.s()));
  RETURN_IF_ERROR(e.ops->Synchronize(e.s()));
  return host;
}

absl::Status Poison(Engine& e, const TensorDesc& t) {
  return e.ops->Memset(t.data, 0xFF, t.Bytes(), e.s());
}

// Free device memory (engine cuda; 0 on the CPU engine), after the stream drains.
absl::StatusOr<size_t> FreeDeviceBytes(Engine& e) {
  RETURN_IF_ERROR(e.ops->Synchronize(e.s()));
  if (!e.cuda()) return size_t{0};
  size_t free_bytes = 0, total_bytes = 0;
  BENCH_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  return free_bytes;
}

// ---- fp8_gemm ---------------------------------------------------------------------------------

absl::StatusOr<nlohmann::json> RunFp8Gemm(Engine& e, const std::string& dir) {
  ASSIGN_OR_RETURN(const std::vector<int64_t> mnk,
                   ParseShape(absl::GetFlag(FLAGS_shape), 3, "M,N,K"));
  const int64_t m = mnk[0], n = mnk[1], k = mnk[2];
  ASSIGN_OR_RETURN(std::vector<uint8_t> a_host, ReadRaw(dir + "/a.e4m3", m * k));
  ASSIGN_OR_RETURN(std::vector<uint8_t> b_host, ReadRaw(dir + "/b.e4m3", n * k));
  ASSIGN_OR_RETURN(std::vector<uint8_t> scale_inv_host,
                   ReadRaw(dir + "/scale_inv.f32", 2 * sizeof(float)));
  ASSIGN_OR_RETURN(DeviceTensor a, Upload(e, DType::kE4M3, Shape{m, k}, a_host));  // [M, K] e4m3
  ASSIGN_OR_RETURN(DeviceTensor b, Upload(e, DType::kE4M3, Shape{n, k}, b_host));  // [N, K] e4m3
  ASSIGN_OR_RETURN(DeviceTensor scale_inv, Upload(e, DType::kFloat32, Shape{2}, scale_inv_host));
  ASSIGN_OR_RETURN(DeviceTensor d, Alloc(e, DType::kBFloat16, Shape{m, n}));  // [M, N] bf16
  a.desc.scale_inv = scale_inv.data<float>();
  b.desc.scale_inv = scale_inv.data<float>() + 1;
  const auto gemm = [&]() -> absl::Status {
    return e.ops->Gemm(a.desc, /*trans_a=*/false, b.desc, /*trans_b=*/true, d.desc,
                       /*accumulate=*/false, e.s());
  };

  RETURN_IF_ERROR(Poison(e, d.desc));
  RETURN_IF_ERROR(gemm());
  ASSIGN_OR_RETURN(std::vector<uint8_t> d_host, Download(e, d.desc.data, d.desc.Bytes()));
  RETURN_IF_ERROR(WriteRaw(dir + "/d.bf16", d_host));

  nlohmann::json r = {{"M", m}, {"N", n}, {"K", k}};
  if (e.reps > 0) {
    ASSIGN_OR_RETURN(const Series gemm_time, TimeSeries(e, gemm));
    PutSeries(r, "gemm", gemm_time);
    ASSIGN_OR_RETURN(std::vector<uint8_t> again, Download(e, d.desc.data, d.desc.Bytes()));
    r["repeat_bitwise_equal"] = again == d_host;
  }
  return r;
}

// ---- fused_adam -------------------------------------------------------------------------------

struct ParamSpec {
  std::string name;
  int64_t rows = 0, cols = 1;
  DType dtype = DType::kE4M3;
  bool decay = true;
};

struct AdamSetup {
  int world = 1, rank = 0;
  AdamHyper hyper;
  float grad_scale = 1.f, bench_scale = 1.f;
  int64_t copy_bytes = 0;
  std::vector<ParamSpec> check, bench;
};

absl::StatusOr<double> Number(const nlohmann::json& j, const std::string& key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number()) {
    return absl::InvalidArgumentError(absl::StrCat("adam.json: \"", key, "\" must be a number"));
  }
  return it->get<double>();
}

absl::StatusOr<std::vector<ParamSpec>> ParseTable(const nlohmann::json& j, const std::string& key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_array() || it->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("adam.json: \"", key, "\" must be a non-empty list"));
  }
  std::vector<ParamSpec> table;
  for (const nlohmann::json& row : *it) {
    const bool ok = row.is_array() && row.size() == 5 && row[0].is_string() &&
                    row[1].is_number_integer() && row[2].is_number_integer() &&
                    row[3].is_string() && row[4].is_boolean() && row[1].get<int64_t>() >= 1 &&
                    row[2].get<int64_t>() >= 1 && (row[3] == "e4m3" || row[3] == "bf16");
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("adam.json: \"", key,
                       "\" rows are [name, rows >= 1, cols >= 1, \"e4m3\"|\"bf16\", "
                       "weight_decay], got ",
                       row.dump()));
    }
    table.push_back({row[0].get<std::string>(), row[1].get<int64_t>(), row[2].get<int64_t>(),
                     row[3] == "e4m3" ? DType::kE4M3 : DType::kBFloat16, row[4].get<bool>()});
  }
  return table;
}

absl::StatusOr<AdamSetup> ReadAdamSetup(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  AdamSetup a;
  ASSIGN_OR_RETURN(const double world, Number(j, "world"));
  ASSIGN_OR_RETURN(const double rank, Number(j, "rank"));
  a.world = static_cast<int>(world);
  a.rank = static_cast<int>(rank);
  if (a.world < 1 || a.rank < 0 || a.rank >= a.world) {
    return absl::InvalidArgumentError("adam.json: need world >= 1 and 0 <= rank < world");
  }
  ASSIGN_OR_RETURN(const double lr, Number(j, "lr"));
  ASSIGN_OR_RETURN(const double beta1, Number(j, "beta1"));
  ASSIGN_OR_RETURN(const double beta2, Number(j, "beta2"));
  ASSIGN_OR_RETURN(const double eps, Number(j, "eps"));
  ASSIGN_OR_RETURN(const double weight_decay, Number(j, "weight_decay"));
  ASSIGN_OR_RETURN(const double step, Number(j, "step"));
  ASSIGN_OR_RETURN(const double grad_scale, Number(j, "grad_scale"));
  ASSIGN_OR_RETURN(const double bench_scale, Number(j, "bench_scale"));
  ASSIGN_OR_RETURN(const double copy_bytes, Number(j, "copy_bytes"));
  a.hyper.lr = static_cast<float>(lr);
  a.hyper.beta1 = static_cast<float>(beta1);
  a.hyper.beta2 = static_cast<float>(beta2);
  a.hyper.eps = static_cast<float>(eps);
  a.hyper.weight_decay = static_cast<float>(weight_decay);
  a.hyper.step = static_cast<int>(step);
  a.grad_scale = static_cast<float>(grad_scale);
  a.bench_scale = static_cast<float>(bench_scale);
  a.copy_bytes = static_cast<int64_t>(copy_bytes);
  if (a.hyper.step < 1 || a.copy_bytes < 1) {
    return absl::InvalidArgumentError("adam.json: need step >= 1 and copy_bytes >= 1");
  }
  ASSIGN_OR_RETURN(a.check, ParseTable(j, "check"));
  ASSIGN_OR_RETURN(a.bench, ParseTable(j, "bench"));
  return a;
}

// One table's parameters, built as FsdpTrainer::AllocateState builds them,
// their quantizer scalars and the AdamPlan over their shards.
struct ShardedSet {
  std::vector<Fp8ShardedParam> params;
  // [3 * params + 1] fp32: per parameter scale, scale_inv, amax (used by
  // the e4m3 ones), then the grad scale FusedAdam multiplies grads by.
  DeviceTensor scalars;
  std::unique_ptr<AdamPlan> plan;

  float* grad_scale() const { return scalars.data<float>() + 3 * params.size(); }
};

// scale_inv slots start as NaN (FusedAdam must publish 1/scale), amax as 0.
absl::StatusOr<ShardedSet> BuildShardedSet(Engine& e, const AdamSetup& setup,
                                           const std::vector<ParamSpec>& table,
                                           const std::vector<float>& scales) {
  ShardedSet set;
  const size_t n = table.size();
  ASSIGN_OR_RETURN(set.scalars, Alloc(e, DType::kFloat32, Shape{static_cast<int64_t>(3 * n + 1)}));
  std::vector<float> host(3 * n + 1, 0.f);
  for (size_t i = 0; i < n; ++i) {
    const ParamSpec& p = table[i];
    ASSIGN_OR_RETURN(Fp8ShardedParam param,
                     CreateShardedParam(*e.ops, p.name, p.rows, p.cols, p.dtype, p.decay,
                                        setup.rank, setup.world));
    if (param.is_fp8()) {
      param.scale = set.scalars.data<float>() + 3 * i;
      param.scale_inv = param.scale + 1;
      param.amax = param.scale + 2;
    }
    host[3 * i] = scales[i];
    host[3 * i + 1] = std::numeric_limits<float>::quiet_NaN();
    set.params.push_back(std::move(param));
  }
  host[3 * n] = setup.grad_scale;
  RETURN_IF_ERROR(e.ops->Synchronize(nullptr));  // CreateShardedParam zero-fills there
  RETURN_IF_ERROR(
      e.ops->CopyToDevice(set.scalars.desc.data, host.data(), host.size() * sizeof(float), e.s()));
  for (const Fp8ShardedParam& p : set.params) RETURN_IF_ERROR(Poison(e, p.compute.desc));
  std::vector<AdamShard> shards;
  for (const Fp8ShardedParam& p : set.params) shards.push_back(p.AsAdamShard());
  ASSIGN_OR_RETURN(set.plan, e.ops->CreateAdamPlan(shards));
  return set;
}

// The four fp32 arrays FusedAdam reads, in AdamShard order.
std::vector<const DeviceTensor*> StateArrays(const Fp8ShardedParam& p) {
  return {&p.master, &p.grad_shard, &p.exp_avg, &p.exp_avg_sq};
}
const char* const kStateFiles[4] = {"master", "grad", "exp_avg", "exp_avg_sq"};

nlohmann::json DescribeSet(const ShardedSet& set) {
  int64_t fp8 = 0, bf16 = 0, empty = 0, not_quad = 0;
  for (const Fp8ShardedParam& p : set.params) {
    const int64_t n = p.layout.shard_numel();
    (p.is_fp8() ? fp8 : bf16) += n;
    empty += n == 0;
    not_quad += n % 4 != 0;
  }
  return {{"shards", set.params.size()},
          {"fp8_elements", fp8},
          {"bf16_elements", bf16},
          {"empty_shards", empty},
          {"shards_not_multiple_of_4", not_quad}};
}

// dst[0, bytes) = pattern repeated (device-to-device copies).
absl::Status Tile(Engine& e, void* dst, size_t bytes, const DeviceTensor& pattern) {
  const size_t step = pattern.desc.Bytes();
  for (size_t off = 0; off < bytes; off += step) {
    RETURN_IF_ERROR(e.ops->CopyDeviceToDevice(static_cast<uint8_t*>(dst) + off, pattern.desc.data,
                                              std::min(step, bytes - off), e.s()));
  }
  return absl::OkStatus();
}

// The check instance: shards loaded from DIR, one FusedAdam, every output
// written back. `inputs` are the four state files, kept as the bench's pattern.
absl::Status RunAdamCheck(Engine& e, const AdamSetup& setup, const std::string& dir,
                          const std::vector<std::vector<uint8_t>>& inputs, nlohmann::json& r) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> scale_bytes,
                   ReadRaw(dir + "/scale.f32", setup.check.size() * sizeof(float)));
  std::vector<float> scales(setup.check.size());
  std::copy_n(scale_bytes.data(), scale_bytes.size(), reinterpret_cast<uint8_t*>(scales.data()));
  ASSIGN_OR_RETURN(ShardedSet set, BuildShardedSet(e, setup, setup.check, scales));
  size_t offset = 0;  // elements
  std::vector<int64_t> numel;
  for (const Fp8ShardedParam& p : set.params) {
    const size_t n = p.layout.shard_numel();
    const std::vector<const DeviceTensor*> arrays = StateArrays(p);
    for (int a = 0; a < 4; ++a) {
      RETURN_IF_ERROR(e.ops->CopyToDevice(arrays[a]->desc.data, inputs[a].data() + offset * 4,
                                          n * sizeof(float), e.s()));
    }
    offset += n;
    numel.push_back(static_cast<int64_t>(n));
  }
  RETURN_IF_ERROR(e.ops->FusedAdam(*set.plan, setup.hyper, set.grad_scale(), e.s()));
  RETURN_IF_ERROR(e.ops->Synchronize(e.s()));

  std::vector<uint8_t> master, exp_avg, exp_avg_sq, compute;
  for (const Fp8ShardedParam& p : set.params) {
    const size_t n = p.layout.shard_numel();
    for (auto [t, out] :
         {std::make_pair(&p.master, &master), std::make_pair(&p.exp_avg, &exp_avg),
          std::make_pair(&p.exp_avg_sq, &exp_avg_sq), std::make_pair(&p.compute, &compute)}) {
      ASSIGN_OR_RETURN(std::vector<uint8_t> part,
                       Download(e, t->desc.data, n * DTypeSize(t->desc.dtype)));
      out->insert(out->end(), part.begin(), part.end());
    }
  }
  ASSIGN_OR_RETURN(std::vector<uint8_t> scalars,
                   Download(e, set.scalars.desc.data, set.scalars.desc.Bytes()));
  const float* s = reinterpret_cast<const float*>(scalars.data());
  std::vector<float> amax, scale_inv;
  for (size_t i = 0; i < set.params.size(); ++i) {
    scale_inv.push_back(s[3 * i + 1]);
    amax.push_back(s[3 * i + 2]);
  }
  RETURN_IF_ERROR(WriteRaw(dir + "/master_out.f32", master));
  RETURN_IF_ERROR(WriteRaw(dir + "/exp_avg_out.f32", exp_avg));
  RETURN_IF_ERROR(WriteRaw(dir + "/exp_avg_sq_out.f32", exp_avg_sq));
  RETURN_IF_ERROR(WriteRaw(dir + "/compute_out.bin", compute));
  RETURN_IF_ERROR(WriteRaw(dir + "/amax_out.f32", amax.data(), amax.size() * sizeof(float)));
  RETURN_IF_ERROR(
      WriteRaw(dir + "/scale_inv_out.f32", scale_inv.data(), scale_inv.size() * sizeof(float)));
  r["check"] = DescribeSet(set);
  r["check"]["shard_numel"] = numel;
  return absl::OkStatus();
}

// The bench instance: every shard filled by tiling the check inputs, then
// FusedAdam timed; then a device copy of copy_bytes timed the same way.
absl::Status RunAdamBench(Engine& e, const AdamSetup& setup,
                          const std::vector<std::vector<uint8_t>>& inputs, int64_t pattern_elems,
                          nlohmann::json& r) {
  ASSIGN_OR_RETURN(ShardedSet set,
                   BuildShardedSet(e, setup, setup.bench,
                                   std::vector<float>(setup.bench.size(), setup.bench_scale)));
  {
    std::vector<DeviceTensor> patterns;
    for (const std::vector<uint8_t>& data : inputs) {
      ASSIGN_OR_RETURN(DeviceTensor t, Upload(e, DType::kFloat32, Shape{pattern_elems}, data));
      patterns.push_back(std::move(t));
    }
    for (const Fp8ShardedParam& p : set.params) {
      const std::vector<const DeviceTensor*> arrays = StateArrays(p);
      for (int a = 0; a < 4; ++a) {
        RETURN_IF_ERROR(
            Tile(e, arrays[a]->desc.data, p.layout.shard_numel() * sizeof(float), patterns[a]));
      }
    }
    RETURN_IF_ERROR(e.ops->Synchronize(e.s()));
  }
  r["bench"] = DescribeSet(set);
  const auto adam = [&]() -> absl::Status {
    return e.ops->FusedAdam(*set.plan, setup.hyper, set.grad_scale(), e.s());
  };
  ASSIGN_OR_RETURN(const Series adam_time, TimeSeries(e, adam));
  PutSeries(r, "adam", adam_time);

  ASSIGN_OR_RETURN(DeviceTensor src, Alloc(e, DType::kUInt8, Shape{setup.copy_bytes}));
  ASSIGN_OR_RETURN(DeviceTensor dst, Alloc(e, DType::kUInt8, Shape{setup.copy_bytes}));
  const auto copy = [&]() -> absl::Status {
    return e.ops->CopyDeviceToDevice(dst.desc.data, src.desc.data, setup.copy_bytes, e.s());
  };
  ASSIGN_OR_RETURN(const Series copy_time, TimeSeries(e, copy));
  r["copy_bytes"] = setup.copy_bytes;
  PutSeries(r, "copy", copy_time);
  return absl::OkStatus();
}

absl::StatusOr<nlohmann::json> RunFusedAdam(Engine& e, const std::string& dir) {
  ASSIGN_OR_RETURN(const AdamSetup setup, ReadAdamSetup(dir + "/adam.json"));
  int64_t check_elems = 0;
  for (const ParamSpec& p : setup.check) {
    check_elems += ShardLayout{p.rows, p.cols, setup.world, setup.rank}.shard_numel();
  }
  if (check_elems == 0) {
    return absl::InvalidArgumentError("adam.json: the check shards are all empty");
  }
  std::vector<std::vector<uint8_t>> inputs;  // in StateArrays order
  for (const char* name : kStateFiles) {
    ASSIGN_OR_RETURN(std::vector<uint8_t> data,
                     ReadRaw(absl::StrCat(dir, "/", name, ".f32"), check_elems * sizeof(float)));
    inputs.push_back(std::move(data));
  }
  nlohmann::json r = {{"world", setup.world}, {"rank", setup.rank}};
  RETURN_IF_ERROR(RunAdamCheck(e, setup, dir, inputs, r));
  if (e.reps > 0) RETURN_IF_ERROR(RunAdamBench(e, setup, inputs, check_elems, r));
  return r;
}

// ---- fused_ce ---------------------------------------------------------------------------------

// Where the fused loss's time goes: one chunk's three GEMMs, each timed
// alone through Ops::Gemm on the shapes and layouts the op uses (logits =
// x_c · Wᵀ in bf16; grad_x_c = dlogits · W; grad_weight += dlogitsᵀ · x_c
// in fp32). The rest of a chunk's time is its row kernel. Runs after the
// checked and timed calls, on a logits buffer of its own.
absl::Status TimeFusedCeGemms(Engine& e, const TensorDesc& hidden, const TensorDesc& weight,
                              const TensorDesc& grad_hidden, const TensorDesc& grad_weight,
                              int64_t chunk, nlohmann::json& r) {
  const int64_t h = hidden.shape[1], v = weight.shape[0];
  ASSIGN_OR_RETURN(DeviceTensor logits, Alloc(e, DType::kBFloat16, Shape{chunk, v}));
  const TensorDesc xc = MakeTensor(hidden.data, DType::kBFloat16, Shape{chunk, h});
  const TensorDesc gxc = MakeTensor(grad_hidden.data, DType::kBFloat16, Shape{chunk, h});
  RETURN_IF_ERROR(Poison(e, logits.desc));
  RETURN_IF_ERROR(e.ops->Gemm(xc, false, weight, true, logits.desc, false, e.s()));  // finite dlogits stand-in
  const std::vector<std::pair<const char*, std::function<absl::Status()>>> gemms = {
      {"logits", [&] { return e.ops->Gemm(xc, false, weight, true, logits.desc, false, e.s()); }},
      {"grad_x", [&] { return e.ops->Gemm(logits.desc, false, weight, false, gxc, false, e.s()); }},
      {"grad_weight", [&] { return e.ops->Gemm(logits.desc, true, xc, false, grad_weight, true, e.s()); }},
  };
  nlohmann::json phases;
  for (const auto& [name, gemm] : gemms) {
    ASSIGN_OR_RETURN(const Series t, TimeSeries(e, gemm));
    phases[name] = t.median_ms;
  }
  r["chunk_gemm_ms"] = phases;
  return absl::OkStatus();
}

absl::StatusOr<nlohmann::json> RunFusedCe(Engine& e, const std::string& dir) {
  ASSIGN_OR_RETURN(const std::vector<int64_t> nhv,
                   ParseShape(absl::GetFlag(FLAGS_shape), 3, "N,H,V"));
  const int64_t n = nhv[0], h = nhv[1], v = nhv[2];
  const int chunk_tokens = absl::GetFlag(FLAGS_chunk_tokens);
  ASSIGN_OR_RETURN(std::vector<uint8_t> hidden_host, ReadRaw(dir + "/hidden.bf16", n * h * 2));
  ASSIGN_OR_RETURN(std::vector<uint8_t> weight_host, ReadRaw(dir + "/weight.bf16", v * h * 2));
  ASSIGN_OR_RETURN(std::vector<uint8_t> targets_host, ReadRaw(dir + "/targets.i32", n * 4));
  ASSIGN_OR_RETURN(DeviceTensor hidden,
                   Upload(e, DType::kBFloat16, Shape{n, h}, hidden_host));  // [N, H]
  ASSIGN_OR_RETURN(DeviceTensor weight,
                   Upload(e, DType::kBFloat16, Shape{v, h}, weight_host));  // [V, H]
  ASSIGN_OR_RETURN(DeviceTensor targets, Upload(e, DType::kInt32, Shape{n}, targets_host));
  ASSIGN_OR_RETURN(DeviceTensor grad_hidden, Alloc(e, DType::kBFloat16, Shape{n, h}));
  ASSIGN_OR_RETURN(DeviceTensor grad_weight, Alloc(e, DType::kFloat32, Shape{v, h}));  // fp32
  ASSIGN_OR_RETURN(DeviceTensor scalars, Alloc(e, DType::kFloat32, Shape{2}));  // loss_sum, valid
  const auto loss = [&]() -> absl::Status {
    return e.ops->FusedLinearCrossEntropy(
        hidden.desc, weight.desc, targets.desc, kIgnoreIndex, chunk_tokens, scalars.data<float>(),
        scalars.data<float>() + 1, grad_hidden.desc, grad_weight.desc,
        absl::GetFlag(FLAGS_ce_accumulate), e.s());
  };

  // The checked run, as the step runs it: grad_weight written, not added to
  // (so it is poisoned first, like grad_hidden); zeroed when accumulating.
  RETURN_IF_ERROR(Poison(e, grad_hidden.desc));
  if (absl::GetFlag(FLAGS_ce_accumulate)) {
    RETURN_IF_ERROR(e.ops->Memset(grad_weight.desc.data, 0, grad_weight.desc.Bytes(), e.s()));
  } else {
    RETURN_IF_ERROR(Poison(e, grad_weight.desc));
  }
  ASSIGN_OR_RETURN(const size_t free_before, FreeDeviceBytes(e));
  RETURN_IF_ERROR(loss());
  ASSIGN_OR_RETURN(const size_t free_after, FreeDeviceBytes(e));
  ASSIGN_OR_RETURN(std::vector<uint8_t> grad_hidden_out,
                   Download(e, grad_hidden.desc.data, grad_hidden.desc.Bytes()));
  ASSIGN_OR_RETURN(std::vector<uint8_t> grad_weight_out,
                   Download(e, grad_weight.desc.data, grad_weight.desc.Bytes()));
  ASSIGN_OR_RETURN(std::vector<uint8_t> scalars_out,
                   Download(e, scalars.desc.data, scalars.desc.Bytes()));
  RETURN_IF_ERROR(WriteRaw(dir + "/grad_hidden.bf16", grad_hidden_out));
  RETURN_IF_ERROR(WriteRaw(dir + "/grad_weight.f32", grad_weight_out));
  RETURN_IF_ERROR(WriteRaw(dir + "/loss.f32", scalars_out));

  // cuda_ops.cc sizes the op's one chunk buffer as chunk x V bf16 logits
  // (the dlogits are written over them); the cuBLASLt workspace is the
  // engine's own.
  const int64_t chunk = std::min<int64_t>(chunk_tokens, n);
  nlohmann::json r = {{"N", n},
                      {"H", h},
                      {"V", v},
                      {"chunk_tokens", chunk_tokens},
                      {"accumulate_grad_weight", absl::GetFlag(FLAGS_ce_accumulate)},
                      {"workspace_bytes_sized", chunk * v * 2}};
  if (e.cuda()) {  // also counts kernel code the first call loaded (lazy module loading)
    r["workspace_bytes_measured"] =
        static_cast<int64_t>(free_before) - static_cast<int64_t>(free_after);
  }
  if (e.reps > 0) {
    // Timed as the step calls it: grad_weight rewritten, the scalars adding up.
    ASSIGN_OR_RETURN(const Series loss_time, TimeSeries(e, loss));
    PutSeries(r, "fused_ce", loss_time);
    ASSIGN_OR_RETURN(std::vector<uint8_t> again,
                     Download(e, grad_hidden.desc.data, grad_hidden.desc.Bytes()));
    r["repeat_bitwise_equal"] = again == grad_hidden_out;
    RETURN_IF_ERROR(TimeFusedCeGemms(e, hidden.desc, weight.desc, grad_hidden.desc,
                                     grad_weight.desc, chunk, r));
  }
  return r;
}

absl::Status Run() {
  const std::string op = absl::GetFlag(FLAGS_op), dir = absl::GetFlag(FLAGS_dir);
  Engine e;
  RETURN_IF_ERROR(CreateEngine(e));
  absl::StatusOr<nlohmann::json> r;
  if (op == "fp8_gemm") {
    r = RunFp8Gemm(e, dir);
  } else if (op == "fused_adam") {
    r = RunFusedAdam(e, dir);
  } else if (op == "fused_ce") {
    r = RunFusedCe(e, dir);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--op: fp8_gemm, fused_adam or fused_ce, got '", op, "'"));
  }
  if (!r.ok()) return r.status();
  nlohmann::json line = {{"op", op},
                         {"engine", e.name},
                         {"device", e.device_name},
                         {"clock", e.cuda() ? "cudaEvent" : "host"},
                         {"warmup", e.warmup},
                         {"reps", e.reps},
                         {"inner", e.inner}};
  line.update(*r);
  std::cout << line.dump() << std::endl;
  return absl::OkStatus();
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_op).empty() || absl::GetFlag(FLAGS_dir).empty()) {
    std::cerr << "usage: ops_bench --op=fp8_gemm|fused_adam|fused_ce --dir=DIR [--shape=A,B,C] "
                 "[--engine=cuda|cpu] [--device=0] [--warmup=5] [--reps=20] [--inner=1]\n";
    return 2;
  }
  const absl::Status status = tessera::Run();
  if (!status.ok()) {
    std::cerr << "ops_bench: error: " << status << "\n";
    return 1;
  }
  return 0;
}
