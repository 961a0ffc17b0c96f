// Gang scheduling over a FIFO queue. The job at the head of the queue runs
// only when `world_size` healthy, free workers of its device kind exist, and
// then takes all of them at once; jobs behind it wait (strict FIFO, so a
// large job is never starved by smaller ones). Every waiting job gets a
// human-readable reason and its queue position.
#ifndef TESSERA_SERVER_SCHEDULER_H_
#define TESSERA_SERVER_SCHEDULER_H_

#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "proto/tessera/v1/job.pb.h"
#include "server/worker_registry.h"

namespace tessera {

struct Placement {
  std::string job_id;
  std::vector<std::string> worker_ids;  // rank order
};

class Scheduler {
 public:
  void Enqueue(const std::string& job_id) { queue_.push_back(job_id); }
  // Removes a job (cancelled while pending). No-op if absent.
  void Remove(const std::string& job_id);
  bool Contains(const std::string& job_id) const;
  // 1-based position, 0 if not queued.
  int Position(const std::string& job_id) const;

  // If the head job fits, pops it and returns its placement (workers are not
  // yet marked assigned; the caller does that).
  std::optional<Placement> TryPlaceHead(const std::string& head_job_id,
                                        const v1::JobSpec& spec,
                                        const WorkerRegistry& registry);
  const std::deque<std::string>& queue() const { return queue_; }

  // Why `spec` cannot run now.
  static std::string PendingReason(const v1::JobSpec& spec, const WorkerRegistry& registry,
                                   int position);

 private:
  std::deque<std::string> queue_;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_SCHEDULER_H_
