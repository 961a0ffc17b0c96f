// Every pair of states: only the documented transitions are legal, and
// terminal states (and RESTARTING, SUSPENDED) need a reason.
#include "server/job_state_machine.h"

#include <set>
#include <utility>

#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(JobStateMachine, OnlyDocumentedTransitionsAreLegal) {
  const std::set<std::pair<v1::JobState, v1::JobState>> legal = {
      {v1::PENDING, v1::STARTING},   {v1::PENDING, v1::FAILED},   {v1::PENDING, v1::CANCELLED},
      {v1::STARTING, v1::RUNNING},   {v1::STARTING, v1::FAILED},  {v1::STARTING, v1::CANCELLED},
      {v1::RUNNING, v1::SUCCEEDED},  {v1::RUNNING, v1::FAILED},   {v1::RUNNING, v1::CANCELLED},
      {v1::STARTING, v1::RESTARTING}, {v1::RUNNING, v1::RESTARTING},
      {v1::RESTARTING, v1::STARTING}, {v1::RESTARTING, v1::FAILED},
      {v1::RESTARTING, v1::CANCELLED},
      {v1::RUNNING, v1::SUSPENDED},   {v1::SUSPENDED, v1::PENDING},
      {v1::SUSPENDED, v1::CANCELLED},
  };
  for (int from = 0; from <= 8; ++from) {
    for (int to = 0; to <= 8; ++to) {
      auto f = static_cast<v1::JobState>(from), t = static_cast<v1::JobState>(to);
      absl::Status s = CheckTransition(f, t, "why");
      if (legal.count({f, t})) {
        EXPECT_TRUE(s.ok()) << from << "->" << to;
      } else {
        EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << from << "->" << to;
      }
    }
  }
}

TEST(JobStateMachine, TerminalStatesNeedAReason) {
  EXPECT_FALSE(CheckTransition(v1::RUNNING, v1::FAILED, "").ok());
  EXPECT_TRUE(CheckTransition(v1::PENDING, v1::STARTING, "").ok());
  EXPECT_TRUE(IsTerminal(v1::CANCELLED));
  EXPECT_FALSE(IsTerminal(v1::RUNNING));
  EXPECT_FALSE(IsTerminal(v1::RESTARTING));
  // A restart says why and where it resumes.
  EXPECT_FALSE(CheckTransition(v1::RUNNING, v1::RESTARTING, "").ok());
  // RESTARTING never skips setting up again.
  EXPECT_FALSE(CheckTransition(v1::RESTARTING, v1::RUNNING, "resumed").ok());
  // A suspended job holds nothing, may be resumed, and says where it stopped.
  EXPECT_FALSE(IsTerminal(v1::SUSPENDED));
  EXPECT_FALSE(CheckTransition(v1::RUNNING, v1::SUSPENDED, "").ok());
  EXPECT_FALSE(CheckTransition(v1::SUSPENDED, v1::RUNNING, "resumed").ok());
}

}  // namespace
}  // namespace tessera
