// Test-only helpers for the multi-process integration tests: start the real
// coordinator, worker and CLI binaries as child processes on loopback, wait
// for the lines they print when ready, and stop or kill them.
#ifndef TESSERA_TESTS_PROCESS_HARNESS_H_
#define TESSERA_TESTS_PROCESS_HARNESS_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tessera {
namespace testing {

// Path of a binary built by Bazel and listed in the test's `data`, e.g.
// "server/tessera-coordinator".
std::string BinaryPath(const std::string& workspace_relative);

// A file's contents ("" if it cannot be read), and the same without
// trailing newlines and spaces (a token or address file).
std::string ReadFile(const std::string& path);
std::string ReadTrimmedFile(const std::string& path);

// A fresh, empty directory under TEST_TMPDIR.
std::string MakeTempDir(const std::string& prefix);

// A TCP port on 127.0.0.1 that was free a moment ago.
int PickFreePort();

// Resident memory (VmRSS in /proc/PID/status) of any process, in bytes; -1
// once it is gone.
int64_t ResidentBytes(pid_t pid);

// The highest VmRSS of a process, sampled every 10 ms from construction
// until Stop().
class PeakResidentBytes {
 public:
  explicit PeakResidentBytes(pid_t pid);
  ~PeakResidentBytes();
  int64_t Stop();  // the highest sample

 private:
  const pid_t pid_;
  std::atomic<int64_t> peak_;
  std::atomic<bool> done_{false};
  std::thread sampler_;
};

// A child process whose stdout and stderr go to a log file.
class ChildProcess {
 public:
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(const std::string& binary,
                                                               const std::vector<std::string>& args,
                                                               const std::string& log_path);
  ~ChildProcess();  // SIGKILLs the process if it is still running

  // Waits until the log contains `needle`; returns the line holding it.
  absl::StatusOr<std::string> WaitForLine(const std::string& needle, absl::Duration timeout);
  // SIGTERM, then SIGKILL after `grace`. Returns the exit status (wait()).
  int Stop(absl::Duration grace = absl::Seconds(10));
  void Kill();
  // Waits for exit; returns the exit code, or -1 on timeout (still running).
  int WaitExit(absl::Duration timeout);
  bool Running();
  std::string Log() const;
  pid_t pid() const { return pid_; }
  int64_t ResidentBytes() const { return testing::ResidentBytes(pid_); }

 private:
  ChildProcess(pid_t pid, std::string log_path) : pid_(pid), log_path_(std::move(log_path)) {}
  pid_t pid_;
  std::string log_path_;
  bool reaped_ = false;
  int exit_code_ = -1;
};

// Runs a command to completion, capturing stdout+stderr.
struct CommandResult {
  int exit_code = -1;
  std::string output;
};
CommandResult RunCommand(const std::string& binary, const std::vector<std::string>& args,
                         absl::Duration timeout);

// A coordinator plus `num_workers` CPU workers on loopback.
class LocalCluster {
 public:
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(int num_workers,
                                                               const std::vector<std::string>& extra_coordinator_flags = {});
  std::string address() const { return address_; }
  ChildProcess& coordinator() { return *coordinator_; }
  ChildProcess& worker(int i) { return *workers_[i]; }
  // Starts one more CPU worker (a replacement, say); returns its index once
  // it has registered.
  absl::StatusOr<int> AddWorker();
  int num_workers() const { return static_cast<int>(workers_.size()); }
  // The index of the worker process that registered as `worker_id` (its
  // log's "serving on" line names it); NOT_FOUND when none did.
  absl::StatusOr<int> WorkerProcess(const std::string& worker_id);
  std::string dir() const { return dir_; }
  // Dumps every process log (for failure messages).
  std::string Logs() const;

 private:
  std::string dir_;
  std::string address_;
  std::unique_ptr<ChildProcess> coordinator_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
};

}  // namespace testing
}  // namespace tessera

#endif  // TESSERA_TESTS_PROCESS_HARNESS_H_
