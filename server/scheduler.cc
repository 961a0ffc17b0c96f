// FIFO gang scheduling (see scheduler.h).
#include "server/scheduler.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace tessera {

void Scheduler::Remove(const std::string& job_id) {
  queue_.erase(std::remove(queue_.begin(), queue_.end(), job_id), queue_.end());
}

bool Scheduler::Contains(const std::string& job_id) const { return Position(job_id) > 0; }

int Scheduler::Position(const std::string& job_id) const {
  for (size_t i = 0; i < queue_.size(); ++i) {
    if (queue_[i] == job_id) return static_cast<int>(i) + 1;
  }
  return 0;
}

std::optional<Placement> Scheduler::TryPlaceHead(const std::string& head_job_id,
                                                 const v1::JobSpec& spec,
                                                 const WorkerRegistry& registry) {
  if (queue_.empty() || queue_.front() != head_job_id) return std::nullopt;
  std::vector<std::string> free = registry.FreeWorkers(spec.device_kind());
  if (static_cast<int>(free.size()) < spec.world_size()) return std::nullopt;
  free.resize(spec.world_size());
  queue_.pop_front();
  return Placement{head_job_id, std::move(free)};
}

std::string Scheduler::PendingReason(const v1::JobSpec& spec, const WorkerRegistry& registry,
                                     int position) {
  std::string kind = absl::AsciiStrToUpper(v1::DeviceKind_Name(spec.device_kind()));
  int registered = registry.CountWorkers(spec.device_kind());
  int free = static_cast<int>(registry.FreeWorkers(spec.device_kind()).size());
  if (position <= 1 && free >= spec.world_size()) {
    return absl::StrCat("queued: ", spec.world_size(), " free ", kind,
                        " workers are available; starting at the next scheduling round");
  }
  std::string reason = absl::StrCat("waiting for ", spec.world_size(), " free healthy ", kind,
                                    " workers (", registered, " registered, ", free, " free)");
  if (position > 1) {
    absl::StrAppend(&reason, "; ", position - 1, " job(s) ahead in the queue");
  }
  return reason;
}

}  // namespace tessera
