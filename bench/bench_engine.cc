// The benchmarks' engine, files and timing (see bench_engine.h).
#include "bench/bench_engine.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/engine/cpu/cpu_ops.h"
#include "worker/engine/cuda/cuda_ops.h"

namespace tessera {
namespace bench {
namespace {

class CudaEventTimer : public RepTimer {
 public:
  static absl::StatusOr<std::unique_ptr<CudaEventTimer>> Create(cudaStream_t stream) {
    std::unique_ptr<CudaEventTimer> t(new CudaEventTimer(stream));
    BENCH_CUDA_RETURN_IF_ERROR(cudaEventCreate(&t->start_));
    BENCH_CUDA_RETURN_IF_ERROR(cudaEventCreate(&t->stop_));
    return t;
  }
  ~CudaEventTimer() override {
    if (start_ != nullptr) cudaEventDestroy(start_);
    if (stop_ != nullptr) cudaEventDestroy(stop_);
  }
  absl::StatusOr<double> TimeMs(const std::function<absl::Status()>& body) override {
    BENCH_CUDA_RETURN_IF_ERROR(cudaEventRecord(start_, stream_));
    RETURN_IF_ERROR(body());
    BENCH_CUDA_RETURN_IF_ERROR(cudaEventRecord(stop_, stream_));
    BENCH_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop_));
    float ms = 0.f;
    BENCH_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start_, stop_));
    return static_cast<double>(ms);
  }

 private:
  explicit CudaEventTimer(cudaStream_t stream) : stream_(stream) {}
  cudaStream_t stream_;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

class HostClockTimer : public RepTimer {
 public:
  HostClockTimer(Ops& ops, Stream* stream) : ops_(ops), stream_(stream) {}
  absl::StatusOr<double> TimeMs(const std::function<absl::Status()>& body) override {
    const auto start = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(body());
    RETURN_IF_ERROR(ops_.Synchronize(stream_));
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
        .count();
  }

 private:
  Ops& ops_;
  Stream* stream_;
};

}  // namespace

absl::StatusOr<std::vector<uint8_t>> ReadRaw(const std::string& path, size_t bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::vector<uint8_t> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (data.size() != bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", data.size(), " bytes, expected ", bytes));
  }
  return data;
}

absl::Status WriteRaw(const std::string& path, const void* data, size_t bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

absl::Status WriteRaw(const std::string& path, const std::vector<uint8_t>& data) {
  return WriteRaw(path, data.data(), data.size());
}

BenchStream::~BenchStream() {
  if (cuda != nullptr) cudaStreamDestroy(cuda);
}

absl::StatusOr<std::unique_ptr<RepTimer>> CreateCudaEventTimer(cudaStream_t stream) {
  ASSIGN_OR_RETURN(std::unique_ptr<CudaEventTimer> timer, CudaEventTimer::Create(stream));
  return std::unique_ptr<RepTimer>(std::move(timer));
}

absl::Status CreateBenchEngine(const std::string& engine, int device, BenchEngine& e) {
  e.name = engine;
  if (e.cuda()) {
    // TESSERA_BENCH_CUBLASLT_WORKSPACE_MIB: another cuBLASLt workspace size
    // for this run (GEMM plans choose among the algorithms it admits).
    CudaEngineOptions options;
    if (const char* mib = std::getenv("TESSERA_BENCH_CUBLASLT_WORKSPACE_MIB"); mib != nullptr) {
      options.cublaslt_workspace_bytes = size_t(std::atol(mib)) << 20;
    }
    // TESSERA_BENCH_ATTENTION: tessera (default), tessera_one_pass,
    // tessera_two_pass, tessera_atomic, cudnn, cudnn_atomic or auto
    // (CudaEngineOptions::attention, attention_atomic_backward and
    // attention_backward_passes).
    if (const char* a = std::getenv("TESSERA_BENCH_ATTENTION"); a != nullptr) {
      const std::string choice = a;
      if (choice == "cudnn" || choice == "cudnn_atomic") {
        options.attention = CudaEngineOptions::Attention::kCudnn;
        options.attention_atomic_backward = choice == "cudnn_atomic";
      } else if (choice == "auto") {
        options.attention = CudaEngineOptions::Attention::kAuto;
      } else if (choice == "tessera_one_pass") {
        options.attention_backward_passes = CudaEngineOptions::BackwardPasses::kOnePass;
      } else if (choice == "tessera_two_pass") {
        options.attention_backward_passes = CudaEngineOptions::BackwardPasses::kTwoPass;
      } else if (choice == "tessera_atomic") {
        options.attention_atomic_backward = true;
      } else if (choice != "tessera") {
        return absl::InvalidArgumentError(
            absl::StrCat("TESSERA_BENCH_ATTENTION: '", choice,
                         "' is not tessera, tessera_one_pass, tessera_two_pass, tessera_atomic, "
                         "cudnn, cudnn_atomic or auto"));
      }
    }
    // TESSERA_BENCH_KEY_BANDS: the deterministic backward's key bands
    // (CudaEngineOptions::attention_key_bands; unset or 0: the rule).
    if (const char* bands = std::getenv("TESSERA_BENCH_KEY_BANDS"); bands != nullptr) {
      options.attention_key_bands = std::atoi(bands);
    }
    ASSIGN_OR_RETURN(e.ops, CreateCudaOps(device, options));
    BENCH_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
    cudaDeviceProp prop;
    BENCH_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device));
    e.device_name = prop.name;
    BENCH_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&e.stream.cuda, cudaStreamNonBlocking));
    ASSIGN_OR_RETURN(e.timer, CudaEventTimer::Create(e.stream.cuda));
  } else if (engine == "cpu") {
    e.ops = CreateCpuOps();
    e.timer = std::make_unique<HostClockTimer>(*e.ops, e.s());
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--engine: cuda or cpu, got '", engine, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Series> TimeSeries(RepTimer& timer, const std::function<absl::Status()>& body,
                                  int warmup, int reps) {
  if (reps < 1) return absl::InvalidArgumentError("TimeSeries: reps must be >= 1");
  for (int i = 0; i < warmup; ++i) RETURN_IF_ERROR(timer.TimeMs(body).status());
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    ASSIGN_OR_RETURN(double t, timer.TimeMs(body));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  return Series{ms[ms.size() / 2], ms.front()};
}

}  // namespace bench
}  // namespace tessera
