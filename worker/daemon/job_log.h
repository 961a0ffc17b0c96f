// The worker's per-job log: one structured line format for everything a
// worker says about a job (severity, time, job, rank, step, message),
// printed to stderr as it is written and kept in memory so that
// `tessera logs JOB` can read every rank's lines through the coordinator
// (WorkerService.GetJobLogs) without anyone logging into the nodes.
//
// Bounded: at most `max_lines_per_job` lines per job (the oldest go first)
// and the lines of at most `max_jobs` jobs (the job written to least
// recently goes first). Thread-safe; Read can wait for new lines.
//
// Lines are printed in common/log_line_format.h's format.
#ifndef TESSERA_WORKER_DAEMON_JOB_LOG_H_
#define TESSERA_WORKER_DAEMON_JOB_LOG_H_

#include <cstdint>
#include <cstdio>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/log_line_format.h"
#include "proto/tessera/v1/worker.pb.h"

namespace tessera {

class JobLog {
 public:
  static constexpr int64_t kDefaultMaxLinesPerJob = 20'000;
  static constexpr int kDefaultMaxJobs = 16;
  static constexpr int64_t kMaxMessageBytes = 4096;

  // `echo`: where each line is also printed (null: nowhere).
  explicit JobLog(std::FILE* echo = stderr, int64_t max_lines_per_job = kDefaultMaxLinesPerJob,
                  int max_jobs = kDefaultMaxJobs);

  // Appends a line (the message cut to kMaxMessageBytes); step -1: none.
  void Write(v1::LogSeverity severity, const std::string& job_id, int rank, int step,
             const std::string& message);

  struct Batch {
    std::vector<v1::LogLine> lines;
    int64_t next_sequence = 0;
    bool known = false;
  };
  // Up to `max_lines` lines of `job_id` after `after_sequence`, waiting up
  // to `wait` for one when there is none yet.
  Batch Read(const std::string& job_id, int64_t after_sequence, int max_lines,
             absl::Duration wait);

 private:
  struct Lines {
    std::deque<v1::LogLine> lines;
    int64_t last_sequence = 0;
    int64_t last_write = 0;  // write counter, for evicting the least recent job
  };
  std::FILE* const echo_;
  const int64_t max_lines_per_job_;
  const int max_jobs_;
  absl::Mutex mu_;
  std::map<std::string, Lines> jobs_ ABSL_GUARDED_BY(mu_);
  int64_t writes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_DAEMON_JOB_LOG_H_
