// One record per step out of a job's step events, under the rule for
// restarted jobs: an attempt that resumes from a checkpoint reports the
// steps after that checkpoint again (StepMetrics.attempt tells the attempts
// apart), and for each step the record of the highest attempt is the one
// that counts, since its state is the one training continued from. Records
// of the same attempt for the same step (a replay) replace each other. The
// CLI's summary and any tool reading `tessera watch --json` use this rule,
// so every step appears exactly once.
#ifndef TESSERA_COMMON_STEP_HISTORY_H_
#define TESSERA_COMMON_STEP_HISTORY_H_

#include <map>

#include "proto/tessera/v1/job.pb.h"

namespace tessera {

class StepHistory {
 public:
  // Keeps `m` unless the step already has a record of a later attempt.
  // Returns whether it was kept.
  bool Add(const v1::StepMetrics& m);
  // By step, one record each.
  const std::map<int, v1::StepMetrics>& steps() const { return steps_; }
  // Sums over the kept records.
  double total_tokens() const;
  double total_step_time_s() const;

 private:
  std::map<int, v1::StepMetrics> steps_;
};

}  // namespace tessera

#endif  // TESSERA_COMMON_STEP_HISTORY_H_
