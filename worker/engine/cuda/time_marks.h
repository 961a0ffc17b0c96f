// GPU time marks for the step's phase timing (Ops::MarkTime and
// Ops::SecondsBetween): a fixed set of CUDA events, created once when the
// engine starts, recorded on the stream between phases and read back after
// the step's final synchronize. Recording an event is asynchronous, so the
// timing adds no host wait to the step. Marks recorded while a stream is
// captured become nodes of the graph, recorded again by every replay.
#ifndef TESSERA_WORKER_ENGINE_CUDA_TIME_MARKS_H_
#define TESSERA_WORKER_ENGINE_CUDA_TIME_MARKS_H_

#include <cuda_runtime.h>

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tessera {
namespace cuda {

class TimeMarks {
 public:
  TimeMarks() = default;
  ~TimeMarks();
  TimeMarks(const TimeMarks&) = delete;
  TimeMarks& operator=(const TimeMarks&) = delete;

  // Creates `count` events on the current device.
  absl::Status Init(int count);
  absl::Status Record(int mark, cudaStream_t stream);
  // Seconds between two recorded marks; both must have been reached.
  absl::StatusOr<double> SecondsBetween(int from, int to) const;

 private:
  std::vector<cudaEvent_t> events_;
  std::vector<bool> recorded_;
};

}  // namespace cuda
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CUDA_TIME_MARKS_H_
