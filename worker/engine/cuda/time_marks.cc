// GPU time marks (see time_marks.h).
#include "worker/engine/cuda/time_marks.h"

#include "absl/strings/str_cat.h"
#include "worker/engine/cuda/cuda_check.h"

namespace tessera {
namespace cuda {

TimeMarks::~TimeMarks() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

absl::Status TimeMarks::Init(int count) {
  events_.reserve(count);
  for (int i = 0; i < count; ++i) {
    cudaEvent_t e = nullptr;
    CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
    events_.push_back(e);
  }
  recorded_.assign(count, false);
  return absl::OkStatus();
}

absl::Status TimeMarks::Record(int mark, cudaStream_t stream) {
  if (mark < 0 || mark >= static_cast<int>(events_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("time mark ", mark, " is outside [0, ", events_.size(), ")"));
  }
  // While the stream is being captured, a plain record would only order the
  // graph's own nodes; an external record is a node that records the event
  // each time the graph is replayed, which is what the step's timing reads.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(stream, &capture));
  if (capture == cudaStreamCaptureStatusActive) {
    CUDA_RETURN_IF_ERROR(cudaEventRecordWithFlags(events_[mark], stream, cudaEventRecordExternal));
  } else {
    CUDA_RETURN_IF_ERROR(cudaEventRecord(events_[mark], stream));
  }
  recorded_[mark] = true;
  return absl::OkStatus();
}

absl::StatusOr<double> TimeMarks::SecondsBetween(int from, int to) const {
  for (int mark : {from, to}) {
    if (mark < 0 || mark >= static_cast<int>(events_.size()) || !recorded_[mark]) {
      return absl::FailedPreconditionError(absl::StrCat("time mark ", mark, " was not recorded"));
    }
  }
  float ms = 0.f;
  CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, events_[from], events_[to]));
  return static_cast<double>(ms) / 1e3;
}

}  // namespace cuda
}  // namespace tessera
