// Dry-run placement answers (see placement_explanation.h).
#include "server/placement_explanation.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/memory_estimate.h"
#include "common/parallelism.h"

namespace tessera {

v1::PlacementExplanation MakePlacementExplanation(const v1::JobSpec& spec,
                                                  const DryRunPlacement& dry_run,
                                                  const std::vector<v1::WorkerRecord>& workers,
                                                  const std::map<std::string, int>& priorities,
                                                  const absl::Status& admission) {
  v1::PlacementExplanation out;
  out.set_priority(spec.priority());
  out.set_queue_position(dry_run.queue_position);
  // Every rank of a shard group holds equally padded shards, so rank 0
  // needs as much as any.
  const int64_t rank_bytes = EstimateRankMemory(spec, 0, ShardGroupSize(spec)).total();
  out.set_rank_memory_bytes(rank_bytes);
  for (const v1::WorkerRecord& w : workers) {
    if (w.device().kind() != spec.device_kind()) continue;
    v1::CandidateWorker& c = *out.add_workers();
    c.set_worker_id(w.worker_id());
    c.set_address(w.address());
    c.set_device_name(w.device().name());
    c.set_memory_bytes(w.device().memory_bytes());
    c.set_healthy(w.healthy());
    c.set_busy_with_job_id(w.job_id());
    if (auto it = priorities.find(w.job_id()); it != priorities.end()) {
      c.set_busy_with_priority(it->second);
    }
    if (w.device().memory_bytes() <= 0) {
      c.set_memory_fit(v1::CandidateWorker::UNKNOWN);
    } else {
      c.set_memory_fit(rank_bytes <= w.device().memory_bytes() ? v1::CandidateWorker::FITS
                                                               : v1::CandidateWorker::TOO_SMALL);
    }
  }
  if (!admission.ok()) {
    out.set_outcome(v1::PlacementExplanation::REFUSED);
    out.set_reason(absl::StrCat("submit would refuse it: ", admission.message()));
    return out;
  }
  const std::string kind = absl::AsciiStrToUpper(v1::DeviceKind_Name(spec.device_kind()));
  switch (dry_run.outcome) {
    case DryRunPlacement::Outcome::kStartNow:
      out.set_outcome(v1::PlacementExplanation::START_NOW);
      for (const std::string& w : dry_run.worker_ids) out.add_worker_ids(w);
      out.set_reason(absl::StrCat("would start now on ", dry_run.worker_ids.size(), " free ", kind,
                                  dry_run.worker_ids.size() == 1 ? " worker: " : " workers: ",
                                  absl::StrJoin(dry_run.worker_ids, ", "), " (rank order)"));
      break;
    case DryRunPlacement::Outcome::kPreempt:
      out.set_outcome(v1::PlacementExplanation::PREEMPT);
      for (const std::string& v : dry_run.victims) out.add_preempt_job_ids(v);
      out.set_reason(absl::StrCat("would preempt ", absl::StrJoin(dry_run.victims, ", "),
                                  " and start once they release their workers: ",
                                  dry_run.reason));
      break;
    case DryRunPlacement::Outcome::kWait:
      out.set_outcome(v1::PlacementExplanation::WAIT);
      out.set_reason(absl::StrCat("would wait: ", dry_run.reason));
      break;
  }
  return out;
}

}  // namespace tessera
