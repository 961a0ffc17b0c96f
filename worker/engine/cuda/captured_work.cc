// Streams and CUDA graph capture for the CUDA engine (see captured_work.h).
#include "worker/engine/cuda/captured_work.h"

#include "absl/strings/str_cat.h"
#include "worker/engine/cuda/cuda_check.h"

namespace tessera {
namespace cuda {
namespace {

class CudaGraph : public Ops::CapturedWork {
 public:
  explicit CudaGraph(cudaGraphExec_t exec) : exec_(exec) {}
  ~CudaGraph() override { cudaGraphExecDestroy(exec_); }
  cudaGraphExec_t exec() const { return exec_; }

 private:
  cudaGraphExec_t exec_;
};

}  // namespace

OwnedStreams::~OwnedStreams() {
  for (cudaStream_t s : streams_) cudaStreamDestroy(s);
}

absl::StatusOr<cudaStream_t> OwnedStreams::Create() {
  cudaStream_t stream = nullptr;
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamDefault));
  streams_.push_back(stream);
  return stream;
}

absl::Status BeginCapture(cudaStream_t stream) {
  if (stream == nullptr) {
    return absl::InvalidArgumentError(
        "stream: the default stream cannot be captured; queue the work on a CreateStream stream");
  }
  CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Ops::CapturedWork>> EndCapture(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (stream == nullptr || cudaStreamIsCapturing(stream, &status) != cudaSuccess ||
      status == cudaStreamCaptureStatusNone) {
    (void)cudaGetLastError();
    return absl::FailedPreconditionError("EndCapture: the stream is not being captured");
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  if (ended != cudaSuccess || graph == nullptr) {
    (void)cudaGetLastError();  // the invalidation is reported here, not left sticky
    if (graph != nullptr) cudaGraphDestroy(graph);
    return absl::FailedPreconditionError(
        absl::StrCat("the capture was invalidated by work that cannot be captured: ",
                     cudaGetErrorString(ended)));
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (instantiated != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::InternalError(
        absl::StrCat("cudaGraphInstantiate: ", cudaGetErrorString(instantiated)));
  }
  return std::unique_ptr<Ops::CapturedWork>(new CudaGraph(exec));
}

absl::Status Replay(const Ops::CapturedWork& work, cudaStream_t stream) {
  const auto* graph = dynamic_cast<const CudaGraph*>(&work);
  if (graph == nullptr) {
    return absl::InvalidArgumentError("work: was not captured by the CUDA engine");
  }
  CUDA_RETURN_IF_ERROR(cudaGraphLaunch(graph->exec(), stream));
  return absl::OkStatus();
}

}  // namespace cuda
}  // namespace tessera
