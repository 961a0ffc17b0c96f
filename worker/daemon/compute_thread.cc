// Single-thread executor for compute calls (see compute_thread.h).
#include "worker/daemon/compute_thread.h"

namespace tessera {

ComputeThread::ComputeThread() : thread_([this] { Loop(); }) {}

ComputeThread::~ComputeThread() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void ComputeThread::Run(const std::function<void()>& task) {
  absl::MutexLock submit(&submit_mu_);
  absl::MutexLock lock(&mu_);
  task_ = &task;
  done_ = false;
  mu_.Await(absl::Condition(&done_));
}

void ComputeThread::Loop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return task_ != nullptr || stop_; };
    mu_.Await(absl::Condition(&ready));
    if (task_ == nullptr && stop_) return;
    const std::function<void()>* task = task_;
    mu_.Unlock();
    (*task)();
    mu_.Lock();
    task_ = nullptr;
    done_ = true;
  }
}

}  // namespace tessera
