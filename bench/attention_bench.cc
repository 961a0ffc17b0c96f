// attention_bench: runs Tessera's causal grouped-query attention
// (Ops::AttentionForward and Ops::AttentionBackward, worker/ops/ops.h) on
// inputs written by bench/attention_bench.py, writes the outputs back for
// that script to check against PyTorch, then times forward alone and
// forward + backward. It exists so the attention kernels can be measured
// and verified through the same Ops interface the trainer calls, without
// the rest of a training step around them.
//
// Usage:
//   attention_bench --dir=DIR [--engine=cuda|cpu] [--device=0] [--warmup=5] [--reps=20]
//
// DIR holds (all raw little-endian, row-major):
//   meta.json      {"B": .., "S": .., "nh": .., "nkv": .., "hd": ..}
//   qkv.bf16       [B, S, nh + 2*nkv, hd] bf16: per token nh query heads,
//                  then nkv key heads, then nkv value heads
//   grad_out.bf16  [B, S, nh, hd] bf16
// and receives out.bf16 [B, S, nh, hd], lse.f32 [B, nh, S] and
// grad_qkv.bf16 [B, S, nh + 2*nkv, hd] from one forward + backward run.
// Outputs are poisoned (0xFF bytes, NaN) before that run, so an element the
// engine failed to write shows up as NaN in the comparison.
//
// Timing (engine cuda): cudaEvents recorded on one stream around each
// repetition; `warmup` untimed repetitions, then the median (and minimum)
// of `reps`. Engine cpu (the reference engine, for dry runs without a GPU)
// times with the host clock. Everything is allocated through Ops::Allocate
// before the first run; the timed loops only launch. Prints one JSON line
// on stdout; any failing CUDA or Ops call prints its status on stderr and
// the exit code is 1 (2 for bad usage).
//
// --documents=N (N >= 1 dividing S) adds document masking: each sequence is
// read as N packed documents of S/N tokens. The masked run's outputs are
// checked against the same attention run on the documents as separate
// sequences (shape [B*N, S/N], the same qkv and grad_out memory read with
// that shape), and both are timed: "documents" in the JSON line gives their
// times and the largest relative L2 difference of out, lse and grad_qkv.
// The masked run passes the host's count of its documents, as the trainer
// does, so the CUDA engine may run them as cuDNN's ragged batch.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "bench/bench_engine.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/engine/cpu/bf16.h"
#include "worker/engine/cuda/cudnn_attention.h"
#include "worker/ops/device_tensor.h"
#include "worker/ops/ops.h"

ABSL_FLAG(std::string, dir, "", "directory with meta.json, qkv.bf16 and grad_out.bf16");
ABSL_FLAG(std::string, engine, "cuda", "cuda (timed with cudaEvents) or cpu (reference engine)");
ABSL_FLAG(int, device, 0, "CUDA device index (engine cuda)");
ABSL_FLAG(int, warmup, 5, "untimed repetitions before each timed series");
ABSL_FLAG(int, reps, 20, "timed repetitions per series (0: only run once and write outputs)");
ABSL_FLAG(int, documents, 0,
          "also run with each sequence packed with this many equal documents (S a multiple)");

namespace tessera {
namespace {

struct Dims {
  int64_t batch = 0, seq = 0, heads = 0, kv_heads = 0, head_dim = 0;
  Shape Qkv() const { return Shape{batch, seq, heads + 2 * kv_heads, head_dim}; }
  Shape Out() const { return Shape{batch, seq, heads, head_dim}; }
  Shape Lse() const { return Shape{batch, heads, seq}; }
};

absl::StatusOr<Dims> ReadMeta(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  auto get = [&](const char* key, int64_t* value) -> absl::Status {
    if (!j.contains(key) || !j[key].is_number_integer() || j[key].get<int64_t>() < 1) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": \"", key, "\" must be an integer >= 1"));
    }
    *value = j[key].get<int64_t>();
    return absl::OkStatus();
  };
  Dims d;
  RETURN_IF_ERROR(get("B", &d.batch));
  RETURN_IF_ERROR(get("S", &d.seq));
  RETURN_IF_ERROR(get("nh", &d.heads));
  RETURN_IF_ERROR(get("nkv", &d.kv_heads));
  RETURN_IF_ERROR(get("hd", &d.head_dim));
  if (d.heads % d.kv_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": nkv (", d.kv_heads, ") must divide nh (", d.heads, ")"));
  }
  return d;
}

absl::StatusOr<std::vector<uint8_t>> Download(Ops& ops, const TensorDesc& t, Stream* stream) {
  std::vector<uint8_t> host(t.Bytes());
  RETURN_IF_ERROR(ops.CopyToHost(host.data(), t.data, host.size(), stream));
  RETURN_IF_ERROR(ops.Synchronize(stream));
  return host;
}

double RelativeL2(const std::vector<double>& got, const std::vector<double>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

std::vector<double> Bf16ToDoubles(const std::vector<uint8_t>& bytes) {
  std::vector<double> v(bytes.size() / 2);
  for (size_t i = 0; i < v.size(); ++i) {
    uint16_t bits;
    std::memcpy(&bits, bytes.data() + 2 * i, sizeof(bits));
    v[i] = cpu::Bf16ToFloat(bits);
  }
  return v;
}

// lse [B, nh, S] read as that of [B*N, nh, S/N]: element (b, h, n*L + i)
// of the packed run is element (b*N + n, h, i) of the separate one.
std::vector<double> LseAsSeparate(const std::vector<uint8_t>& bytes, const Dims& d, int n) {
  const int64_t length = d.seq / n;
  std::vector<float> packed(bytes.size() / 4);
  std::memcpy(packed.data(), bytes.data(), bytes.size());
  std::vector<double> out(packed.size());
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t h = 0; h < d.heads; ++h) {
      for (int64_t t = 0; t < d.seq; ++t) {
        const int64_t doc = t / length, i = t % length;
        out[((b * n + doc) * d.heads + h) * length + i] = packed[(b * d.heads + h) * d.seq + t];
      }
    }
  }
  return out;
}

// The --documents run (see the file comment). Returns its JSON object.
absl::StatusOr<nlohmann::json> RunDocuments(Ops& ops, bench::RepTimer& timer, Stream* s,
                                            const Dims& d, int n, const TensorDesc& qkv,
                                            const TensorDesc& grad_out, int warmup, int reps) {
  if (d.seq % n != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--documents=", n, " must divide S = ", d.seq));
  }
  const int64_t length = d.seq / n;
  const Dims separate{d.batch * n, length, d.heads, d.kv_heads, d.head_dim};
  const int nkv = static_cast<int>(d.kv_heads);
  std::vector<int32_t> starts(d.batch * d.seq);
  for (int64_t i = 0; i < d.batch * d.seq; ++i) {
    starts[i] = static_cast<int32_t>(i % d.seq / length * length);
  }
  ASSIGN_OR_RETURN(DeviceTensor doc_starts, AllocateTensor(ops, DType::kInt32, Shape{d.batch, d.seq}));
  ASSIGN_OR_RETURN(DeviceTensor out, AllocateTensor(ops, DType::kBFloat16, d.Out()));
  ASSIGN_OR_RETURN(DeviceTensor lse, AllocateTensor(ops, DType::kFloat32, d.Lse()));
  ASSIGN_OR_RETURN(DeviceTensor grad_qkv, AllocateTensor(ops, DType::kBFloat16, d.Qkv()));
  ASSIGN_OR_RETURN(DeviceTensor sep_out, AllocateTensor(ops, DType::kBFloat16, separate.Out()));
  ASSIGN_OR_RETURN(DeviceTensor sep_lse, AllocateTensor(ops, DType::kFloat32, separate.Lse()));
  ASSIGN_OR_RETURN(DeviceTensor sep_grad, AllocateTensor(ops, DType::kBFloat16, separate.Qkv()));
  RETURN_IF_ERROR(ops.Synchronize(nullptr));
  RETURN_IF_ERROR(ops.CopyToDevice(doc_starts.desc.data, starts.data(), starts.size() * 4, s));
  for (const DeviceTensor* t : {&out, &lse, &grad_qkv, &sep_out, &sep_lse, &sep_grad}) {
    RETURN_IF_ERROR(ops.Memset(t->desc.data, 0xFF, t->desc.Bytes(), s));
  }
  TensorDesc sep_qkv = qkv, sep_dout = grad_out;
  sep_qkv.shape = separate.Qkv();
  sep_dout.shape = separate.Out();

  // As the trainer passes them: the starts with the host's count.
  const DocumentCounts counts = CountDocuments(starts, d.seq);
  const AttentionDocuments documents(doc_starts.desc, counts);
  const auto packed_forward = [&]() -> absl::Status {
    return ops.AttentionForward(qkv, nkv, documents, out.desc, lse.desc, s);
  };
  const auto packed_forward_backward = [&]() -> absl::Status {
    RETURN_IF_ERROR(packed_forward());
    return ops.AttentionBackward(grad_out, qkv, nkv, documents, out.desc, lse.desc,
                                 grad_qkv.desc, s);
  };
  const auto separate_forward = [&]() -> absl::Status {
    return ops.AttentionForward(sep_qkv, nkv, Ops::WholeSequences(), sep_out.desc, sep_lse.desc, s);
  };
  const auto separate_forward_backward = [&]() -> absl::Status {
    RETURN_IF_ERROR(separate_forward());
    return ops.AttentionBackward(sep_dout, sep_qkv, nkv, Ops::WholeSequences(), sep_out.desc,
                                 sep_lse.desc, sep_grad.desc, s);
  };
  RETURN_IF_ERROR(packed_forward_backward());
  RETURN_IF_ERROR(separate_forward_backward());
  RETURN_IF_ERROR(ops.Synchronize(s));
  ASSIGN_OR_RETURN(std::vector<uint8_t> o, Download(ops, out.desc, s));
  ASSIGN_OR_RETURN(std::vector<uint8_t> so, Download(ops, sep_out.desc, s));
  ASSIGN_OR_RETURN(std::vector<uint8_t> l, Download(ops, lse.desc, s));
  ASSIGN_OR_RETURN(std::vector<uint8_t> sl, Download(ops, sep_lse.desc, s));
  ASSIGN_OR_RETURN(std::vector<uint8_t> g, Download(ops, grad_qkv.desc, s));
  ASSIGN_OR_RETURN(std::vector<uint8_t> sg, Download(ops, sep_grad.desc, s));
  std::vector<float> sl_float(sl.size() / 4);
  std::memcpy(sl_float.data(), sl.data(), sl.size());
  nlohmann::json r = {
      {"documents", n},
      {"length", length},
      {"bitwise_equal_to_separate", o == so && g == sg},
      {"rel_l2_vs_separate",
       {{"out", RelativeL2(Bf16ToDoubles(o), Bf16ToDoubles(so))},
        {"lse", RelativeL2(LseAsSeparate(l, d, n), std::vector<double>(sl_float.begin(), sl_float.end()))},
        {"grad_qkv", RelativeL2(Bf16ToDoubles(g), Bf16ToDoubles(sg))}}}};
  if (reps > 0) {
    ASSIGN_OR_RETURN(const bench::Series pf, bench::TimeSeries(timer, packed_forward, warmup, reps));
    ASSIGN_OR_RETURN(const bench::Series pfb,
                     bench::TimeSeries(timer, packed_forward_backward, warmup, reps));
    ASSIGN_OR_RETURN(const bench::Series sf, bench::TimeSeries(timer, separate_forward, warmup, reps));
    ASSIGN_OR_RETURN(const bench::Series sfb,
                     bench::TimeSeries(timer, separate_forward_backward, warmup, reps));
    RETURN_IF_ERROR(ops.Synchronize(s));
    r["fwd_ms"] = pf.median_ms;
    r["fwdbwd_ms"] = pfb.median_ms;
    r["separate_fwd_ms"] = sf.median_ms;
    r["separate_fwdbwd_ms"] = sfb.median_ms;
  }
  return r;
}

absl::Status Run() {
  const std::string dir = absl::GetFlag(FLAGS_dir);
  const std::string engine = absl::GetFlag(FLAGS_engine);
  const int device = absl::GetFlag(FLAGS_device);
  const int warmup = absl::GetFlag(FLAGS_warmup), reps = absl::GetFlag(FLAGS_reps);
  if (warmup < 0 || reps < 0) return absl::InvalidArgumentError("--warmup and --reps must be >= 0");

  ASSIGN_OR_RETURN(const Dims d, ReadMeta(dir + "/meta.json"));
  const auto bytes = [](DType t, const Shape& s) {
    return static_cast<size_t>(s.NumElements()) * DTypeSize(t);
  };
  ASSIGN_OR_RETURN(std::vector<uint8_t> qkv_host,
                   bench::ReadRaw(dir + "/qkv.bf16", bytes(DType::kBFloat16, d.Qkv())));
  ASSIGN_OR_RETURN(std::vector<uint8_t> grad_out_host,
                   bench::ReadRaw(dir + "/grad_out.bf16", bytes(DType::kBFloat16, d.Out())));

  // ---- Setup: engine, stream, timer, every buffer ----
  bench::BenchEngine e;
  RETURN_IF_ERROR(bench::CreateBenchEngine(engine, device, e));
  Ops* ops = e.ops.get();
  const std::string& device_name = e.device_name;
  Stream* s = e.s();
  const int nkv = static_cast<int>(d.kv_heads);
  ASSIGN_OR_RETURN(DeviceTensor qkv, AllocateTensor(*ops, DType::kBFloat16, d.Qkv()));
  ASSIGN_OR_RETURN(DeviceTensor grad_out, AllocateTensor(*ops, DType::kBFloat16, d.Out()));
  ASSIGN_OR_RETURN(DeviceTensor out, AllocateTensor(*ops, DType::kBFloat16, d.Out()));
  ASSIGN_OR_RETURN(DeviceTensor lse, AllocateTensor(*ops, DType::kFloat32, d.Lse()));
  ASSIGN_OR_RETURN(DeviceTensor grad_qkv, AllocateTensor(*ops, DType::kBFloat16, d.Qkv()));
  RETURN_IF_ERROR(ops->Synchronize(nullptr));  // AllocateTensor zero-fills on the default stream
  RETURN_IF_ERROR(ops->CopyToDevice(qkv.desc.data, qkv_host.data(), qkv_host.size(), s));
  RETURN_IF_ERROR(ops->CopyToDevice(grad_out.desc.data, grad_out_host.data(), grad_out_host.size(), s));
  for (const DeviceTensor* t : {&out, &lse, &grad_qkv}) {
    RETURN_IF_ERROR(ops->Memset(t->desc.data, 0xFF, t->desc.Bytes(), s));
  }

  const auto forward = [&]() -> absl::Status {
    return ops->AttentionForward(qkv.desc, nkv, Ops::WholeSequences(), out.desc, lse.desc, s);
  };
  const auto forward_backward = [&]() -> absl::Status {
    RETURN_IF_ERROR(forward());
    return ops->AttentionBackward(grad_out.desc, qkv.desc, nkv, Ops::WholeSequences(), out.desc, lse.desc,
                                  grad_qkv.desc, s);
  };

  // ---- One checked run; its outputs go to DIR for the Python comparison ----
  RETURN_IF_ERROR(forward_backward());
  RETURN_IF_ERROR(ops->Synchronize(s));
  ASSIGN_OR_RETURN(std::vector<uint8_t> out_host, Download(*ops, out.desc, s));
  ASSIGN_OR_RETURN(std::vector<uint8_t> lse_host, Download(*ops, lse.desc, s));
  ASSIGN_OR_RETURN(std::vector<uint8_t> grad_qkv_host, Download(*ops, grad_qkv.desc, s));
  RETURN_IF_ERROR(bench::WriteRaw(dir + "/out.bf16", out_host));
  RETURN_IF_ERROR(bench::WriteRaw(dir + "/lse.f32", lse_host));
  RETURN_IF_ERROR(bench::WriteRaw(dir + "/grad_qkv.bf16", grad_qkv_host));

  nlohmann::json result = {{"engine", engine}, {"device", device_name},
                           {"B", d.batch}, {"S", d.seq}, {"nh", d.heads},
                           {"nkv", d.kv_heads}, {"hd", d.head_dim}};
  // The cuDNN this process loaded (the soname libcudnn.so.9 resolves
  // through the library path, so the same binary can run another 9.x).
  if (engine == "cuda") result["cudnn_version"] = cuda::CudnnAttention::Version();
  if (reps > 0) {
    // ---- Timing: forward alone, then forward + backward ----
    ASSIGN_OR_RETURN(const bench::Series fwd, bench::TimeSeries(*e.timer, forward, warmup, reps));
    ASSIGN_OR_RETURN(const bench::Series fwd_bwd, bench::TimeSeries(*e.timer, forward_backward, warmup, reps));
    RETURN_IF_ERROR(ops->Synchronize(s));  // also reports the engine's device error flag
    result["warmup"] = warmup;
    result["reps"] = reps;
    result["clock"] = engine == "cuda" ? "cudaEvent" : "host";
    result["fwd_ms"] = fwd.median_ms;
    result["fwd_min_ms"] = fwd.min_ms;
    result["fwdbwd_ms"] = fwd_bwd.median_ms;
    result["fwdbwd_min_ms"] = fwd_bwd.min_ms;
    // The timed runs recomputed every output from the same inputs: the ops
    // API promises the same bits each time.
    ASSIGN_OR_RETURN(std::vector<uint8_t> out_again, Download(*ops, out.desc, s));
    ASSIGN_OR_RETURN(std::vector<uint8_t> lse_again, Download(*ops, lse.desc, s));
    ASSIGN_OR_RETURN(std::vector<uint8_t> grad_qkv_again, Download(*ops, grad_qkv.desc, s));
    result["repeat_bitwise_equal"] =
        out_again == out_host && lse_again == lse_host && grad_qkv_again == grad_qkv_host;
  }
  const int documents = absl::GetFlag(FLAGS_documents);
  if (documents > 0) {
    ASSIGN_OR_RETURN(result["documents"], RunDocuments(*ops, *e.timer, s, d, documents, qkv.desc,
                                                       grad_out.desc, warmup, reps));
  }
  std::cout << result.dump() << std::endl;
  return absl::OkStatus();
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_dir).empty()) {
    std::cerr << "usage: attention_bench --dir=DIR [--engine=cuda|cpu] [--device=0] "
                 "[--warmup=5] [--reps=20]\n";
    return 2;
  }
  const absl::Status status = tessera::Run();
  if (!status.ok()) {
    std::cerr << "attention_bench: error: " << status << "\n";
    return 1;
  }
  return 0;
}
