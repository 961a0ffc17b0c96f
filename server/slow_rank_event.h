// Turns the straggler detector's decisions (straggler_detector.h) into what
// people and tools see: the job event (WARNING when a rank is named, INFO
// when it is cleared) with a one-line message naming the rank, its worker
// and that worker's address, how much slower it is and over how many steps;
// and the SlowRank entry kept on the job record while it stays named.
#ifndef TESSERA_SERVER_SLOW_RANK_EVENT_H_
#define TESSERA_SERVER_SLOW_RANK_EVENT_H_

#include <string>

#include "proto/tessera/v1/coordinator.pb.h"
#include "server/straggler_detector.h"

namespace tessera {

v1::SlowRank ToSlowRank(const StragglerChange& change, const std::string& worker_id,
                        const std::string& address);

v1::SlowRankChange MakeSlowRankChange(const StragglerChange& change, const std::string& worker_id,
                                      const std::string& address);

// Replaces or removes `change.rank`'s entry in `job.slow_ranks`, kept in
// rank order.
void ApplySlowRankChange(const v1::SlowRankChange& change, v1::Job& job);

}  // namespace tessera

#endif  // TESSERA_SERVER_SLOW_RANK_EVENT_H_
