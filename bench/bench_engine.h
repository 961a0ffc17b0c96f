// What every operator benchmark binary needs around the op it measures: the
// engine (CUDA, or the CPU reference for dry runs) with its own stream and a
// repetition timer, raw input/output files, and the median-of-N series.
// attention_bench and ops_bench share it, so both time and report the same
// way (bench/attention_bench.py and bench/ops_bench.py rely on that).
#ifndef TESSERA_BENCH_BENCH_ENGINE_H_
#define TESSERA_BENCH_BENCH_ENGINE_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "worker/ops/ops.h"

// The engine's own CUDA check macros are private to worker/engine/cuda; a
// bench's few direct CUDA calls (stream, events, device name, memory info)
// use this.
#define BENCH_CUDA_RETURN_IF_ERROR(expr)                                                  \
  do {                                                                                    \
    const cudaError_t bench_err_ = (expr);                                                \
    if (bench_err_ != cudaSuccess) {                                                      \
      return absl::InternalError(absl::StrCat(__FILE__, ":", __LINE__, ": ", #expr, ": ", \
                                              cudaGetErrorName(bench_err_), " (",         \
                                              cudaGetErrorString(bench_err_), ")"));      \
    }                                                                                     \
  } while (false)

namespace tessera {
namespace bench {

// Reads exactly `bytes` bytes; a file of any other size is an error.
absl::StatusOr<std::vector<uint8_t>> ReadRaw(const std::string& path, size_t bytes);
absl::Status WriteRaw(const std::string& path, const void* data, size_t bytes);
absl::Status WriteRaw(const std::string& path, const std::vector<uint8_t>& data);

// Times one repetition of a body that enqueues work on the bench stream.
class RepTimer {
 public:
  virtual ~RepTimer() = default;
  virtual absl::StatusOr<double> TimeMs(const std::function<absl::Status()>& body) = 0;
};

// The bench's stream: a non-blocking CUDA stream (engine cuda) or nullptr.
struct BenchStream {
  cudaStream_t cuda = nullptr;
  BenchStream() = default;
  BenchStream(const BenchStream&) = delete;
  BenchStream& operator=(const BenchStream&) = delete;
  ~BenchStream();
  Stream* get() const { return reinterpret_cast<Stream*>(cuda); }
};

// Members are destroyed bottom-up: the timer and the stream before the ops.
struct BenchEngine {
  std::string name, device_name = "cpu";
  std::unique_ptr<Ops> ops;
  BenchStream stream;
  std::unique_ptr<RepTimer> timer;

  bool cuda() const { return name == "cuda"; }
  Stream* s() const { return stream.get(); }
};

// Device time of a body's work on `stream`, from a cudaEvent before it to
// one after it.
absl::StatusOr<std::unique_ptr<RepTimer>> CreateCudaEventTimer(cudaStream_t stream);

// engine "cuda": the CUDA engine on `device`, a non-blocking stream and
// cudaEvent timing (device time from the first launch to the last);
// "cpu": the reference engine timed by the host clock around the body and
// a Synchronize. Anything else is INVALID_ARGUMENT.
absl::Status CreateBenchEngine(const std::string& engine, int device, BenchEngine& e);

// Median (the element at index reps / 2 of the sorted times, the scripts'
// rule) and minimum of a series.
struct Series {
  double median_ms = 0, min_ms = 0;
};

// `warmup` untimed repetitions, then `reps` >= 1 timed ones.
absl::StatusOr<Series> TimeSeries(RepTimer& timer, const std::function<absl::Status()>& body,
                                  int warmup, int reps);

}  // namespace bench
}  // namespace tessera

#endif  // TESSERA_BENCH_BENCH_ENGINE_H_
