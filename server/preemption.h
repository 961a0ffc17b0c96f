// Which running jobs a pending job preempts, as one pure function so that
// the rule is unit-tested without a coordinator.
//
// The rule: only RUNNING jobs of the preemptor's device kind with strictly
// lower priority and a checkpoint.dir are candidates (a job without one
// cannot be suspended and resumed, so it is never chosen: the preemptor
// waits instead, and its reason names such jobs). Candidates are taken
// lowest priority first; among equal priorities, the most recently started
// first: it has run the least since it was set up, so suspending it
// interrupts the least (and, should its suspend checkpoint be skipped for
// lack of disk, redoes the fewest steps). Jobs are taken until the
// preemptor's gang fits, then every chosen job whose workers turn out not to
// be needed is spared again, starting with the last one taken (the one the
// rule least wanted to preempt), so no more workers are freed than the
// preemptor lacks, within what the greedy order finds.
#ifndef TESSERA_SERVER_PREEMPTION_H_
#define TESSERA_SERVER_PREEMPTION_H_

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace tessera {

// A running job as a possible victim.
struct PreemptionCandidate {
  std::string job_id;
  int priority = 0;
  int workers = 0;      // healthy workers it holds
  absl::Time started;   // when its current attempt started
  // Empty when it can be preempted; otherwise why not, in words ("has no
  // checkpoint.dir", "is still STARTING").
  std::string not_preemptible;
};

struct VictimChoice {
  // The jobs to preempt, in the order they were taken; empty when nothing
  // lets the preemptor fit.
  std::vector<std::string> victims;
  int freed = 0;  // workers they hold together
  // Why these victims, or why none: names the rule and the jobs concerned.
  std::string reason;
};

// Victims for a job of `priority` that lacks `workers_needed` workers among
// `candidates` (the running jobs of its kind that no other preemption has
// claimed).
VictimChoice ChooseVictims(int priority, int workers_needed,
                           const std::vector<PreemptionCandidate>& candidates);

}  // namespace tessera

#endif  // TESSERA_SERVER_PREEMPTION_H_
