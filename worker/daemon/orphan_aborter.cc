// One thread that aborts the jobs it is asked to (see orphan_aborter.h).
#include "worker/daemon/orphan_aborter.h"

namespace tessera {

OrphanAborter::OrphanAborter(std::function<void(const std::string&)> abort)
    : abort_(std::move(abort)), thread_([this] { Loop(); }) {}

OrphanAborter::~OrphanAborter() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void OrphanAborter::Request(const std::string& job_id) {
  if (job_id.empty()) return;
  absl::MutexLock lock(&mu_);
  if (stopping_ || !pending_.insert(job_id).second) return;
  queue_.push_back(job_id);
}

void OrphanAborter::Loop() {
  while (true) {
    std::string job;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stopping_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      job = queue_.front();
      queue_.pop_front();
    }
    abort_(job);
    absl::MutexLock lock(&mu_);
    pending_.erase(job);
  }
}

}  // namespace tessera
