// Worker sessions (see worker_sessions.h).
#include "server/worker_sessions.h"

#include <random>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace tessera {
namespace {

// 32 bytes from the kernel's generator, hex encoded.
std::string RandomSecret() {
  std::random_device device;  // /dev/urandom or the CPU's generator
  std::string bytes(32, '\0');
  for (char& b : bytes) b = static_cast<char>(device() & 0xff);
  return absl::BytesToHexString(bytes);
}

}  // namespace

std::string WorkerSessions::Issue(const std::string& worker_id) {
  std::string session = RandomSecret();
  absl::MutexLock lock(&mu_);
  worker_by_session_[session] = worker_id;
  order_.push_back(session);
  while (order_.size() > kMaxSessions) {
    worker_by_session_.erase(order_.front());
    order_.pop_front();
  }
  return session;
}

absl::Status WorkerSessions::CheckHeartbeat(const std::string& session,
                                            const std::string& worker_id) {
  absl::MutexLock lock(&mu_);
  auto it = worker_by_session_.find(session);
  if (it == worker_by_session_.end()) {
    return absl::NotFoundError("unknown worker session; register again");
  }
  if (it->second != worker_id) {
    return absl::PermissionDeniedError(absl::StrCat("worker_id: this session belongs to worker ",
                                                    it->second, ", not ", worker_id));
  }
  return absl::OkStatus();
}

absl::Status WorkerSessions::CheckRank(
    const std::string& session, const std::string& job_id,
    const std::function<std::string(const std::string&)>& job_of) {
  std::string worker_id;
  {
    absl::MutexLock lock(&mu_);
    auto it = worker_by_session_.find(session);
    if (it == worker_by_session_.end()) {
      return absl::PermissionDeniedError(
          "rendezvous: only the ranks of a job may use its keys (no worker session)");
    }
    worker_id = it->second;
  }
  if (job_of(worker_id) != job_id) {
    return absl::PermissionDeniedError(
        absl::StrCat("job_id: worker ", worker_id, " holds no rank of job ", job_id,
                     "; only the job's ranks may use its rendezvous keys"));
  }
  return absl::OkStatus();
}

}  // namespace tessera
