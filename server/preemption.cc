// Victim choice for preemption (see preemption.h).
#include "server/preemption.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessera {
namespace {

std::string Describe(const PreemptionCandidate& c) {
  return absl::StrCat(c.job_id, " (priority ", c.priority, ", ", c.workers,
                      c.workers == 1 ? " worker)" : " workers)");
}

}  // namespace

VictimChoice ChooseVictims(int priority, int workers_needed,
                           const std::vector<PreemptionCandidate>& candidates) {
  VictimChoice choice;
  std::vector<const PreemptionCandidate*> eligible;
  std::vector<std::string> protected_jobs;  // lower priority, but not preemptible
  for (const PreemptionCandidate& c : candidates) {
    if (c.priority >= priority) continue;
    if (!c.not_preemptible.empty()) {
      protected_jobs.push_back(absl::StrCat(c.job_id, " (priority ", c.priority, ") ",
                                            c.not_preemptible));
      continue;
    }
    eligible.push_back(&c);
  }
  std::sort(eligible.begin(), eligible.end(),
            [](const PreemptionCandidate* a, const PreemptionCandidate* b) {
              if (a->priority != b->priority) return a->priority < b->priority;
              if (a->started != b->started) return a->started > b->started;
              return a->job_id < b->job_id;
            });
  std::vector<const PreemptionCandidate*> taken;
  int freed = 0;
  for (const PreemptionCandidate* c : eligible) {
    if (freed >= workers_needed) break;
    taken.push_back(c);
    freed += c->workers;
  }
  if (freed < workers_needed) {
    std::string why =
        eligible.empty()
            ? absl::StrCat("no running job of lower priority than ", priority,
                           " can be preempted")
            : absl::StrCat("preempting every running job of lower priority that can be (",
                           absl::StrJoin(eligible, ", ",
                                         [](std::string* out, const PreemptionCandidate* c) {
                                           out->append(Describe(*c));
                                         }),
                           ") would free ", freed, " of the ", workers_needed,
                           " workers it lacks");
    if (!protected_jobs.empty()) {
      absl::StrAppend(&why, "; not preemptible: ", absl::StrJoin(protected_jobs, ", "));
    }
    choice.reason = std::move(why);
    return choice;
  }
  // Spare the victims whose workers are not needed, the last taken first.
  for (int i = static_cast<int>(taken.size()) - 1; i >= 0; --i) {
    if (freed - taken[i]->workers >= workers_needed) {
      freed -= taken[i]->workers;
      taken.erase(taken.begin() + i);
    }
  }
  choice.freed = freed;
  for (const PreemptionCandidate* c : taken) choice.victims.push_back(c->job_id);
  choice.reason = absl::StrCat(
      "preempting ",
      absl::StrJoin(taken, ", ",
                    [](std::string* out, const PreemptionCandidate* c) {
                      out->append(Describe(*c));
                    }),
      " for the ", workers_needed, workers_needed == 1 ? " worker" : " workers",
      " it lacks (running jobs of priority below ", priority,
      " with a checkpoint.dir, the lowest priority first, then the most recently started, no "
      "more than needed)");
  return choice;
}

}  // namespace tessera
