// The checkpoint write that runs beside training (see
// background_checkpoint_writer.h).
#include "worker/trainer/background_checkpoint_writer.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "formats/checkpoint_io.h"

namespace tessera {
namespace {

// Bytes handed to the file per call: large enough that the checksum and the
// write() run at memory and disk speed, small enough that a cancelled write
// stops within a fraction of a second.
constexpr size_t kChunkBytes = size_t{64} << 20;
constexpr size_t kResultsKept = 4;

}  // namespace

BackgroundCheckpointWriter::~BackgroundCheckpointWriter() {
  Cancel();
  if (thread_.joinable()) thread_.join();
}

double BackgroundCheckpointWriter::WaitIdle() {
  const absl::Time start = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !busy_; };
    mu_.Await(absl::Condition(&idle));
  }
  if (thread_.joinable()) thread_.join();
  return absl::ToDoubleSeconds(absl::Now() - start);
}

absl::Status BackgroundCheckpointWriter::Start(CheckpointWriteRequest request) {
  {
    absl::MutexLock lock(&mu_);
    if (busy_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint of step ", request.step, ": the write of step ", in_flight_step_,
          " is still in flight"));
    }
    busy_ = true;
    in_flight_step_ = request.step;
    results_.erase(request.step);
  }
  if (thread_.joinable()) thread_.join();
  thread_ = std::thread([this, request = std::move(request)] {
    absl::StatusOr<CheckpointWritten> result = Write(request);
    absl::MutexLock lock(&mu_);
    results_.insert_or_assign(request.step, std::move(result));
    while (results_.size() > kResultsKept) results_.erase(results_.begin());
    busy_ = false;
    in_flight_step_ = -1;
  });
  return absl::OkStatus();
}

absl::StatusOr<CheckpointWritten> BackgroundCheckpointWriter::Await(int64_t step) {
  absl::MutexLock lock(&mu_);
  auto done = [this, step]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return in_flight_step_ != step || results_.count(step) > 0;
  };
  mu_.Await(absl::Condition(&done));
  auto it = results_.find(step);
  if (it == results_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no checkpoint of step ", step, " was started on this rank"));
  }
  return it->second;
}

void BackgroundCheckpointWriter::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
}

absl::StatusOr<CheckpointWritten> BackgroundCheckpointWriter::Write(
    const CheckpointWriteRequest& request) {
  if (before_write_) before_write_();
  const absl::Time start = absl::Now();
  auto cancelled = [this] {
    absl::MutexLock lock(&mu_);
    return cancelled_;
  };
  ASSIGN_OR_RETURN(std::unique_ptr<RankCheckpointWriter> writer,
                   RankCheckpointWriter::Begin(request.root, request.step, request.rank,
                                               request.world_size, request.spec));
  RETURN_IF_ERROR(writer->AddFile(request.file_name, [&](DurableFileWriter& out) -> absl::Status {
    for (size_t done = 0; done < request.size;) {
      if (cancelled()) {
        return absl::CancelledError(
            absl::StrCat("checkpoint of step ", request.step, ": the job was aborted"));
      }
      const size_t n = std::min(kChunkBytes, request.size - done);
      RETURN_IF_ERROR(out.Append(request.data + done, n));
      done += n;
    }
    return absl::OkStatus();
  }));
  CheckpointWritten written;
  ASSIGN_OR_RETURN(written.manifest_path, writer->Finish());
  written.bytes = static_cast<int64_t>(request.size);
  written.write_s = absl::ToDoubleSeconds(absl::Now() - start);
  return written;
}

}  // namespace tessera
