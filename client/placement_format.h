// How the CLI prints priorities and preemption: the dry-run placement a
// coordinator answers for `tessera submit --dry-run` (as YAML comment
// lines, so the dry run's output still parses as a job file), and the
// preemption events `tessera watch` shows.
#ifndef TESSERA_CLIENT_PLACEMENT_FORMAT_H_
#define TESSERA_CLIENT_PLACEMENT_FORMAT_H_

#include <string>

#include "proto/tessera/v1/coordinator.pb.h"

namespace tessera {

// "# placement: would start now on ...", then the priority, queue position
// and one rank's memory, then one line per worker of the job's kind:
// "# worker w-1 (127.0.0.1:4001, cpu (2 cores)): free; 23.40 GiB, fits".
// Every line starts with "# " and ends with a newline.
std::string PlacementLines(const v1::PlacementExplanation& placement);

// "[preempted] by job-7 (priority 8), ..." on a victim, "[preemption]
// preempting job-2 (...) for ..." on the preemptor, and on both the cost
// once the workers are free: "[preemption] job-2's workers free 2.31 s
// after the decision; ... (0 steps to redo)".
std::string PreemptionLine(const v1::Preemption& preemption, const std::string& job_id);

}  // namespace tessera

#endif  // TESSERA_CLIENT_PLACEMENT_FORMAT_H_
