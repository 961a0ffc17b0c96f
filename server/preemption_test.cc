// Victim choice: lowest priority first, then the most recently started;
// never a job of equal or higher priority or one that cannot be preempted
// (no checkpoint.dir); no more victims than the preemptor needs; and a
// reason naming the jobs either way.
#include "server/preemption.h"

#include "gtest/gtest.h"

namespace tessera {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

PreemptionCandidate Job(const std::string& id, int priority, int workers, int started_s,
                        const std::string& not_preemptible = "") {
  return {id, priority, workers, kT0 + absl::Seconds(started_s), not_preemptible};
}

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(ChooseVictims, LowestPriorityFirstThenMostRecentlyStarted) {
  const std::vector<PreemptionCandidate> running = {
      Job("job-1", 3, 1, 0), Job("job-2", 2, 1, 0), Job("job-3", 3, 1, 50),
      Job("job-4", 2, 1, 10)};
  VictimChoice one = ChooseVictims(8, 1, running);
  EXPECT_EQ(one.victims, (std::vector<std::string>{"job-4"}));  // priority 2, started last
  EXPECT_EQ(one.freed, 1);
  VictimChoice three = ChooseVictims(8, 3, running);
  EXPECT_EQ(three.victims, (std::vector<std::string>{"job-4", "job-2", "job-3"}));
  EXPECT_TRUE(Has(three.reason, "preempting job-4 (priority 2, 1 worker), job-2")) << three.reason;
  EXPECT_EQ(three.reason,
            "preempting job-4 (priority 2, 1 worker), job-2 (priority 2, 1 worker), job-3 "
            "(priority 3, 1 worker) for the 3 workers it lacks (running jobs of priority below 8 "
            "with a checkpoint.dir, the lowest priority first, then the most recently started, "
            "no more than needed)");
}

TEST(ChooseVictims, NeverEqualOrHigherPriority) {
  const std::vector<PreemptionCandidate> running = {Job("job-1", 5, 2, 0), Job("job-2", 7, 2, 0)};
  VictimChoice none = ChooseVictims(5, 2, running);
  EXPECT_TRUE(none.victims.empty());
  EXPECT_EQ(none.reason, "no running job of lower priority than 5 can be preempted");
  VictimChoice six = ChooseVictims(6, 2, running);
  EXPECT_EQ(six.victims, (std::vector<std::string>{"job-1"}));
}

TEST(ChooseVictims, JobsWithoutACheckpointDirAreNeverChosen) {
  const std::vector<PreemptionCandidate> running = {
      Job("job-1", 1, 2, 0, "has no checkpoint.dir"), Job("job-2", 2, 1, 0)};
  VictimChoice choice = ChooseVictims(9, 2, running);
  EXPECT_TRUE(choice.victims.empty());
  EXPECT_TRUE(Has(choice.reason, "would free 1 of the 2 workers it lacks")) << choice.reason;
  EXPECT_TRUE(Has(choice.reason, "not preemptible: job-1 (priority 1) has no checkpoint.dir"))
      << choice.reason;
  VictimChoice only_unpreemptible = ChooseVictims(9, 1, {running[0]});
  EXPECT_TRUE(only_unpreemptible.victims.empty());
  EXPECT_TRUE(Has(only_unpreemptible.reason, "no running job of lower priority than 9"))
      << only_unpreemptible.reason;
  // The one that can be preempted is, when it is enough.
  EXPECT_EQ(ChooseVictims(9, 1, running).victims, (std::vector<std::string>{"job-2"}));
}

TEST(ChooseVictims, SparesVictimsItDoesNotNeed) {
  // Greedy takes job-1 (1 worker) then job-2 (2): 3 workers for 2 needed.
  // job-2 alone is enough, so job-1 is spared.
  const std::vector<PreemptionCandidate> running = {Job("job-1", 1, 1, 0), Job("job-2", 2, 2, 0)};
  VictimChoice choice = ChooseVictims(5, 2, running);
  EXPECT_EQ(choice.victims, (std::vector<std::string>{"job-2"}));
  EXPECT_EQ(choice.freed, 2);
  // Needing 3, both go.
  EXPECT_EQ(ChooseVictims(5, 3, running).victims,
            (std::vector<std::string>{"job-1", "job-2"}));
}

}  // namespace
}  // namespace tessera
