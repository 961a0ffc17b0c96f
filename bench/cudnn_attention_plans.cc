// Times one execution plan of cuDNN's fused attention, for choosing among
// the plans cuDNN can make for a graph (cudnn_attention.h,
// ListPlanCandidates): the configurations its heuristics list and the
// knob variants of the first. A candidate that faults the device ends the
// process (exit 3); bench/cudnn_attention_plans.sh then starts another at
// the next candidate.
//
// For the candidate, on fresh random bf16 inputs: the graph's outputs are
// computed with the default plan (the one the engine runs) and with the
// candidate, and compared (relative L2 of out and lse for the forward, of
// grad_qkv for the backward); the candidate runs twice more to say whether
// it repeats its bits; then it is timed (median of --reps after --warmup,
// CUDA events around each call).
//
//   cudnn_attention_plans --shape=B,H,KV,T,D --kind=forward|backward|backward_atomic --list
//   cudnn_attention_plans --shape=B,H,KV,T,D --kind=... [--first=N --last=M --warmup=5 --reps=20]
//
// Prints one JSON line: the candidate list, or per candidate {candidate,
// description, ok, error, ms, workspace_bytes, rel_diff,
// repeat_bitwise_equal}. A candidate that leaves the device in error ends
// the process with exit code 3 after its line; the script resumes after it.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
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
#include "worker/engine/cpu/bf16.h"
#include "worker/engine/cuda/cudnn_attention.h"

ABSL_FLAG(std::string, shape, "1,32,8,8192,128", "B,H,KV,T,D");
ABSL_FLAG(std::string, kind, "backward", "forward, backward (deterministic) or backward_atomic");
ABSL_FLAG(bool, list, false, "print the candidate list and exit");
ABSL_FLAG(int, first, 0, "the first candidate to time");
ABSL_FLAG(int, last, -1, "the last candidate to time (-1: through the end of the list)");
ABSL_FLAG(int, warmup, 5, "untimed calls first");
ABSL_FLAG(int, reps, 20, "timed calls");
ABSL_FLAG(uint32_t, seed, 1, "input seed");

namespace tessera {
namespace {

struct DeviceBytes {
  void* p = nullptr;
  size_t bytes = 0;
  ~DeviceBytes() { Reset(); }
  void Reset() {
    if (p != nullptr) cudaFree(p);
    p = nullptr;
    bytes = 0;
  }
  absl::Status Allocate(size_t n) {
    bytes = n;
    BENCH_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, std::max<size_t>(n, 256)));
    return absl::OkStatus();
  }
  template <typename T>
  absl::StatusOr<std::vector<T>> Download() const {
    std::vector<T> host(bytes / sizeof(T));
    BENCH_CUDA_RETURN_IF_ERROR(cudaMemcpy(host.data(), p, bytes, cudaMemcpyDeviceToHost));
    return host;
  }
};

absl::StatusOr<cuda::AttentionShape> ParseShape(const std::string& text) {
  std::vector<std::string> parts = absl::StrSplit(text, ',');
  int64_t v[5];
  if (parts.size() != 5) return absl::InvalidArgumentError("--shape: B,H,KV,T,D");
  for (int i = 0; i < 5; ++i) {
    if (!absl::SimpleAtoi(parts[i], &v[i]) || v[i] <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("--shape: '", parts[i], "' is not a positive integer"));
    }
  }
  cuda::AttentionShape s;
  s.batch = v[0];
  s.heads = static_cast<int>(v[1]);
  s.kv_heads = static_cast<int>(v[2]);
  s.seq = v[3];
  s.head_dim = static_cast<int>(v[4]);
  return s;
}

absl::StatusOr<int> ParseKind(const std::string& kind) {
  if (kind == "forward") return cuda::CudnnAttention::kForward;
  if (kind == "backward") return cuda::CudnnAttention::kBackwardDeterministic;
  if (kind == "backward_atomic") return cuda::CudnnAttention::kBackwardAtomic;
  return absl::InvalidArgumentError(
      absl::StrCat("--kind: forward, backward or backward_atomic, got '", kind, "'"));
}

absl::Status UploadRandomBf16(DeviceBytes& d, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<uint16_t> host(d.bytes / 2);
  for (uint16_t& x : host) x = cpu::FloatToBf16(normal(rng));
  BENCH_CUDA_RETURN_IF_ERROR(cudaMemcpy(d.p, host.data(), d.bytes, cudaMemcpyHostToDevice));
  return absl::OkStatus();
}

template <typename T>
double ToFloat(T x) {
  if constexpr (std::is_same_v<T, uint16_t>) {
    return cpu::Bf16ToFloat(x);
  } else {
    return x;
  }
}

template <typename T>
double RelativeL2(const std::vector<T>& got, const std::vector<T>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = ToFloat(got[i]), w = ToFloat(want[i]);
    num += (g - w) * (g - w);
    den += w * w;
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

absl::Status Run() {
  ASSIGN_OR_RETURN(const cuda::AttentionShape shape, ParseShape(absl::GetFlag(FLAGS_shape)));
  ASSIGN_OR_RETURN(const int kind, ParseKind(absl::GetFlag(FLAGS_kind)));
  if (absl::GetFlag(FLAGS_first) < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--first: must be >= 0, got ", absl::GetFlag(FLAGS_first)));
  }
  BENCH_CUDA_RETURN_IF_ERROR(cudaSetDevice(0));
  ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudnnAttention> cudnn, cuda::CudnnAttention::Create());
  nlohmann::json result = {{"shape", absl::GetFlag(FLAGS_shape)},
                           {"kind", absl::GetFlag(FLAGS_kind)},
                           {"cudnn_version", cuda::CudnnAttention::Version()}};
  if (absl::GetFlag(FLAGS_list)) {
    ASSIGN_OR_RETURN(std::vector<std::string> list, cudnn->ListPlanCandidates(shape, kind));
    result["candidates"] = list;
    std::cout << result.dump() << std::endl;
    return absl::OkStatus();
  }
  const int64_t tokens = shape.batch * shape.seq;
  const int64_t qkv_width = int64_t(shape.heads + 2 * shape.kv_heads) * shape.head_dim;
  const int64_t out_width = int64_t(shape.heads) * shape.head_dim;
  DeviceBytes qkv, out, lse, grad_out, grad_qkv, workspace;
  RETURN_IF_ERROR(qkv.Allocate(tokens * qkv_width * 2));
  RETURN_IF_ERROR(out.Allocate(tokens * out_width * 2));
  RETURN_IF_ERROR(lse.Allocate(tokens * shape.heads * sizeof(float)));
  RETURN_IF_ERROR(grad_out.Allocate(tokens * out_width * 2));
  RETURN_IF_ERROR(grad_qkv.Allocate(tokens * qkv_width * 2));
  std::mt19937 rng(absl::GetFlag(FLAGS_seed));
  RETURN_IF_ERROR(UploadRandomBf16(qkv, rng));
  RETURN_IF_ERROR(UploadRandomBf16(grad_out, rng));
  cudaStream_t stream = nullptr;
  BENCH_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  const bool forward = kind == cuda::CudnnAttention::kForward;
  const bool deterministic = kind == cuda::CudnnAttention::kBackwardDeterministic;
  // Workspace for whichever plan is cached for (shape, kind) now.
  const auto size_workspace = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(const size_t need, forward ? cudnn->ForwardWorkspaceBytes(shape)
                                                : cudnn->BackwardWorkspaceBytes(shape, deterministic));
    if (need > workspace.bytes) {
      workspace.Reset();
      RETURN_IF_ERROR(workspace.Allocate(need));
    }
    result["workspace_bytes"] = need;
    return absl::OkStatus();
  };
  // The forward always runs the default plan when timing a backward: the
  // backward's inputs (out, lse) are the same for every candidate.
  if (!forward) {
    DeviceBytes forward_workspace;
    ASSIGN_OR_RETURN(const size_t fw, cudnn->ForwardWorkspaceBytes(shape));
    RETURN_IF_ERROR(forward_workspace.Allocate(fw));
    RETURN_IF_ERROR(cudnn->Forward(shape, qkv.p, out.p, static_cast<float*>(lse.p),
                                   forward_workspace.p, stream));
    BENCH_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  }
  const auto call = [&]() -> absl::Status {
    if (forward) {
      return cudnn->Forward(shape, qkv.p, out.p, static_cast<float*>(lse.p), workspace.p, stream);
    }
    return cudnn->Backward(shape, deterministic, grad_out.p, qkv.p, out.p,
                           static_cast<const float*>(lse.p), grad_qkv.p, workspace.p, stream);
  };
  // What the graph gives: out and lse, or grad_qkv.
  const auto outputs = [&]() -> absl::StatusOr<std::pair<std::vector<uint16_t>, std::vector<float>>> {
    BENCH_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    if (forward) {
      ASSIGN_OR_RETURN(std::vector<uint16_t> o, out.Download<uint16_t>());
      ASSIGN_OR_RETURN(std::vector<float> l, lse.Download<float>());
      return std::make_pair(std::move(o), std::move(l));
    }
    ASSIGN_OR_RETURN(std::vector<uint16_t> g, grad_qkv.Download<uint16_t>());
    return std::make_pair(std::move(g), std::vector<float>());
  };

  ASSIGN_OR_RETURN(result["default"], cudnn->PlanDescription(shape, kind));
  RETURN_IF_ERROR(size_workspace());
  RETURN_IF_ERROR(call());
  ASSIGN_OR_RETURN(const auto reference, outputs());

  ASSIGN_OR_RETURN(const std::vector<std::string> candidates,
                   cudnn->ListPlanCandidates(shape, kind));
  const int first_index = absl::GetFlag(FLAGS_first);
  const int last_index = absl::GetFlag(FLAGS_last) < 0
                             ? static_cast<int>(candidates.size()) - 1
                             : std::min<int>(absl::GetFlag(FLAGS_last), candidates.size() - 1);
  ASSIGN_OR_RETURN(std::unique_ptr<bench::RepTimer> timer, bench::CreateCudaEventTimer(stream));
  for (int index = first_index; index <= last_index; ++index) {
    nlohmann::json line = result;
    line["candidate"] = index;
    line["listed_as"] = candidates[index];
    // One candidate: its error is its line's, unless the device is left
    // in error (then the process ends).
    const absl::Status measured = [&]() -> absl::Status {
      ASSIGN_OR_RETURN(line["description"], cudnn->UsePlanCandidate(shape, kind, index));
      RETURN_IF_ERROR(size_workspace());
      line["workspace_bytes"] = result["workspace_bytes"];
      RETURN_IF_ERROR(call());
      ASSIGN_OR_RETURN(const auto once, outputs());
      RETURN_IF_ERROR(call());
      ASSIGN_OR_RETURN(const auto twice, outputs());
      line["rel_diff"] = RelativeL2(once.first, reference.first);
      if (forward) line["lse_rel_diff"] = RelativeL2(once.second, reference.second);
      line["repeat_bitwise_equal"] = once == twice;
      line["bitwise_equal_to_default"] = once == reference;
      ASSIGN_OR_RETURN(const bench::Series series,
                       bench::TimeSeries(*timer, call, absl::GetFlag(FLAGS_warmup),
                                         absl::GetFlag(FLAGS_reps)));
      line["ms"] = series.median_ms;
      line["min_ms"] = series.min_ms;
      return absl::OkStatus();
    }();
    line["ok"] = measured.ok();
    if (!measured.ok()) line["error"] = std::string(measured.message());
    std::cout << line.dump() << std::endl;
    if (cudaDeviceSynchronize() != cudaSuccess || cudaGetLastError() != cudaSuccess) {
      std::cerr << "cudnn_attention_plans: candidate " << index << " left the device in error"
                << std::endl;
      std::exit(3);
    }
  }
  cudaStreamDestroy(stream);
  return absl::OkStatus();
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const absl::Status s = tessera::Run();
  if (!s.ok()) {
    std::cerr << "cudnn_attention_plans: " << s << std::endl;
    return 1;
  }
  return 0;
}
