// Step records deduplicated by step, latest attempt first (see step_history.h).
#include "common/step_history.h"

namespace tessera {

bool StepHistory::Add(const v1::StepMetrics& m) {
  auto [it, inserted] = steps_.try_emplace(m.step(), m);
  if (inserted) return true;
  if (m.attempt() < it->second.attempt()) return false;
  it->second = m;
  return true;
}

double StepHistory::total_tokens() const {
  double total = 0;
  for (const auto& [step, m] : steps_) total += static_cast<double>(m.tokens());
  return total;
}

double StepHistory::total_step_time_s() const {
  double total = 0;
  for (const auto& [step, m] : steps_) total += m.step_time_s();
  return total;
}

}  // namespace tessera
