// See job_log.h.
#include "worker/daemon/job_log.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace tessera {
namespace {

// Cuts at a UTF-8 character boundary.
std::string Cut(const std::string& s, size_t bytes) {
  if (s.size() <= bytes) return s;
  size_t end = bytes;
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
  return s.substr(0, end) + "...";
}

}  // namespace

JobLog::JobLog(std::FILE* echo, int64_t max_lines_per_job, int max_jobs)
    : echo_(echo), max_lines_per_job_(std::max<int64_t>(1, max_lines_per_job)),
      max_jobs_(std::max(1, max_jobs)) {}

void JobLog::Write(v1::LogSeverity severity, const std::string& job_id, int rank, int step,
                   const std::string& message) {
  v1::LogLine line;
  line.set_time_unix_ms(absl::ToUnixMillis(absl::Now()));
  line.set_severity(severity);
  line.set_job_id(job_id);
  line.set_rank(rank);
  line.set_step(step);
  line.set_message(Cut(message, kMaxMessageBytes));
  {
    absl::MutexLock lock(&mu_);
    if (jobs_.count(job_id) == 0 && static_cast<int>(jobs_.size()) >= max_jobs_) {
      auto oldest = std::min_element(jobs_.begin(), jobs_.end(), [](const auto& a, const auto& b) {
        return a.second.last_write < b.second.last_write;
      });
      jobs_.erase(oldest);
    }
    Lines& lines = jobs_[job_id];
    line.set_sequence(++lines.last_sequence);
    lines.last_write = ++writes_;
    lines.lines.push_back(line);
    while (static_cast<int64_t>(lines.lines.size()) > max_lines_per_job_) lines.lines.pop_front();
  }
  if (echo_ != nullptr) {
    const std::string text = FormatLogLine(line) + "\n";
    std::fputs(text.c_str(), echo_);
    std::fflush(echo_);
  }
}

JobLog::Batch JobLog::Read(const std::string& job_id, int64_t after_sequence, int max_lines,
                           absl::Duration wait) {
  absl::MutexLock lock(&mu_);
  auto has_news = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    auto it = jobs_.find(job_id);
    return it != jobs_.end() && it->second.last_sequence > after_sequence;
  };
  mu_.AwaitWithTimeout(absl::Condition(&has_news), wait);
  Batch batch;
  batch.next_sequence = after_sequence;
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return batch;
  batch.known = true;
  const std::deque<v1::LogLine>& lines = it->second.lines;
  auto first = std::upper_bound(lines.begin(), lines.end(), after_sequence,
                                [](int64_t s, const v1::LogLine& l) { return s < l.sequence(); });
  for (auto l = first; l != lines.end() && static_cast<int>(batch.lines.size()) < max_lines; ++l) {
    batch.lines.push_back(*l);
    batch.next_sequence = l->sequence();
  }
  return batch;
}

}  // namespace tessera
