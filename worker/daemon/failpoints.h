// Fault injection for the worker daemon: named failpoints armed for a rank
// and a step, so recovery (restart from checkpoint, watchdogs, verified
// checkpoints) can be exercised on purpose and reproducibly instead of by
// waiting for real hardware to fail. Nothing is armed unless the operator
// passes --failpoints or sets TESSERA_FAILPOINTS; an empty spec arms nothing.
//
// Spec: entries separated by ';', each NAME@key=value[,key=value...]:
//   exit@rank=1,step=7            the process kills itself with SIGKILL (as
//                                 kill -9 or a lost host would) before step 7
//   hang@step=5                   step 5 never starts; only an Abort (the
//                                 coordinator's step watchdog) ends the wait
//   fail_collective@rank=0,step=4 step 4's collective fails on this rank:
//                                 RunSteps answers ABORTED without running it
//   corrupt_checkpoint@step=10    after this rank writes the checkpoint of
//                                 step 10, one byte of its state file flips;
//                                 restoring that step is then DATA_LOSS
//   slow@rank=0,step=3,ms=200     step 3 starts 200 ms late (abortable)
//   slow@rank=1,step=0,ms=20,steps=1000
//                                 steps 0 to 999 each start 20 ms late: a
//                                 steadily slow rank
// `step` (required) is the 0-based step about to run, or for
// corrupt_checkpoint the checkpoint's step. `rank` is optional (absent: any
// rank). `ms` is required by slow and refused elsewhere; `steps` (default 1)
// is slow's alone. The delay counts as the rank's own step time (host time
// in its step report), as a slow host's would, so the coordinator sees the
// rank as slow rather than its peers waiting for it. Each failpoint fires at
// most once per step and process, so a job restarted from a checkpoint on
// the same worker gets past it. Parsing is strict: an unknown name or key, a
// missing or repeated key, or a malformed number is INVALID_ARGUMENT naming
// the entry, and the daemon refuses to start.
#ifndef TESSERA_WORKER_DAEMON_FAILPOINTS_H_
#define TESSERA_WORKER_DAEMON_FAILPOINTS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace tessera {

enum class FailpointAction { kExit, kHang, kFailCollective, kCorruptCheckpoint, kSlow };

struct Failpoint {
  FailpointAction action = FailpointAction::kExit;
  int rank = -1;  // -1: any rank
  int step = 0;
  int ms = 0;  // slow only
  int steps = 1;  // slow only: steps [step, step + steps) are slowed

  // The entry as the spec would write it, e.g. "slow@rank=0,step=3,ms=200"
  // (",steps=N" when N > 1).
  std::string ToString() const;
};

class Failpoints {
 public:
  // The environment variable read when --failpoints is not given.
  static constexpr char kEnvironmentVariable[] = "TESSERA_FAILPOINTS";

  static absl::StatusOr<std::vector<Failpoint>> Parse(absl::string_view spec);

  explicit Failpoints(std::vector<Failpoint> armed)
      : armed_(std::move(armed)), fired_through_(armed_.size(), -1) {}

  bool empty() const { return armed_.empty(); }
  // Every armed entry, joined by ';' (what the daemon logs at startup).
  std::string ToString() const;

  // The first armed failpoint matching `rank` and `step` (within its steps)
  // not yet fired for this step or a later one, whose action runs before a
  // step (every action but corrupt_checkpoint); marks it fired through
  // `step`. Thread-safe.
  std::optional<Failpoint> TakeBeforeStep(int rank, int step);
  // The armed, not yet fired corrupt_checkpoint for `rank` and `step`.
  std::optional<Failpoint> TakeAfterCheckpoint(int rank, int step);

 private:
  std::optional<Failpoint> Take(int rank, int step, bool checkpoint);

  const std::vector<Failpoint> armed_;
  absl::Mutex mu_;
  // Per entry, the last step it fired for (-1: none yet).
  std::vector<int> fired_through_ ABSL_GUARDED_BY(mu_);
};

// The exit action: writes "tessera-worker: failpoint <entry> fired: killing
// this process (time_unix_ms=<now>)" to stderr, then SIGKILLs the process,
// so no destructor, flush or goodbye to the coordinator runs.
[[noreturn]] void KillThisProcessForFailpoint(const Failpoint& failpoint);

// The corrupt_checkpoint action: flips one byte in the middle of `path` (a
// file the rank just wrote, e.g. step-N/rank-R.state) and fsyncs it.
// NOT_FOUND if the file is missing; FAILED_PRECONDITION if it is empty.
absl::Status FlipOneByte(const std::string& path);

}  // namespace tessera

#endif  // TESSERA_WORKER_DAEMON_FAILPOINTS_H_
