// The CUDA engine's streams and captured work (Ops::CreateStream,
// BeginCapture, EndCapture, Replay): the training step queues its kernels on
// a stream the engine owns, and a steady-state step can be captured from it
// into a CUDA graph and replayed with one launch per step, so the host no
// longer issues hundreds of launches. The stream is a blocking stream: it
// stays ordered with the legacy default stream that setup, checkpoints and
// tests use, in both directions, without extra events. Capture runs in the
// thread-local mode, so a call on this thread that could not be captured
// (an allocation, a synchronisation) invalidates the capture, which then
// fails at EndCapture, instead of being silently left out of the graph.
#ifndef TESSERA_WORKER_ENGINE_CUDA_CAPTURED_WORK_H_
#define TESSERA_WORKER_ENGINE_CUDA_CAPTURED_WORK_H_

#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/ops/ops.h"

namespace tessera {
namespace cuda {

// The streams an engine handed out; destroyed with it.
class OwnedStreams {
 public:
  OwnedStreams() = default;
  ~OwnedStreams();
  OwnedStreams(const OwnedStreams&) = delete;
  OwnedStreams& operator=(const OwnedStreams&) = delete;

  // A new blocking stream on the current device.
  absl::StatusOr<cudaStream_t> Create();

 private:
  std::vector<cudaStream_t> streams_;
};

// INVALID_ARGUMENT for the legacy default stream (it cannot be captured).
absl::Status BeginCapture(cudaStream_t stream);
// The graph captured since BeginCapture, instantiated for replay.
// FAILED_PRECONDITION when `stream` is not capturing or its capture was
// invalidated; the stream is out of capture afterwards either way.
absl::StatusOr<std::unique_ptr<Ops::CapturedWork>> EndCapture(cudaStream_t stream);
// One launch of the captured graph on `stream`.
absl::Status Replay(const Ops::CapturedWork& work, cudaStream_t stream);

}  // namespace cuda
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CUDA_CAPTURED_WORK_H_
