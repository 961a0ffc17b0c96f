// Writes a rank's checkpoint file from host memory on a thread of its own,
// so that training goes on while the disk works. The trainer copies its
// state into a host snapshot (fsdp_checkpoint.cc), hands the bytes here and
// returns to its steps; this writer streams them through
// RankCheckpointWriter (formats/checkpoint_io.h) with the same durability
// as a synchronous write: a temporary file, the SHA-256 computed in the same
// pass, fsync, rename, then the manifest.
//
// One write at a time: the snapshot is one buffer, reused by every
// checkpoint, so the next checkpoint waits (WaitIdle) until the previous
// write has read all of it. Cancel (from Abort) stops a write at its next
// chunk, and the partial files are removed as for any failed write.
#ifndef TESSERA_WORKER_TRAINER_BACKGROUND_CHECKPOINT_WRITER_H_
#define TESSERA_WORKER_TRAINER_BACKGROUND_CHECKPOINT_WRITER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "formats/checkpoint_io.h"
#include "worker/trainer/trainer.h"

namespace tessera {

// What one write is: the rank's files for `step` under checkpoint root
// `root`, here one file `file_name` holding [data, data + size).
struct CheckpointWriteRequest {
  std::string root;
  int64_t step = 0;
  int rank = 0;
  int world_size = 1;
  ManifestSpec spec;  // what the manifest records of the job
  std::string file_name;
  const char* data = nullptr;  // not owned; unchanged until the write ends
  size_t size = 0;
};

class BackgroundCheckpointWriter {
 public:
  BackgroundCheckpointWriter() = default;
  // Cancels a write in flight and waits for its thread.
  ~BackgroundCheckpointWriter();
  BackgroundCheckpointWriter(const BackgroundCheckpointWriter&) = delete;
  BackgroundCheckpointWriter& operator=(const BackgroundCheckpointWriter&) = delete;

  // Blocks until no write is in flight, so its bytes may be overwritten;
  // the seconds it waited.
  double WaitIdle();
  // Starts writing in the background. FAILED_PRECONDITION while another
  // write is in flight (call WaitIdle first).
  absl::Status Start(CheckpointWriteRequest request);
  // Blocks until the write of `step` ends; what it wrote, or why it failed.
  // FAILED_PRECONDITION when no write of `step` was started (results are
  // kept for the last few steps). Thread-safe.
  absl::StatusOr<CheckpointWritten> Await(int64_t step);
  // Thread-safe: the write in flight, and any started later, end with
  // CANCELLED at their next chunk.
  void Cancel();

  // Tests: runs on the writer's thread before it writes anything, so a
  // test can hold a write open while steps run.
  void set_before_write_for_test(std::function<void()> hook) { before_write_ = std::move(hook); }

 private:
  absl::StatusOr<CheckpointWritten> Write(const CheckpointWriteRequest& request);

  std::function<void()> before_write_;
  std::thread thread_;  // the write in flight, or the last one (joined by WaitIdle)
  absl::Mutex mu_;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  // Finished writes by step, the newest few.
  std::map<int64_t, absl::StatusOr<CheckpointWritten>> results_ ABSL_GUARDED_BY(mu_);
  int64_t in_flight_step_ ABSL_GUARDED_BY(mu_) = -1;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_TRAINER_BACKGROUND_CHECKPOINT_WRITER_H_
