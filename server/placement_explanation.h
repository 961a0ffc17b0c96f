// The answer to a dry-run placement (Coordinator.ExplainPlacement): the
// scheduler's dry run (scheduler.h) for a job submitted now, put together
// with every registered worker of the job's device kind, whether one rank's
// memory estimate (common/memory_estimate.h, the figure SetupJob checks)
// fits what the worker registered, and which job holds each busy worker.
// A pure function, so it is unit-tested without a coordinator.
#ifndef TESSERA_SERVER_PLACEMENT_EXPLANATION_H_
#define TESSERA_SERVER_PLACEMENT_EXPLANATION_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/tessera/v1/coordinator.pb.h"
#include "server/scheduler.h"

namespace tessera {

// `spec` carries the coordinator's defaults. `admission` is submit's memory
// admission (memory_admission.h): when it refuses, so does the answer
// (REFUSED, with its message). `priorities`: the priority of each job that
// holds workers.
v1::PlacementExplanation MakePlacementExplanation(const v1::JobSpec& spec,
                                                  const DryRunPlacement& dry_run,
                                                  const std::vector<v1::WorkerRecord>& workers,
                                                  const std::map<std::string, int>& priorities,
                                                  const absl::Status& admission);

}  // namespace tessera

#endif  // TESSERA_SERVER_PLACEMENT_EXPLANATION_H_
